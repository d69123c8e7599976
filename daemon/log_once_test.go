package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
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
	// The event log appends an event, then logs it after releasing its lock: wait for the
	// line too, then count.
	poll(t, time.Minute, "the dry run's event and its log line", func() bool {
		page, err := td.client.Events(context.Background(), 0)
		if err != nil || !strings.Contains(buf.String(), "subject=manual") {
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

// TestMountEventLoggedOnce: mount events too were two lines (mountwatch's own with
// component=, the event log's with seq=).
func TestMountEventLoggedOnce(t *testing.T) {
	var buf syncBuffer
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	dir := filepath.Join(mnt, "m")
	os.Mkdir(dir, 0o755)
	td := startDaemon(t, "site = []\n[[filesystem]]\npath = \""+mnt+"\"\nreserve = \"0\"\n", func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	})
	if status, _, body := td.do(t, "POST", "/v1/mounts", `{"name":"once","path":"`+dir+`","required":false}`); status != 201 {
		t.Fatalf("register: %d %s", status, body)
	}
	var lines []string
	poll(t, time.Minute, "the mount's first state event in the log", func() bool {
		lines = lines[:0]
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "subject=once") && strings.Contains(l, "is missing") {
				lines = append(lines, l)
			}
		}
		return len(lines) > 0
	})
	time.Sleep(100 * time.Millisecond) // a second line, if any, is written right after the first
	lines = lines[:0]
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "subject=once") && strings.Contains(l, "is missing") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "seq=") || !strings.Contains(lines[0], "component=mountwatch") {
		t.Fatalf("the mount event was logged %d times, want once with seq= and component=:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}
