package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// runCommand is `sandboxd run ... -- CMD`: the launch check of CONTRACT §5 and the job's
// registration in one call, then CMD started straight in the job's cgroup (runspawn.go,
// issue 27), so CMD and whatever it forks live in the job's cgroup under its lease
// (CONTRACT §11); where the kernel refuses that, run registers its own process and execs
// CMD in place, as before. It sends no heartbeat: a job
// that renewed its own lease would be no dead-man switch; the runner that owns the job
// beats for it (`sandboxd jobs heartbeat ID`) or lets the ttl end it.
func runCommand() *command {
	return &command{name: "run", summary: "a launch check, then CMD run as a job in its own cgroup, under a lease",
		args: "[--] CMD [ARG...]", minArgs: 1, maxArgs: -1, rawArgs: true, globals: gClient, usageStatus: exitRunFailed,
		long: `The exit status is CMD's, as with docker run, env and timeout, except:
  125  sandboxd refused or failed: the launch check refused (disk_full, replace_sandbox,
       mount_unavailable, ...), the registration was refused (conflict, jobs_unavailable,
       state_unavailable, ...), the daemon could not be reached, or a usage error. The
       refusal's code and detail are on stderr ("sandboxd run: refused: disk_full: ..."),
       the problem document on stdout with --json and in --problem-file FILE.
       sandboxd launch keeps the specific statuses (73, 10, 75, ...).
  126  CMD was found but could not be run;  127  CMD was not found.
With --detach (-d) the launch check and the registration happen in the foreground; then
the job id is printed on stdout, CMD runs detached (its own session, stdin /dev/null,
stdout and stderr to --stdout FILE and --stderr FILE, else /dev/null) and run exits 0,
or 125 with the refusal, CMD never started.
CMD starts straight in the job's cgroup (clone3 CLONE_INTO_CGROUP) as run's child: run
forwards SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH to it, exits
with its status or dies of its signal, and its own death kills CMD. Where the kernel
refuses the spawn (before Linux 5.7; a non-root runner of a root daemon) the daemon moves
run itself into the job's cgroup and run execs CMD in place. sandboxd learns the processes
from the kernel (a pidfd, SO_PEERPIDFD), so run works from a container's own pid
namespace too.
The job's id is printed on stderr (and exported to CMD as SANDBOXD_JOB_ID), so the runner
can send heartbeats: sandboxd run sends none itself.`,
		setup: func(fs *flag.FlagSet) runFunc {
			id := fs.String("id", "", "the job `ID` (the site's job id; generated when left out)")
			site := fs.String("site", "", "the `NAME` of the site the job writes to")
			lease := fs.String("lease", "", "a shared lease `NAME` (e.g. the session's): one heartbeat of it renews every job of it")
			ttl := fs.Duration("ttl", 0, "the lease: without a heartbeat within it the job is ended (default [jobs] default_ttl)")
			life := fs.Duration("max-lifetime", 0, "the hard cap, whatever the heartbeats (default [jobs] max_lifetime)")
			grace := fs.Duration("grace", 0, "time between SIGTERM and SIGKILL when it is ended (default [jobs] grace)")
			needBytes := fs.String("need-bytes", "", "free bytes the command needs, `SIZE`")
			needInodes := fs.Uint64("need-inodes", 0, "free inodes the command needs (a count `N`)")
			var mounts multiFlag
			fs.Var(&mounts, "mount", "a mount `NAME` the command needs (repeatable)")
			var labels multiFlag
			fs.Var(&labels, "label", "a label `KEY=VALUE` of the job (repeatable)")
			var det detachFlags
			fs.BoolVar(&det.on, "detach", false, "check and register in the foreground, print the job id, then run CMD detached")
			fs.BoolVar(&det.on, "d", false, "short for --detach")
			fs.StringVar(&det.stdout, "stdout", "", "with --detach: CMD's stdout goes to `FILE` (created or truncated; default /dev/null)")
			fs.StringVar(&det.stderr, "stderr", "", "with --detach: CMD's stderr goes to `FILE` (created or truncated; default /dev/null)")
			problemFile := fs.String("problem-file", "", "on exit 125, write the refusal's problem document (JSON) to `FILE`")
			serverUID := fs.Int("server-uid", -1, "the `UID` the daemon runs as; the socket's server is trusted only as that uid (default: root or this user)")
			return func(ctx context.Context, inv *invocation) int {
				launch := api.LaunchRequest{Site: *site, Mounts: mounts}
				job := api.JobRequest{ID: *id, Site: *site, Lease: *lease} // no pid: the daemon learns it from the kernel (SO_PEERCRED), in its own pid namespace
				if *needBytes != "" {
					n, err := api.ParseSize(*needBytes)
					if err != nil {
						return inv.usageErr("--need-bytes: %v", err)
					}
					launch.NeedBytes = &n
				}
				var bad string
				fs.Visit(func(f *flag.Flag) {
					d := func(v *time.Duration) *api.Duration {
						if *v <= 0 {
							bad = "--" + f.Name + " must be longer than 0s"
						}
						x := api.Duration(*v)
						return &x
					}
					switch f.Name {
					case "need-inodes":
						launch.NeedInodes = needInodes
					case "ttl":
						job.TTL = d(ttl)
					case "max-lifetime":
						job.MaxLifetime = d(life)
					case "grace":
						g := api.Duration(*grace)
						job.Grace = &g
					}
				})
				if bad != "" {
					return inv.usageErr("%s", bad)
				}
				for _, l := range labels {
					k, v, ok := cutLabel(l)
					if !ok {
						return inv.usageErr("--label %q: want KEY=VALUE", l)
					}
					if job.Labels == nil {
						job.Labels = map[string]string{}
					}
					job.Labels[k] = v
				}
				// The command will run wherever the server says: trust only the daemon (issue 21).
				inv.serverUIDs = []uint32{0}
				if os.Geteuid() != 0 {
					inv.serverUIDs = append(inv.serverUIDs, uint32(os.Geteuid()))
				}
				if *serverUID >= 0 {
					inv.serverUIDs = []uint32{uint32(*serverUID)}
				}
				if det.on {
					return runDetached(inv, det, *problemFile)
				}
				return runJob(ctx, inv, launch, job, inv.args, *problemFile)
			}
		}}
}

func runJob(ctx context.Context, inv *invocation, launch api.LaunchRequest, req api.JobRequest, argv []string, problemFile string) int {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return inv.usageErr("no command to run after --")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(inv.stderr, "%s: %v\n", inv.name, err)
		return 127
	}
	c := inv.client()
	if os.Getenv(detachFDEnv) == "" {
		if code, done := spawnJob(ctx, inv, launch, req, path, argv, problemFile); done {
			return code
		}
	}
	resp, err := c.Launch(ctx, launch)
	if err != nil {
		return runFailed(err, inv, inv.siteDisk(launch.Site), problemFile)
	}
	if resp.Advice != nil {
		fmt.Fprintf(inv.stderr, "%s: advice: %s: %s\n", inv.name, *resp.Advice, resp.Detail)
	}
	j, err := c.RegisterJob(ctx, req)
	if err != nil {
		return runFailed(err, inv, inv.siteDisk(launch.Site), problemFile)
	}
	if reportDetached(j) {
		// The detached child: the parent printed the id; stdio are the caller's files.
		os.Unsetenv(detachFDEnv)
	}
	for _, w := range append(resp.Warnings, j.Warnings...) {
		fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
	}
	if inv.g.json {
		printJSON(inv.stderr, j)
	} else {
		fmt.Fprintf(inv.stderr, "%s: job %s (cgroup %s, lease until %s, deadline %s)\n", inv.name, j.ID, j.Cgroup,
			j.LeaseExpiresAt.Format("15:04:05"), j.DeadlineAt.Format("2006-01-02 15:04:05"))
	}
	env := append(os.Environ(), api.JobIDEnv+"="+j.ID, api.JobCgroupEnv+"="+j.Cgroup)
	// exec keeps this pid, which is already in the job's cgroup: CMD is the job.
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(inv.stderr, "%s: exec %s: %v\n", inv.name, path, err)
	return 126
}

func cutLabel(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '=' {
			return s[:i], s[i+1:], i > 0
		}
	}
	return "", "", false
}
