package jobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Without inotify (its instances exhausted on a busy host), waiting on cgroup.events reads
// the file instead: the wait ends once the cgroup empties, not at once with an error (which
// made an ending job "leaked" with its SIGKILLed processes still exiting), and ends with
// ctx's error while the cgroup stays populated.
func TestPollEventsWaitsForTheCgroupToEmpty(t *testing.T) {
	dir := filepath.Join(testRoot(t), "polled")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := spawn(t, `exec sleep 600`)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	empty := func(populated, _ bool) bool { return !populated }

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := pollEvents(ctx, dir, empty)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pollEvents on a populated cgroup: %v, want the context's deadline", err)
	}

	done := make(chan error, 1)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { done <- pollEvents(ctx, dir, empty) }()
	syscall.Kill(p.Process.Pid, syscall.SIGKILL)
	if err := <-done; err != nil {
		t.Fatalf("pollEvents once the cgroup's process was killed: %v, want nil", err)
	}
	if pop, _, err := events(dir); err != nil || pop {
		t.Fatalf("pollEvents returned while cgroup.events says populated=%v (%v)", pop, err)
	}
}
