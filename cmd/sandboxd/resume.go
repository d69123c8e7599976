package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// exitReplace is `sandboxd resume`'s status for the replace verdict.
const exitReplace = 10

func runResume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cf clientFlags
	fs := newFlagSet("resume", stderr)
	cf.register(fs)
	deadline := fs.Duration("deadline", 30*time.Second, "the call's deadline")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	d := api.Duration(*deadline)
	run, err := cf.client().Resume(ctx, api.ResumeRequest{Deadline: &d})
	if err != nil {
		return failure(err, &cf, "/", stdout, stderr)
	}
	printRun(stdout, run, cf.json)
	if run.Verdict == api.VerdictReplace {
		return exitReplace
	}
	return exitOK
}

func runReclaim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cf clientFlags
	fs := newFlagSet("reclaim", stderr)
	cf.register(fs)
	dry := fs.Bool("dry-run", false, "show the plan and what each source would free; change nothing")
	target := fs.String("target-free", "", "reclaim until this much is free (e.g. 2GiB)")
	release := fs.Bool("release-reserve", false, "release the emergency reserve file (salvage)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	req := api.ReclaimRequest{DryRun: *dry, ReleaseReserve: *release}
	if *target != "" {
		n, err := api.ParseSize(*target)
		if err != nil {
			fmt.Fprintf(stderr, "sandboxd reclaim: --target-free: %v\n", err)
			return exitUsage
		}
		req.TargetFree = &n
	}
	run, err := cf.client().Reclaim(ctx, req)
	if err != nil {
		return failure(err, &cf, "/", stdout, stderr)
	}
	printRun(stdout, run, cf.json)
	for _, a := range run.Actions {
		if a.Status == api.ActionFailed {
			return 1
		}
	}
	return exitOK
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
	fmt.Fprintf(w, "verdict: %s%s\n%s\n", run.Verdict, cached, run.Detail)
	for _, a := range run.Actions {
		e := ""
		if a.Error != "" {
			e = "  error: " + a.Error
		}
		fmt.Fprintf(w, "  %-9s %-15s %-24s %10s %8d files  %s%s\n", a.Status, a.Kind, a.Source,
			api.FormatSize(uint64(max(a.FreedBytes, 0))), a.FreedFiles, a.Path, e)
	}
	for _, u := range run.Usage {
		fmt.Fprintf(w, "  usage %10s %8d files  %s\n", api.FormatSize(uint64(max(u.Bytes, 0))), u.Files, u.Path)
	}
}
