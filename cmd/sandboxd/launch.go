package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/sandboxd/sandboxd/api"
)

func launchCommand() *command {
	return &command{name: "launch", summary: "the write-site call, for shell launchers",
		long: `Prunes the site's stale files and checks that the command's needs fit: exit 0 when they do
(advice on stderr), else the refusal's status (73 disk_full, 10 replace_sandbox, 75
mount_unavailable or filesystem_unavailable, ...) with its detail on stderr; 69 when the daemon gives no verdict.`,
		globals: gClient, setup: func(fs *flag.FlagSet) runFunc {
			site := fs.String("site", "", "the `NAME` of the site (may be left out when exactly one is configured)")
			needBytes := fs.String("need-bytes", "", "free bytes the command needs, `SIZE` in bytes or e.g. 1MiB")
			needInodes := fs.Uint64("need-inodes", 0, "free inodes the command needs (a count `N`)")
			deadline := fs.Duration("deadline", 0, "the call's deadline (default [launch] deadline)")
			var mounts multiFlag
			fs.Var(&mounts, "mount", "a mount `NAME` the command needs (repeatable)")
			job := fs.String("job", "", "your job `ID` the command is for: the required mounts tied to it gate the launch too")
			return func(ctx context.Context, inv *invocation) int {
				req := api.LaunchRequest{Site: *site, Mounts: mounts, Job: *job}
				if *needBytes != "" {
					n, err := api.ParseSize(*needBytes)
					if err != nil {
						return inv.usageErr("--need-bytes: %v", err)
					}
					req.NeedBytes = &n
				}
				fs.Visit(func(f *flag.Flag) {
					switch f.Name {
					case "need-inodes":
						req.NeedInodes = needInodes
					case "deadline":
						d := api.Duration(*deadline)
						req.Deadline = &d
					}
				})
				if *deadline < 0 {
					return inv.usageErr("--deadline %s is negative", api.FormatDuration(*deadline))
				}
				return runLaunch(ctx, inv, req)
			}
		}}
}

func runLaunch(ctx context.Context, inv *invocation, req api.LaunchRequest) int {
	resp, err := inv.client().Launch(ctx, req)
	if err != nil {
		return failure(err, inv, inv.siteDisk(req.Site))
	}
	if inv.g.json {
		printJSON(inv.stdout, resp)
	} else {
		fmt.Fprintf(inv.stdout, "ok: %s\n", resp.Detail)
	}
	if resp.Advice != nil {
		fmt.Fprintf(inv.stderr, "%s: advice: %s: %s\n", inv.name, *resp.Advice, resp.Detail)
	}
	// Warnings (a site that is not cleaned, fields this daemon ignored) go to stderr even
	// on success: the launch goes on, and the person reading its log sees why.
	for _, w := range resp.Warnings {
		fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
	}
	return exitOK
}
