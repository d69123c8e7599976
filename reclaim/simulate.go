package reclaim

import (
	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// leftAfterPlan is what a simulated run's rung 4 may still count of cache c: its size on
// disk u less what the run already planned to delete from it (rung 3's oldest entries are
// still on disk in a dry run). Counting u whole counted those entries twice: "would
// reclaim go-build 5.3 GiB" of a 2.6 GiB cache.
// planned says whether there was any such plan.
func (f *fsRun) leftAfterPlan(c *cache, u safefs.Usage) (left safefs.Usage, planned bool) {
	for _, a := range f.actions {
		if a.Kind != api.ActionDelete || a.Path != c.Path || a.Status != f.simStatus {
			continue
		}
		planned = true
		u.Bytes = max(u.Bytes-max(a.FreedBytes, 0), 0)
		files := max(a.FreedFiles, 0)
		took := min(files, u.Files)
		u.Files -= took
		u.Dirs = max(u.Dirs-(files-took), 0)
	}
	return u, planned
}
