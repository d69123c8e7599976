package retention

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A prune that gives up waiting for the site's prune lock leaves the count of waiting
// launch calls as it found it. A drain batch never counted itself in; had it counted itself
// out, the count would sit at -1 and the next launch call that waits would not be seen,
// so drain batches would no longer end early for it.
func TestPruneGivingUpLeavesWaitingCount(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20, 0)
	makeJob(t, dir, "old", deadPid(t), time.Now().Add(-20*time.Hour))
	_, s := staticSite(t, dir, Options{})
	s.sem <- struct{}{} // a batch holds the site
	defer func() { <-s.sem }()
	for _, mode := range []pruneMode{pruneDrain, pruneLaunch, pruneResume} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := s.prune(ctx, 1000, mode)
		if r.Files != 0 || r.Problem == "" {
			t.Errorf("%v prune with the site held: %d files, problem %q; want none pruned and a problem", mode, r.Files, r.Problem)
		}
		if n := s.waiting.Load(); n != 0 {
			t.Fatalf("after a %v prune gave up waiting, %d launch calls count as waiting; want 0", mode, n)
		}
	}
}
