package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// exitLeaks is `sandboxd jobs leaks`' status when it found any (CONTRACT §9).
const exitLeaks = 1

// jobsCommand is `sandboxd jobs`: the job registry (CONTRACT §11) for shell runners.
func jobsCommand() *command {
	return &command{name: "jobs", summary: "the job registry: list, end ID, heartbeat ID, leases, leaks (the loud leak check)",
		deflt: "list",
		subs: []*command{
			{name: "list", summary: "every job: state, reason, processes, lease and deadline",
				globals: gClient, maxArgs: 0, run: runJobsList},
			{name: "end", summary: "end a job (or every job of --lease NAME): SIGTERM, SIGKILL after its grace; returns once no process is left",
				args: "ID | --lease NAME", minArgs: 0, maxArgs: 1, globals: gClient,
				setup: func(fs *flag.FlagSet) runFunc {
					noWait := fs.Bool("no-wait", false, "answer at once (state ending) instead of once the job is gone")
					lease := fs.String("lease", "", "end every job of the shared lease `NAME` instead of one job")
					ownerS := fs.String("owner", "", "the `UID` whose job (or lease) it is: ids are each owner's own; default yours, else the only one of that id")
					return func(ctx context.Context, inv *invocation) int {
						if (*lease == "") == (len(inv.args) == 0) {
							return inv.usageErr("give a job ID or --lease NAME, not both")
						}
						var owner *uint32
						if *ownerS != "" {
							n, err := strconv.ParseUint(*ownerS, 10, 32)
							if err != nil {
								return inv.usageErr("--owner %q: want a uid (a number)", *ownerS)
							}
							u := uint32(n)
							owner = &u
						}
						if *lease != "" {
							l, err := inv.client().EndLeaseOf(ctx, *lease, owner, !*noWait, 10*time.Minute)
							if err != nil {
								return failure(err, inv, noDisk)
							}
							return printLease(inv, l)
						}
						j, err := inv.client().EndJobOf(ctx, inv.args[0], owner, !*noWait, 10*time.Minute)
						if err != nil {
							return failure(err, inv, noDisk)
						}
						return printJob(inv, j)
					}
				}},
			{name: "heartbeat", summary: "renew a job's lease, or with --lease NAME a shared one (from the runner, never from the job)",
				args: "ID | --lease NAME", minArgs: 0, maxArgs: 1, globals: gClient,
				setup: func(fs *flag.FlagSet) runFunc {
					extend := fs.Duration("extend", 0, "renew the lease by this `DURATION` (default: the job's ttl)")
					lease := fs.String("lease", "", "renew the shared lease `NAME`: every job of it, one call")
					return func(ctx context.Context, inv *invocation) int {
						if *extend < 0 {
							return inv.usageErr("--extend %s is negative", api.FormatDuration(*extend))
						}
						if (*lease == "") == (len(inv.args) == 0) {
							return inv.usageErr("give a job ID or --lease NAME, not both")
						}
						if *lease != "" {
							l, err := inv.client().HeartbeatLease(ctx, *lease, *extend)
							if err != nil {
								return failure(err, inv, noDisk)
							}
							return printLease(inv, l)
						}
						j, err := inv.client().Heartbeat(ctx, inv.args[0], *extend)
						if err != nil {
							return failure(err, inv, noDisk)
						}
						return printHeartbeat(inv, j)
					}
				}},
			{name: "leases", summary: "the shared (session) leases: jobs, running, renewed until",
				globals: gClient, maxArgs: 0, run: runLeasesList},
			{name: "leaks", summary: "the loud leak check: exit 0 none, 1 leaks found (also after --clean), 69 cannot check",
				globals: gClient, maxArgs: 0,
				long: `Lists jobs that could not be emptied (leaked), live processes a site's <id>.pid names that no
job holds past [jobs] unleased_max, and non-empty cgroups under the jobs root the registry
does not know, and processes that escaped their job's cgroup but carry its SANDBOXD_JOB_ID
(reported, never ended). --clean ends each other one first, and still exits 1: a check that cleans up silently
is a cleanup step, not a check.`,
				setup: func(fs *flag.FlagSet) runFunc {
					clean := fs.Bool("clean", false, "end every leak found (and still exit 1)")
					return func(ctx context.Context, inv *invocation) int { return runJobsLeaks(ctx, inv, *clean) }
				}},
		}}
}

func runJobsList(ctx context.Context, inv *invocation) int {
	p, err := inv.client().Jobs(ctx)
	if err != nil {
		return failure(err, inv, noDisk)
	}
	if inv.g.json {
		printJSON(inv.stdout, p)
		return exitOK
	}
	if !p.Available {
		fmt.Fprintf(inv.stdout, "jobs unavailable: %s\n", p.Reason)
		return exitOK
	}
	if len(p.Jobs) == 0 {
		fmt.Fprintf(inv.stdout, "no jobs (cgroup root %s)\n", p.Root)
		return exitOK
	}
	// Grouped by lease: the jobs with a lease of their own first, then each shared lease
	// (issue 20 item 4) with its jobs under it.
	// A lease is its owner's (names are each owner's own), so two uids' "ci" are two groups.
	groups, names := map[string][]api.Job{}, []string{}
	for _, j := range p.Jobs {
		key := ""
		if j.Lease != "" {
			key = ownedName(j.Lease, j.Owner)
		}
		if _, ok := groups[key]; !ok && key != "" {
			names = append(names, key)
		}
		groups[key] = append(groups[key], j)
	}
	sort.Strings(names)
	if len(names) == 0 {
		printJobTable(inv, p.Jobs)
		return exitOK
	}
	if own := groups[""]; len(own) > 0 {
		fmt.Fprintf(inv.stdout, "own leases (%d jobs)\n", len(own))
		printJobTable(inv, own)
	}
	for _, n := range names {
		running := 0
		for _, j := range groups[n] {
			if j.State == api.JobRunning {
				running++
			}
		}
		fmt.Fprintf(inv.stdout, "lease %s (%d jobs, %d running)\n", n, len(groups[n]), running)
		printJobTable(inv, groups[n])
	}
	return exitOK
}

// ownedName is a job id or lease name as the tables show it: ID for root's, ID@UID for
// another uid's (ids are each owner's own, issue 21; the job's cgroup is named the same).
func ownedName(name string, owner *api.JobOwner) string {
	if owner == nil || owner.UID == 0 {
		return name
	}
	return name + "@" + strconv.FormatUint(uint64(owner.UID), 10)
}

func printJobTable(inv *invocation, jobs []api.Job) {
	tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREASON\tPROCS\tPID\tSITE\tSTARTED\tLEASE\tDEADLINE")
	now := time.Now()
	for _, j := range jobs {
		lease, deadline := "-", "-"
		if j.State == api.JobRunning {
			lease, deadline = untilText(now, j.LeaseExpiresAt), untilText(now, j.DeadlineAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", ownedName(j.ID, j.Owner), j.State, dash(j.Reason), j.Processes, j.PID,
			dash(j.Site), j.StartedAt.Local().Format("15:04:05"), lease, deadline)
	}
	tw.Flush()
}

func runLeasesList(ctx context.Context, inv *invocation) int {
	p, err := inv.client().Leases(ctx)
	if err != nil {
		return failure(err, inv, noDisk)
	}
	if inv.g.json {
		printJSON(inv.stdout, p)
		return exitOK
	}
	if len(p.Leases) == 0 {
		fmt.Fprintln(inv.stdout, "no shared leases")
		return exitOK
	}
	tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tJOBS\tRUNNING\tTTL\tRENEWED UNTIL\tHEARTBEATS")
	now := time.Now()
	for _, l := range p.Leases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\n", ownedName(l.Name, l.Owner), len(l.Jobs), l.Running,
			api.FormatDuration(time.Duration(l.TTLSeconds*float64(time.Second))), untilText(now, l.LeaseExpiresAt), l.Heartbeats)
	}
	tw.Flush()
	return exitOK
}

func printLease(inv *invocation, l *api.Lease) int {
	if inv.g.json {
		printJSON(inv.stdout, l)
		return exitOK
	}
	fmt.Fprintf(inv.stdout, "lease %s: %d jobs, %d running, renewed until %s\n", l.Name, len(l.Jobs), l.Running,
		l.LeaseExpiresAt.Local().Format("15:04:05"))
	for _, w := range l.Warnings {
		fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
	}
	return exitOK
}

func untilText(now, t time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return "lapsed"
	}
	return "in " + api.FormatDuration(d)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printJob(inv *invocation, j *api.Job) int {
	if inv.g.json {
		printJSON(inv.stdout, j)
		return exitOK
	}
	line := fmt.Sprintf("job %s: %s", j.ID, j.State)
	if j.Reason != "" {
		line += " (" + j.Reason + ")"
	}
	switch j.State {
	case api.JobRunning:
		line += fmt.Sprintf(", %d processes, lease until %s, deadline %s", j.Processes,
			j.LeaseExpiresAt.Local().Format("15:04:05"), j.DeadlineAt.Local().Format("2006-01-02 15:04:05"))
	case api.JobEnding, api.JobLeaked:
		line += fmt.Sprintf(", %d processes left in %s", j.Processes, j.Cgroup)
	}
	fmt.Fprintln(inv.stdout, line)
	for _, w := range j.Warnings {
		fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
	}
	return exitOK
}

// printHeartbeat prints a heartbeat's answer, which does not count the job's processes
// (api.HeartbeatAnswer): no process count, rather than a false 0.
func printHeartbeat(inv *invocation, j *api.Job) int {
	if inv.g.json {
		printJSON(inv.stdout, api.HeartbeatAnswer{Job: *j})
		return exitOK
	}
	fmt.Fprintf(inv.stdout, "job %s: %s, lease until %s, deadline %s\n", j.ID, j.State,
		j.LeaseExpiresAt.Local().Format("15:04:05"), j.DeadlineAt.Local().Format("2006-01-02 15:04:05"))
	for _, w := range j.Warnings {
		fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
	}
	return exitOK
}

func runJobsLeaks(ctx context.Context, inv *invocation, clean bool) int {
	rep, err := inv.client().Leaks(ctx, clean)
	if err != nil {
		code := failure(err, inv, noDisk)
		if _, ok := err.(*client.ProblemError); ok && code != exitUnreachable {
			// Any refusal means the check did not run: never 0, never "no leaks".
			fmt.Fprintf(inv.stderr, "%s: the leak check could not run\n", inv.name)
			return exitUnreachable
		}
		return code
	}
	if inv.g.json {
		printJSON(inv.stdout, rep)
	} else if len(rep.Leaks) == 0 {
		fmt.Fprintln(inv.stdout, "no leaks")
	} else {
		fmt.Fprintf(inv.stdout, "%d leak(s):\n", len(rep.Leaks))
		for _, l := range rep.Leaks {
			s := fmt.Sprintf("  %s: %s", l.Kind, l.Detail)
			if clean {
				if l.Cleaned {
					s += " — ended"
				} else {
					s += " — could not end: " + l.Error
				}
			}
			fmt.Fprintln(inv.stdout, s)
		}
	}
	if len(rep.Leaks) > 0 {
		what := leakSummary(rep.Leaks, clean)
		fmt.Fprintf(inv.stderr, "%s: %d leak(s) %s\n", inv.name, len(rep.Leaks), what)
		return exitLeaks
	}
	return exitOK
}

// statusJobs is the JOBS section of `sandboxd status`: counts by state, the oldest running
// job and the next lease to lapse; or why jobs are unavailable here.
func statusJobs(w io.Writer, st *api.Status, now time.Time) {
	j := st.Jobs
	if j == nil {
		return
	}
	fmt.Fprintln(w, "\nJOBS")
	if !j.Available {
		fmt.Fprintf(w, "  unavailable: %s\n", j.Reason)
		return
	}
	fmt.Fprintf(w, "  %d running, %d ending, %d leaked, %d ended (cgroup root %s)\n", j.Running, j.Ending, j.Leaked, j.Ended, j.Root)
	if j.Oldest != "" && j.OldestStartedAt != nil {
		fmt.Fprintf(w, "  oldest %s, started %s\n", j.Oldest, ago(*j.OldestStartedAt, now))
	}
	if j.NextLapse != "" && j.NextLapseAt != nil {
		fmt.Fprintf(w, "  next to lapse %s, %s\n", j.NextLapse, untilText(now, *j.NextLapseAt))
	}
}

// leakSummary is what the leak check's last stderr line says of the leaks found: with
// --clean, what the clean did (an end that failed is no clean).
func leakSummary(leaks []api.Leak, clean bool) string {
	if !clean {
		return "found"
	}
	ended := 0
	for _, l := range leaks {
		if l.Cleaned {
			ended++
		}
	}
	switch ended {
	case len(leaks):
		return "found and cleaned (still a failure: they had leaked)"
	case 0:
		return "found; none could be ended (see above)"
	}
	return fmt.Sprintf("found; %d ended, %d could not be (see above)", ended, len(leaks)-ended)
}
