package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestEventLoggedOnce: every reclaim event was logged twice, once by reclaim (with
// component=) and once by the event log (with seq=) — issue 14, item 7. Once, with both.
func TestEventLoggedOnce(t *testing.T) {
	var buf syncBuffer
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	td := startDaemon(t, "site = []\n[[filesystem]]\npath = \""+mnt+"\"\nreserve = \"0\"\n", func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	})
	run, err := td.client.Reclaim(context.Background(), api.ReclaimRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 5*time.Second, "the dry run's event", func() bool {
		page, err := td.client.Events(context.Background(), 0)
		if err != nil {
			return false
		}
		for _, ev := range page.Events {
			if ev.Kind == api.EventReclaimRun && ev.Subject == "manual" {
				return true
			}
		}
		return false
	})
	var lines []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "kind=reclaim") && strings.Contains(l, "subject=manual") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "seq=") || !strings.Contains(lines[0], "component=reclaim") {
		t.Fatalf("the dry run (%s) was logged %d times, want once with seq= and component=:\n%s\n(all: %s)", run.Verdict, len(lines), strings.Join(lines, "\n"), buf.String())
	}
}
