package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// exitReplace is `sandboxd resume`'s status for the replace verdict.
const exitReplace = 10

func resumeCommand() *command {
	return &command{name: "resume", summary: "the resume hook: self-heal and print the verdict",
		long: "Exit 0 for healthy, reclaimed or low (still short but above replace_below), 10 for replace (the sandbox holds data that is not regenerable), " +
			"75 when a watched filesystem could not be measured (its statfs fails: filesystem_unavailable; the verdict is about the others).",
		globals: gClient, setup: func(fs *flag.FlagSet) runFunc {
			deadline := fs.Duration("deadline", 30*time.Second, "the call's deadline")
			return func(ctx context.Context, inv *invocation) int {
				if *deadline <= 0 {
					return inv.usageErr("--deadline %s: give a positive duration", api.FormatDuration(*deadline))
				}
				d := api.Duration(*deadline)
				run, err := inv.client().Resume(ctx, api.ResumeRequest{Deadline: &d})
				if err != nil {
					return failure(err, inv, inv.disks())
				}
				printRun(inv.stdout, run, inv.g.json)
				if run.Verdict == api.VerdictReplace {
					return exitReplace
				}
				if len(run.Unmeasured) > 0 {
					// The verdict is about the measured filesystems only: never 0 for the others.
					return api.CodeFilesystemUnavailable.ExitCode()
				}
				return exitOK
			}
		}}
}

func reclaimCommand() *command {
	return &command{name: "reclaim", summary: "reclaim now, or show the plan with --dry-run",
		long:    "Exit 0, or 1 if an action failed. A dry run changes nothing and is open to any user who can reach the socket.",
		globals: gClient, setup: func(fs *flag.FlagSet) runFunc {
			dry := fs.Bool("dry-run", false, "show the plan and what each source would free; change nothing")
			target := fs.String("target-free", "", "reclaim until this much is free, `SIZE` e.g. 2GiB")
			release := fs.Bool("release-reserve", false, "release the emergency reserve file on purpose (see `sandboxd reserve release`)")
			reason := fs.String("reason", "", "with --release-reserve: what the room is for, `TEXT`")
			return func(ctx context.Context, inv *invocation) int {
				req := api.ReclaimRequest{DryRun: *dry, ReleaseReserve: *release, Reason: *reason}
				if *target != "" {
					n, err := api.ParseSize(*target)
					if err != nil {
						return inv.usageErr("--target-free: %v", err)
					}
					req.TargetFree = &n
				}
				run, err := inv.client().Reclaim(ctx, req)
				if err != nil {
					return failure(err, inv, inv.disks())
				}
				printRun(inv.stdout, run, inv.g.json)
				for _, a := range run.Actions {
					if a.Status == api.ActionFailed {
						return 1
					}
				}
				return exitOK
			}
		}}
}

func printRun(w io.Writer, run *api.ReclaimRun, asJSON bool) {
	if asJSON {
		printJSON(w, run)
		return
	}
	cached := ""
	if run.Cached {
		cached = " (cached result of a run under 10 s ago)"
	}
	if run.DryRun {
		cached += " (dry run: what is on disk now; the plan and its projection below)"
	}
	fmt.Fprintf(w, "verdict: %s%s\n%s\n", run.Verdict, cached, run.Detail)
	for _, a := range run.Actions {
		e := ""
		if a.Error != "" {
			e = "  error: " + a.Error
		}
		fmt.Fprintf(w, "  %-9s %-15s %-24s %10s %9s files  %s%s\n", a.Status, a.Kind, a.Source,
			size(a.FreedBytes), count(a.FreedFiles), a.Path, e)
	}
	for _, u := range run.Usage {
		fmt.Fprintf(w, "  usage %10s %9s files  %s\n", size(u.Bytes), count(u.Files), u.Path)
	}
}
