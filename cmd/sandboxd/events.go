package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

func eventsCommand() *command {
	return &command{name: "events", summary: "the audit trail (--follow to keep printing)",
		long: `With --json, one JSON object per line (JSON Lines), so each line parses on its own.
With --follow, --timeout is how long to follow: the command then ends with exit 0.`,
		globals: gClient, setup: func(fs *flag.FlagSet) runFunc {
			since := fs.Uint64("since", 0, "only events after this sequence number `N`")
			follow := fs.Bool("follow", false, "keep printing new events until interrupted (or --timeout)")
			return func(ctx context.Context, inv *invocation) int { return runEvents(ctx, inv, *since, *follow) }
		}}
}

// followWait is how long one --follow request waits for a new event (the daemon allows
// up to 60 s).
const followWait = 30 * time.Second

func runEvents(ctx context.Context, inv *invocation, since uint64, follow bool) int {
	c := inv.client()
	if follow {
		// --timeout bounds the whole follow, not each long poll; reaching it is the
		// normal end of a follow, not a failure.
		c = &client.Client{SocketPath: inv.g.socket}
		if inv.g.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, inv.g.timeout)
			defer cancel()
		}
	}
	next := since
	for {
		path := fmt.Sprintf("/v1/events?since=%d", next)
		wait := time.Duration(0)
		if follow {
			wait = followWait
			if dl, ok := ctx.Deadline(); ok {
				wait = max(0, min(wait, time.Until(dl)))
			}
			path += "&wait=" + wait.Round(time.Millisecond).String()
		}
		var page api.EventsPage
		err := c.Do(ctx, "GET", path, nil, &page, wait)
		if follow && ctx.Err() != nil {
			return exitOK // interrupted, or --timeout reached
		}
		if err != nil {
			return failure(err, inv, inv.disks())
		}
		if page.Dropped && next > 0 {
			fmt.Fprintf(inv.stderr, "%s: some events after %d were dropped from the 1,000-event trail\n", inv.name, next)
		}
		for _, e := range page.Events {
			if inv.g.json {
				b, err := json.Marshal(e)
				if err != nil {
					return failure(fmt.Errorf("encode event %d: %w", e.Seq, err), inv, inv.disks())
				}
				fmt.Fprintf(inv.stdout, "%s\n", b)
				continue
			}
			fmt.Fprintf(inv.stdout, "%6d %s %-18s %-16s %s\n", e.Seq, e.Time.Format(time.RFC3339), e.Kind, e.Subject, e.Message)
		}
		if page.Next > next {
			next = page.Next
		}
		if !follow {
			return exitOK
		}
	}
}
