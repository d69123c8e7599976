package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// waitFor polls cond with a generous deadline: the machine may be loaded.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, time.Minute, what, cond)
}

func TestWatchdogPingsOnlyWhileFresh(t *testing.T) {
	sock := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	interval, ok := WatchdogInterval()
	if !ok || interval != 200*time.Millisecond {
		t.Fatalf("WatchdogInterval() = %v, %v; want 200ms, true", interval, ok)
	}

	var fresh atomic.Bool
	fresh.Store(true)
	logs := &testenv.SyncBuffer{}
	w := &Watchdog{
		Notifier: &Notifier{},
		Interval: interval,
		Fresh:    fresh.Load,
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Fresh: pings arrive.
	for i := 0; i < 2; i++ {
		if got := sock.next(); got != "WATCHDOG=1" {
			t.Fatalf("datagram %q, want WATCHDOG=1", got)
		}
	}

	// Stale: once a tick has withheld its ping, every ping sent before it is already
	// queued (sends are synchronous and the loop is sequential); drain those, then let
	// several more stale ticks pass and require silence.
	fresh.Store(false)
	w0 := w.Stats().Withheld
	waitFor(t, "a withheld ping", func() bool { return w.Stats().Withheld > w0 })
	for {
		d, ok := sock.read(50 * time.Millisecond)
		if !ok {
			break
		}
		if d != "WATCHDOG=1" {
			t.Fatalf("datagram %q, want WATCHDOG=1", d)
		}
	}
	pings := w.Stats().Pings
	w1 := w.Stats().Withheld
	waitFor(t, "three more stale ticks", func() bool { return w.Stats().Withheld >= w1+3 })
	sock.none()
	if got := w.Stats().Pings; got != pings {
		t.Fatalf("pings went from %d to %d while stale", pings, got)
	}
	if n := strings.Count(logs.String(), "watchdog ping withheld"); n != 1 {
		t.Fatalf("%d stale warnings for one stale episode, want 1:\n%s", n, logs)
	}

	// Fresh again: pings resume, and recovery is logged.
	fresh.Store(true)
	if got := sock.next(); got != "WATCHDOG=1" {
		t.Fatalf("datagram %q after recovery, want WATCHDOG=1", got)
	}
	waitFor(t, "the recovery log line", func() bool { return strings.Contains(logs.String(), "watchdog pings resumed") })
}

func TestWatchdogIntervalRespectsPid(t *testing.T) {
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		ok        bool
	}{
		{"", "", 0, false},
		{"30000000", "", 30 * time.Second, true},
		{"30000000", fmt.Sprint(os.Getpid()), 30 * time.Second, true},
		{"30000000", fmt.Sprint(os.Getpid() + 1), 0, false}, // meant for another process
		{"garbage", "", 0, false},
		{"-5", "", 0, false},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		got, ok := WatchdogInterval()
		if got != tc.want || ok != tc.ok {
			t.Errorf("USEC=%q PID=%q: got %v, %v; want %v, %v", tc.usec, tc.pid, got, ok, tc.want, tc.ok)
		}
		if os.Getenv("WATCHDOG_USEC") != tc.usec {
			t.Errorf("WatchdogInterval unset WATCHDOG_USEC")
		}
	}
}

func TestWatchdogDisabledOrMisconfigured(t *testing.T) {
	listenNotify(t)
	ctx := context.Background()
	if err := (&Watchdog{Notifier: &Notifier{}, Fresh: func() bool { return true }}).Run(ctx); err != nil {
		t.Errorf("no interval: %v, want nil at once", err)
	}
	if err := (&Watchdog{Notifier: &Notifier{}, Interval: time.Second}).Run(ctx); err == nil {
		t.Error("no Fresh func: nil error, want a refusal")
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := (&Watchdog{Notifier: &Notifier{}, Interval: time.Second}).Run(ctx); err != nil {
		t.Errorf("not under systemd: %v, want nil at once", err)
	}
}
