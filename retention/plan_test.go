package retention

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// TestPlanAllDeletesNothingAndMatchesPruneAll: the dry run's rung 1 names what a prune
// would take (expired jobs, then the oldest past min_age over max_files), leaves every
// entry on disk and the index as it was, so that the prune that follows takes exactly
// the planned jobs.
func TestPlanAllDeletesNothingAndMatchesPruneAll(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	dead := deadPid(t)
	var old, mid []string
	old = append(old, makeJob(t, dir, "old1", dead, now.Add(-48*time.Hour))...)
	old = append(old, makeJob(t, dir, "old2", dead, now.Add(-24*time.Hour))...)
	mid = append(mid, makeJob(t, dir, "mid1", dead, now.Add(-3*time.Hour))...)
	mid = append(mid, makeJob(t, dir, "mid2", dead, now.Add(-2*time.Hour))...)
	fresh := makeJob(t, dir, "fresh", dead, now.Add(-time.Minute))
	cfg := siteCfg("s", dir)
	cfg.MaxFiles = int64(len(fresh) + len(mid)/2) // over the limit by one job: mid1 goes for count
	m, _ := staticSiteCfg(t, cfg, Options{})

	plans := m.PlanAll(context.Background())
	if len(plans) != 1 {
		t.Fatalf("PlanAll: %d results, want 1", len(plans))
	}
	p := plans[0]
	if want := []string{"old1", "old2", "mid1"}; !slices.Equal(p.Jobs, want) {
		t.Fatalf("planned jobs %v, want %v (reasons %v)", p.Jobs, want, p.ByReason)
	}
	if p.Files != int64(len(old)+len(mid)/2) || p.ByReason[ReasonAge] != int64(len(old)) || p.ByReason[ReasonCount] != int64(len(mid)/2) {
		t.Fatalf("planned %d files by reason %v", p.Files, p.ByReason)
	}
	for _, n := range append(append(slices.Clone(old), mid...), fresh...) {
		if _, err := os.Lstat(dir + "/" + n); err != nil {
			t.Fatalf("the plan deleted %s: %v", n, err)
		}
	}
	if again := m.PlanAll(context.Background())[0]; !slices.Equal(again.Jobs, p.Jobs) || again.Files != p.Files {
		t.Fatalf("a second plan differs (the first changed the index): %v %d", again.Jobs, again.Files)
	}

	got := m.PruneAll(context.Background())[0]
	slices.Sort(got.Jobs)
	want := slices.Clone(p.Jobs)
	slices.Sort(want)
	if !slices.Equal(got.Jobs, want) || got.Files != p.Files {
		t.Fatalf("the prune took %v (%d files); the plan said %v (%d files)", got.Jobs, got.Files, p.Jobs, p.Files)
	}
}
