package retention

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The drain deletes through one dir fd with one statx per entry, and that statx is the age
// recheck: a job whose file was rewritten after indexing (no watcher saw it) is kept whole,
// the index learns the new mtime, and the other expired job still goes.
func TestDrainRechecksAgeBeforeDeleting(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	old := time.Now().Add(-20 * time.Hour)
	stale := makeJob(t, dir, "stale", deadPid(t), old)
	fresh := makeJob(t, dir, "fresh", deadPid(t), old)
	_, s := staticSite(t, dir, Options{})
	if err := os.WriteFile(filepath.Join(dir, "fresh.out"), []byte("written again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := drainAll(t, s)
	if r.Files != int64(len(stale)) {
		t.Fatalf("pruned %d files (%v), want the %d of the stale job", r.Files, r.Jobs, len(stale))
	}
	for _, n := range stale {
		if exists(dir, n) {
			t.Errorf("%s of the expired job survived", n)
		}
	}
	for _, n := range fresh {
		if !exists(dir, n) {
			t.Errorf("%s of the rewritten job was pruned", n)
		}
	}
	s.mu.Lock()
	j := s.idx.jobs["fresh"]
	s.mu.Unlock()
	if j == nil || time.Since(time.Unix(0, j.newest)) > time.Hour {
		t.Fatalf("index did not learn the rewrite: %+v", j)
	}
}
