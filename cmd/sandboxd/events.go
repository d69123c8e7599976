package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func eventsCommand() *command {
	return &command{name: "events", summary: "the audit trail (--follow to keep printing)", globals: gClient,
		setup: func(fs *flag.FlagSet) runFunc {
			since := fs.Uint64("since", 0, "only events after this sequence `N`")
			follow := fs.Bool("follow", false, "keep printing new events until interrupted (or --timeout)")
			return func(ctx context.Context, inv *invocation) int { return runEvents(ctx, inv, *since, *follow) }
		}}
}

func runEvents(ctx context.Context, inv *invocation, since uint64, follow bool) int {
	stdout, stderr := inv.stdout, inv.stderr
	c := inv.client()
	next := since
	for {
		path := fmt.Sprintf("/v1/events?since=%d", next)
		if follow {
			path += "&wait=30s"
		}
		var page api.EventsPage
		err := c.Do(ctx, "GET", path, nil, &page, 31*time.Second)
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			return failure(err, inv, "/")
		}
		if page.Dropped && next > 0 {
			fmt.Fprintf(stderr, "sandboxd: some events after %d were dropped from the 1,000-event trail\n", next)
		}
		for _, e := range page.Events {
			if inv.g.json {
				printJSON(stdout, e)
				continue
			}
			fmt.Fprintf(stdout, "%6d %s %-18s %-16s %s\n", e.Seq, e.Time.Format(time.RFC3339), e.Kind, e.Subject, e.Message)
		}
		if page.Next > next {
			next = page.Next
		}
		if !follow {
			return exitOK
		}
	}
}
