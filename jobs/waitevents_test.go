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

// Waiting on cgroup.events ends once the cgroup empties, not at once with an error (an
// inotify_init1 that failed on a busy host made an ending job "leaked" with its SIGKILLed
// processes still exiting), and ends with ctx's error while the cgroup stays populated.
// Twenty waits at once take no inotify instance: the host's 128 per uid are everyone's.
func TestWaitEventsWaitsForTheCgroupToEmpty(t *testing.T) {
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
	err := waitEvents(ctx, dir, empty)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitEvents on a populated cgroup: %v, want the context's deadline", err)
	}

	inotify0 := countFDs(t, func(target string) bool { return target == "anon_inode:inotify" })
	events0 := countFDs(t, func(target string) bool { return target == filepath.Join(dir, "cgroup.events") })
	const waiters = 20
	done := make(chan error, waiters)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range waiters {
		go func() { done <- waitEvents(ctx, dir, empty) }()
	}
	waitFor(t, time.Minute, "the waits to hold cgroup.events open", func() bool {
		return countFDs(t, func(target string) bool { return target == filepath.Join(dir, "cgroup.events") }) >= events0+waiters
	})
	if n := countFDs(t, func(target string) bool { return target == "anon_inode:inotify" }); n >= inotify0+waiters {
		t.Errorf("%d waits hold %d inotify instances more than before", waiters, n-inotify0)
	}
	syscall.Kill(p.Process.Pid, syscall.SIGKILL)
	for range waiters {
		if err := <-done; err != nil {
			t.Fatalf("waitEvents once the cgroup's process was killed: %v, want nil", err)
		}
	}
	if pop, _, err := events(dir); err != nil || pop {
		t.Fatalf("waitEvents returned while cgroup.events says populated=%v (%v)", pop, err)
	}
}

// countFDs counts this process's open fds whose /proc/self/fd link matches.
func countFDs(t *testing.T, match func(target string) bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && match(target) {
			n++
		}
	}
	return n
}

// A cgroup removed while a wait holds its cgroup.events open ends the wait (the read
// answers ENODEV): nothing is left in it.
func TestWaitEventsEndsWhenTheCgroupGoes(t *testing.T) {
	dir := filepath.Join(testRoot(t), "removed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	// Frozen never turns true in an empty cgroup nobody freezes: only the removal ends it.
	go func() { done <- waitEvents(ctx, dir, func(_, frozen bool) bool { return frozen }) }()
	waitFor(t, time.Minute, "the wait to hold cgroup.events open", func() bool {
		return countFDs(t, func(target string) bool { return target == filepath.Join(dir, "cgroup.events") }) > 0
	})
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waitEvents after its cgroup was removed: %v, want nil", err)
	}
}
