package reclaim

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// TestDryRunCountsACacheOnce: a dry run that climbs every rung plans rung 3 (old entries)
// and then rung 4 (the whole cache) of one cache; rung 4 may only count what rung 3 left.
// On this machine `sandboxd reclaim --target-free 100GiB` in observe mode said "would
// reclaim 5.9 GiB (go-build 5.3 GiB ...)" of a 2.6 GiB go-build cache.
func TestDryRunCountsACacheOnce(t *testing.T) {
	e := newEnv(t, 256*mib, 0)
	e.layout()
	caches := map[string]int64{}
	for _, p := range []string{filepath.Join(e.home, ".cache", "go-build"), filepath.Join(e.home, ".npm", "_cacache"),
		filepath.Join(e.home, ".cache", "pip"), filepath.Join(e.root, "declared")} {
		caches[p] = treeAllocated(t, p)
	}
	o := e.options()
	o.Caches = []CacheConfig{{Name: "decl", Path: filepath.Join(e.root, "declared"), Ladder: LadderAll}}
	r := e.newReclaimer(o)
	run, err := r.Reclaim(context.Background(), Request{Trigger: TriggerManual, DryRun: true, TargetFree: 255 * mib})
	if err != nil {
		t.Fatal(err)
	}
	planned := map[string]int64{}
	for _, a := range run.Actions {
		if a.Kind == api.ActionDelete && a.Status == api.ActionPlanned {
			planned[a.Path] += a.FreedBytes
		}
	}
	for p, size := range caches {
		if planned[p] > size {
			t.Errorf("%s holds %s; the dry run plans to free %s from it", p, api.FormatSize(uint64(size)), api.FormatSize(uint64(planned[p])))
		}
	}
	for _, a := range run.Actions {
		if a.Status == api.ActionSkipped && a.Kind == api.ActionDelete {
			t.Errorf("%s skipped: %s (rung 3's plan already takes its entries: nothing to say)", a.Path, a.Error)
		}
	}
	if len(planned) == 0 {
		t.Fatalf("nothing planned: %s", run.Detail)
	}
}

// treeAllocated is du's figure for a tree: the blocks of every file and directory beneath
// dir, the root itself not counted (rung 4 keeps it).
func treeAllocated(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
