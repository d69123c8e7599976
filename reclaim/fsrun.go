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
	simulate  bool
	simStatus string
	// held says why the expensive rungs (commands, whole caches) do not run: "cooldown
	// until 15:04:05" or max_runs_per_hour; the cheap ones run. cool is the cooldown in
	// force, later what the held rungs would free, expensive that they ran and did work.
	held         string
	cool         cooldown
	later        int64
	expensive    bool
	ran          bool // the ladder ran
	belowReplace bool // still below replace_below* after the ladder
	actions      []api.Action
	inUse        []string // thrashing caches on it, taken last (CacheThrashing)
	inUsePruned  bool     // ... and the ladder had to take one of them
	// headroom is the headroom in the target (reclaim.headroom, capped relative to the
	// size: headroomCapped), rearm the reserve the target makes room for.
	headroom, rearm uint64
	headroomCapped  bool
	err             error
	// ownFree accounts what an action freed as sandboxd's own (Options.OwnFree).
	ownFree func(path string, bytes int64)
}

// headroomShare is the largest share of a filesystem's size the headroom may take: a
// 256 MiB headroom on a 64 MiB disk made a target of 268 MiB, larger than the disk.
const headroomShare = 4

// HeadroomFor is reclaim.headroom as it applies to a filesystem of size bytes: at most a
// quarter of the size (capped true when that cut it). A size of 0 (no capacity reported)
// leaves it as configured.
func HeadroomFor(headroom int64, size uint64) (h uint64, capped bool) {
	h = uint64(max(headroom, 0))
	if size > 0 && h > size/headroomShare {
		return size / headroomShare, true
	}
	return h, false
}

// newFSRun is one filesystem's run. Its target is the reclaim threshold plus the headroom
// plus the reserve it will re-arm (rearm: what the reserve file lacks), so that arming the
// reserve after the run does not land the filesystem back on the threshold (CONTRACT §13);
// no target is above the filesystem's size.
func newFSRun(path string, m api.Filesystem, req Request, headroom int64, headroomInodes uint64, rearm uint64) *fsRun {
	f := &fsRun{path: path, before: m, cur: m, rearm: rearm}
	f.headroom, f.headroomCapped = HeadroomFor(headroom, m.SizeBytes)
	f.targetBytes = m.ReclaimThresholdBytes + f.headroom + rearm
	f.needBytes = uint64(max(req.NeedBytes, 0))
	f.targetBytes = max(f.targetBytes, f.needBytes)
	if req.TargetFree > 0 {
		// The caller's explicit target is the target, not reclaim_below plus headroom
		// (which said "short of the target 264 MiB" to a --target-free 60MiB).
		f.targetBytes = max(uint64(req.TargetFree), f.needBytes)
		f.targetFree = f.targetBytes == uint64(req.TargetFree)
	}
	if m.SizeBytes > 0 && f.targetBytes > m.SizeBytes {
		f.targetBytes = m.SizeBytes
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
//
// The room of a released reserve is not counted (api.Filesystem.WorkloadAvail): it is not
// the workload's, so it never makes a filesystem healthy.
func (f *fsRun) needed(targetFree int64) bool {
	m := f.cur
	if avail := m.WorkloadAvail(); avail < m.ReclaimThresholdBytes || avail < f.needBytes {
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
