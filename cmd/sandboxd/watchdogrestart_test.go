package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestFirstLaunchAfterAWatchdogRestart: the first launch after a watchdog restart was
// refused busy (issue 25): the new daemon's start-up reclaim, on a disk that filled while
// the old one stalled, held the one reclaim lock through its gc command, and the launch
// waited for the lock until its deadline. Reproduced with the real binary: a daemon
// stalls (SIGSTOP), the disk fills, it is killed as systemd's watchdog does after the
// stall (SIGABRT, here SIGKILL: the stopped process would not run a handler), and a new
// serve starts on the same state dir, registry and socket. Its start-up reclaim runs the
// cache's gc command (a prune of a large store), which here frees its 16 MiB only when
// the test says so and then works on until the test lets it end, so the overlap is
// certain, not a matter of timing. A launch made while it runs needs more than is free:
// once it waits for the lock (its debug line), the gc frees; the launch must answer ok
// from what the running reclaim freed, within its deadline, not busy at it.
func TestFirstLaunchAfterAWatchdogRestart(t *testing.T) {
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	dir := openTempDir(t)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	big := filepath.Join(cache, "store.bin")
	testenv.Fill(big, 16<<20)
	started, free, release := filepath.Join(dir, "gc-started"), filepath.Join(dir, "gc-free"), filepath.Join(dir, "gc-release")
	t.Cleanup(func() { // also when the test fails: the daemon can stop
		os.WriteFile(free, nil, 0o644)
		os.WriteFile(release, nil, 0o644)
	})
	wait := func(f string) string { return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", f) }
	gc := fmt.Sprintf("touch %s && %s && rm -f %s && %s", started, wait(free), big, wait(release))
	site := filepath.Join(mnt, "site")
	os.Mkdir(site, 0o755)
	cfg := fmt.Sprintf(`[[site]]
name = "jobs"
path = %q
[[filesystem]]
path = %q
reclaim_below = "24MiB"
replace_below = "0"
reserve = "0"
[[reclaim.cache]]
name = "store"
path = %q
command = ["/bin/sh", "-c", %q]
ladder = "gc"
[log]
level = "debug"
`, site, mnt, cache, gc)
	old, sock, _ := serveDaemon(t, dir, cfg)

	// The old daemon stalls; meanwhile the disk fills below its reclaim threshold (8 MiB
	// free); the watchdog kills it.
	if err := old.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	syscall.Statfs(mnt, &st)
	testenv.Fill(filepath.Join(mnt, "user-data"), int64(st.Bavail)*st.Bsize-8<<20)
	syscall.Statfs(mnt, &st)
	freeBefore := int64(st.Bavail) * st.Bsize
	old.Process.Kill()
	old.Wait()
	if _, err := os.Stat(started); err == nil {
		t.Fatal("the old daemon ran the gc command before the restart; the test cannot tell whose reclaim the launch shared")
	}

	// The restart: a new serve on the same state dir, registry and socket (the old socket
	// is left behind, stale). Its start-up reclaim runs the gc command.
	_, _, logs := serveDaemon(t, dir, cfg)
	testenv.Eventually(t, time.Minute, "the new daemon's start-up reclaim to run the gc command", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})

	// The first launch: it needs 4 MiB more than is free; the gc frees 16 MiB once the
	// launch waits for the lock the start-up reclaim holds. Its deadline is the default 2s.
	need := freeBefore + 4<<20
	res := make(chan result, 1)
	go func() { res <- sandboxd(t, nil, "launch", "--socket", sock, "--need-bytes", fmt.Sprint(need)) }()
	testenv.Eventually(t, time.Minute, "the launch to wait for the running reclaim", func() bool {
		return strings.Contains(logs.String(), "launch waits for the reclaim in progress")
	})
	os.WriteFile(free, nil, 0o644)
	r := <-res
	t.Logf("first launch after the restart (need %d bytes, %d free before the gc): exit %d\nstdout: %s\nstderr: %s",
		need, freeBefore, r.code, strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr))
	if r.code != 0 {
		t.Errorf("the first launch after the restart exited %d, want 0 (the running reclaim freed what it needs)\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "another reclaim (running) freed what the call needs") {
		t.Errorf("the launch does not say it shared the running reclaim: %s", r.stdout)
	}
	if _, err := os.Stat(release); err == nil {
		t.Fatal("the gc command was released before the launch answered")
	}
	// The gc command was still running when the launch answered: the reclaim it shared
	// was in progress. Once it ends, its event says which one it was: the new daemon's
	// own at start, the pressure reclaim of its first sample (which, on a disk filled
	// during the stall, takes the lock before READY's start-up reclaim) or the start-up
	// reclaim; either holds the lock through the gc command.
	os.WriteFile(release, nil, 0o644)
	runEvent := regexp.MustCompile(`(?m)Z reclaim .*$`)
	var ev result
	testenv.Eventually(t, time.Minute, "the reclaim's event", func() bool {
		ev = sandboxd(t, nil, "events", "--socket", sock)
		return runEvent.MatchString(ev.stdout)
	})
	t.Logf("the new daemon's events:\n%s", ev.stdout)
	if run := runEvent.FindString(ev.stdout); !regexp.MustCompile(`Z reclaim +(startup|pressure) `).MatchString(run) {
		t.Errorf("the reclaim the launch shared was not the new daemon's at start (pressure or startup): %q\nlog:\n%s", run, logs.String())
	}
}
