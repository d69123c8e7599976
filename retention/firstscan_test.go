package retention

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// doneWatch is a context that says when someone first waits on it.
type doneWatch struct {
	context.Context
	waited chan struct{}
	once   sync.Once
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waited) })
	return c.Context.Done()
}

// A launch call that reaches the manager before Run has begun (the daemon serves calls
// while the goroutine that calls Run may not have been scheduled yet: a loaded machine, or
// a reload that replaced the manager) waits for the site's first scan within its deadline.
// Answering at once would describe a site not yet looked at: 0 files, nothing pruned,
// "not scanned yet", and a full disk with stale files refused as replace_sandbox.
func TestPruneBeforeRunWaitsForTheFirstScan(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20, 0)
	names := makeJob(t, dir, "old", deadPid(t), time.Now().Add(-20*time.Hour))
	m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)}, State: state.Open(t.TempDir()),
		LivenessInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline, cancelDeadline := context.WithTimeout(context.Background(), time.Minute)
	defer cancelDeadline()
	ctx := &doneWatch{Context: deadline, waited: make(chan struct{})}
	got := make(chan PruneResult, 1)
	go func() {
		r, err := m.Prune(ctx, "s", 0)
		if err != nil {
			r.Problem = err.Error()
		}
		got <- r
	}()

	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	defer func() { stop(); <-ran }()
	var r PruneResult
	select {
	case <-ctx.waited: // the call waits on its deadline: only now does Run begin
		go func() { ran <- m.Run(runCtx) }()
		r = <-got
	case r = <-got: // it answered without waiting for anything
		go func() { ran <- m.Run(runCtx) }()
	}
	if r.Problem != "" {
		t.Fatalf("a call made before Run began answered %+v (problem %q); want it to wait for the first scan", r, r.Problem)
	}
	// The call or the drain the first scan kicks prunes the expired job.
	waitFor(t, "the expired job to be pruned", func() bool {
		for _, n := range names {
			if exists(dir, n) {
				return false
			}
		}
		return true
	})
}
