package reclaim

import (
	"context"

	"github.com/sandboxd/sandboxd/api"
)

// fsRun is one filesystem's part of a reclaim run.
type fsRun struct {
	path        string
	before, cur api.Filesystem
	// targetBytes and targetFiles are where the ladder stops: threshold + headroom, or
	// what the caller needs when that is more.
	targetBytes, targetFiles uint64
	needBytes, needFiles     uint64
	targetFree               bool // targetBytes is the caller's target_free
	preview                  bool // a dry run on a filesystem that needs nothing: what would go first
	measure                  func(ctx context.Context, path string) (api.Filesystem, error)
	// simulate: the run changes nothing and its figures are estimates; every action it
	// reports then has simStatus (observed in observe mode, else planned: a dry run).
	simulate      bool
	simStatus     string
	blocked       string // why the ladder did not run (cooldown, runs per hour)
	ran           bool   // the ladder ran
	belowReplace  bool   // still below replace_below* after the ladder
	reserveLifted bool   // ... and releasing the reserve then lifted it above
	actions       []api.Action
	inUse         []string // thrashing caches on it, taken last (CacheThrashing)
	inUsePruned   bool     // ... and the ladder had to take one of them
	err           error
	// ownFree accounts what an action freed as sandboxd's own (Options.OwnFree).
	ownFree func(path string, bytes int64)
}

func newFSRun(path string, m api.Filesystem, req Request, headroom int64, headroomInodes uint64) *fsRun {
	f := &fsRun{path: path, before: m, cur: m}
	f.targetBytes = m.ReclaimThresholdBytes + uint64(max(headroom, 0))
	f.needBytes = uint64(max(req.NeedBytes, 0))
	f.targetBytes = max(f.targetBytes, f.needBytes)
	if req.TargetFree > 0 {
		// The caller's explicit target is the target, not reclaim_below plus headroom
		// (which said "short of the target 264 MiB" to a --target-free 60MiB).
		f.targetBytes = max(uint64(req.TargetFree), f.needBytes)
		f.targetFree = f.targetBytes == uint64(req.TargetFree)
	}
	if m.Files > 0 {
		f.targetFiles = m.ReclaimThresholdFiles + headroomInodes
		f.needFiles = req.NeedInodes
		f.targetFiles = max(f.targetFiles, f.needFiles)
	}
	return f
}

// needed reports whether the filesystem is below its reclaim threshold, below what the
// caller needs, or below an explicit target.
func (f *fsRun) needed(targetFree int64) bool {
	m := f.cur
	if m.AvailBytes < m.ReclaimThresholdBytes || m.AvailBytes < f.needBytes {
		return true
	}
	if targetFree > 0 && m.AvailBytes < uint64(targetFree) {
		return true
	}
	if m.Files > 0 && (m.FilesFree < m.ReclaimThresholdFiles || m.FilesFree < f.needFiles) {
		return true
	}
	return false
}

// satisfied reports whether the ladder may stop: bytes and inodes at the target.
func (f *fsRun) satisfied() bool {
	return f.cur.AvailBytes >= f.targetBytes && (f.cur.Files == 0 || f.cur.FilesFree >= f.targetFiles)
}

// deficit is what is still missing to the target.
func (f *fsRun) deficit() (bytes, files int64) {
	if f.cur.AvailBytes < f.targetBytes {
		bytes = int64(f.targetBytes - f.cur.AvailBytes)
	}
	if f.cur.Files > 0 && f.cur.FilesFree < f.targetFiles {
		files = int64(f.targetFiles - f.cur.FilesFree)
	}
	return bytes, files
}

// remeasure takes a fresh statfs after a step (never trusting what the step says it
// freed); when simulating it adds the step's estimate instead.
func (f *fsRun) remeasure(ctx context.Context, estBytes, estFiles int64) {
	if f.simulate {
		f.cur.AvailBytes += uint64(max(estBytes, 0))
		f.cur.FreeBytes += uint64(max(estBytes, 0))
		f.cur.UsedRatio = api.UsedRatioOf(f.cur.SizeBytes, f.cur.FreeBytes, f.cur.AvailBytes)
		if f.cur.Files > 0 {
			f.cur.FilesFree = min(f.cur.Files, f.cur.FilesFree+uint64(max(estFiles, 0)))
		}
		return
	}
	m, err := f.measure(context.WithoutCancel(ctx), f.path)
	if err != nil {
		f.err = err
		return
	}
	f.cur = m
}
