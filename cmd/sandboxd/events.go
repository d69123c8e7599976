package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cf clientFlags
	fs := newFlagSet("events", stderr)
	cf.register(fs)
	since := fs.Uint64("since", 0, "only events after this sequence number")
	follow := fs.Bool("follow", false, "keep printing new events until interrupted")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	c := cf.client()
	next := *since
	for {
		path := fmt.Sprintf("/v1/events?since=%d", next)
		if *follow {
			path += "&wait=30s"
		}
		var page api.EventsPage
		err := c.Do(ctx, "GET", path, nil, &page, 31*time.Second)
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			return failure(err, &cf, "/", stdout, stderr)
		}
		if page.Dropped && next > 0 {
			fmt.Fprintf(stderr, "sandboxd: some events after %d were dropped from the 1,000-event trail\n", next)
		}
		for _, e := range page.Events {
			if cf.json {
				printJSON(stdout, e)
				continue
			}
			fmt.Fprintf(stdout, "%6d %s %-18s %-16s %s\n", e.Seq, e.Time.Format(time.RFC3339), e.Kind, e.Subject, e.Message)
		}
		if page.Next > next {
			next = page.Next
		}
		if !*follow {
			return exitOK
		}
	}
}
