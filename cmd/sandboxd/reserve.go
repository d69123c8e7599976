package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// reserveCommand is `sandboxd reserve release`: a writer's explicit release of the reserve
// file (CONTRACT §13). No launch, run, resume or automatic reclaim releases it: given to the
// workload, the next command ate it and the box stopped at 100% with nothing to release.
func reserveCommand() *command {
	return &command{name: "reserve", summary: "the emergency reserve file: release it on purpose",
		subs: []*command{{name: "release", summary: "release the reserve now, saying what the room is for",
			globals: gClient, maxArgs: 0,
			long: `The reserve is held so a full sandbox can still boot and be read; sandboxd itself releases it only
at a shutdown below replace_below and in ` + "`sandboxd boot`" + `. Release it here to make room for
reading, downloading or removing files: its room is then not counted as the workload's (a
launch is still refused and resume still says replace while the rest is below replace_below),
and the file is written again once free space is at or above the reclaim threshold plus
reclaim.headroom plus the reserve. Exit 0, or 1 if the release failed.`,
			setup: func(fs *flag.FlagSet) runFunc {
				reason := fs.String("reason", "", "what the room is for, `TEXT` (required), e.g. \"download the agent's work\"")
				return func(ctx context.Context, inv *invocation) int {
					if strings.TrimSpace(*reason) == "" {
						return inv.usageErr("--reason is required: say what the room is for")
					}
					run, err := inv.client().Reclaim(ctx, api.ReclaimRequest{ReleaseReserve: true, Reason: *reason})
					if err != nil {
						return failure(err, inv, inv.disks())
					}
					if inv.g.json {
						printJSON(inv.stdout, run)
					}
					released := false
					for _, a := range run.Actions {
						if a.Kind != api.ActionReleaseReserve {
							continue
						}
						if a.Status == api.ActionFailed {
							fmt.Fprintf(inv.stderr, "sandboxd: releasing %s failed: %s\n", a.Path, a.Error)
							return 1
						}
						released = true
						if !inv.g.json {
							fmt.Fprintf(inv.stdout, "released %s (%s) for: %s\n", a.Path, size(a.FreedBytes), *reason)
						}
					}
					if !released && !inv.g.json {
						fmt.Fprintln(inv.stdout, "no reserve file to release (none configured, or it is already released)")
					}
					if !inv.g.json {
						fmt.Fprintf(inv.stdout, "verdict: %s\n%s\n", run.Verdict, run.Detail)
					}
					return exitOK
				}
			}}}}
}
