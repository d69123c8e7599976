package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestLabelFlipHandsOver: a node's label flips from observe to enforce (issue 25), with
// two real daemons as the DaemonSets run them: the observe pod's serve holds the socket;
// the enforce pod's serve starts with --wait-for-socket on the same socket, state dir and
// job registry (the node's hostPaths) and waits, saying so once; the old pod ends
// (SIGTERM, exit 0); the new one takes the socket and serves, without exiting. A runner
// launching all along gets an answer to every launch, or a refusal that says the daemon
// is not there (exit 69: no socket, connection refused, or closed before answering) or
// that it is stopping (exit 75, busy: a launch the old pod's SIGTERM cut short; it said
// "the call's deadline (2s) passed" 0.3 s into the call before): none hangs, none fails
// another way.
func TestLabelFlipHandsOver(t *testing.T) {
	mnt := testenv.Tmpfs(t, 16<<20, 0)
	dir := openTempDir(t)
	site := filepath.Join(mnt, "site")
	os.Mkdir(site, 0o755)
	cfg := fmt.Sprintf(`[[site]]
name = "jobs"
path = %q
[[filesystem]]
path = %q
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
`, site, mnt)
	old, sock, _ := serveDaemonIn(t, dir, cfg, `mode = "observe"`, nil)
	if r := sandboxd(t, nil, "status", "--socket", sock, "--json"); !strings.Contains(r.stdout, `"mode": "observe"`) {
		t.Fatalf("the old pod's daemon is not in observe mode: %s", r.stdout)
	}

	// The enforce pod starts while the observe pod still serves.
	newLog, exited := serveWaiting(t, dir, "--mode", "enforce")

	// A runner launches all along the handover.
	var (
		mu      sync.Mutex
		results []result
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := sandboxd(t, nil, "launch", "--socket", sock, "--site", "jobs")
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	answered := func(mode string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.code == 0 && strings.Contains(r.stdout, mode) {
				n++
			}
		}
		return n
	}
	// The observe daemon's answers say "would prune"; the enforce daemon's "pruned".
	testenv.Eventually(t, time.Minute, "launches answered by the old pod", func() bool { return answered("would prune") >= 3 })
	old.Process.Signal(syscall.SIGTERM)
	if err := old.Wait(); err != nil {
		t.Errorf("the old pod's daemon exited with %v after SIGTERM, want 0", err)
	}
	testenv.Eventually(t, time.Minute, "the new pod's daemon to take the socket", func() bool {
		return strings.Contains(newLog.String(), "socket taken")
	})
	testenv.Eventually(t, time.Minute, "launches answered by the new pod", func() bool { return answered("; pruned") >= 3 })
	close(stop)
	wg.Wait()

	select {
	case err := <-exited:
		t.Fatalf("the new pod's daemon exited (%v): a crash loop\n%s", err, newLog.String())
	default:
	}
	if n := strings.Count(newLog.String(), "waiting for it to stop"); n != 1 {
		t.Errorf("the wait was logged %d times, want once", n)
	}
	if r := sandboxd(t, nil, "status", "--socket", sock, "--json"); !strings.Contains(r.stdout, `"mode": "enforce"`) {
		t.Errorf("after the flip the socket's daemon is not in enforce mode: %s", r.stdout)
	}
	refused := map[string]int{}
	for _, r := range results {
		switch {
		case r.code == 0:
		case r.code == 69 && strings.Contains(r.stderr, "sandboxd is not reachable at "+sock):
			_, reason, _ := strings.Cut(r.stderr, sock+": ")
			reason, _, _ = strings.Cut(reason, "; no verdict")
			refused[reason]++
		case r.code == 75 && strings.Contains(r.stderr, "sandboxd is stopping: the call was cut short"):
			refused["sandboxd is stopping (busy, retry)"]++
		default:
			t.Errorf("a launch across the flip exited %d: %s%s", r.code, r.stdout, r.stderr)
		}
	}
	t.Logf("%d launches across the flip: %d answered by the old pod, %d by the new; refused while no daemon answered: %v",
		len(results), answered("would prune"), answered("; pruned"), refused)
	for reason := range refused {
		if !strings.Contains(reason, "no socket") && !strings.Contains(reason, "connection refused") && !strings.Contains(reason, "closed the connection") &&
			!strings.Contains(reason, "sandboxd is stopping") {
			t.Errorf("a launch was refused for an unclear reason: %q", reason)
		}
	}
}
