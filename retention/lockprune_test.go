package retention

import (
	"context"
	"testing"
	"time"
)

// TestPrunePastDeadlineWithTheLockFree: a launch whose deadline has already passed (as
// {"deadline":"1ns"} does) is not told that "a background drain batch held the site"
// when nothing held it: a free prune lock is taken, and the skip is reported only when
// another prune really holds the site.
func TestPrunePastDeadlineWithTheLockFree(t *testing.T) {
	dir := t.TempDir()
	makeJob(t, dir, "recent", deadPid(t), time.Now().Add(-time.Minute))
	_, s := staticSite(t, dir, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		if r := s.prune(ctx, 10, pruneLaunch); r.Problem != "" {
			t.Fatalf("prune past its deadline with the lock free: %q", r.Problem)
		}
	}
	s.sem <- struct{}{} // another prune holds the site
	r := s.prune(ctx, 10, pruneLaunch)
	<-s.sem
	if r.Problem == "" {
		t.Fatal("prune past its deadline while another prune held the site: no problem reported")
	}
}
