package pressure

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// fakeClock is the injected clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// eventLog collects events.
type eventLog struct {
	mu  sync.Mutex
	evs []api.Event
}

func (l *eventLog) add(ev api.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *eventLog) count(typ string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.evs {
		if ev.Fields["type"] == typ {
			n++
		}
	}
	return n
}

// sample runs one deterministic sampling step.
func sample(t *testing.T, w *Watcher) api.Filesystem {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.sampleOnce(ctx)
	snap := w.Snapshot()
	if len(snap) == 0 {
		t.Fatal("no filesystems")
	}
	if snap[0].Error != "" {
		t.Fatalf("sample error: %s", snap[0].Error)
	}
	return snap[0]
}

func cond(t *testing.T, w *Watcher, typ, subject string) api.Condition {
	t.Helper()
	for _, c := range w.Conditions() {
		if c.Type == typ && c.Subject == subject {
			return c
		}
	}
	t.Fatalf("condition %s/%s not known; have %+v", typ, subject, w.Conditions())
	return api.Condition{}
}

// poll waits up to a minute for ok, failing with what.
func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testenv.Eventually(t, time.Minute, what, ok)
}

// runWatcher runs w until stop (or the test's end): ctx is Run's, and stop ends Run and
// returns its error; a second call returns nil.
func runWatcher(t *testing.T, w *Watcher) (ctx context.Context, stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() (err error) {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return ctx, stop
}
