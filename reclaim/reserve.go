package reclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
	"golang.org/x/sys/unix"
)

// reserveDoc is the persisted state of one reserve file.
type reserveDoc struct {
	Released bool      `json:"released"`
	Since    time.Time `json:"since"`
	Reason   string    `json:"reason,omitempty"`
}

// reserveState is the in-memory view of one reserve.
type reserveState struct {
	cfg ReserveConfig
	// bytes is the file's allocation now (0 when absent). Atomic, not under r.mu: the
	// pressure watcher reads it while holding its own lock, and reclaim's state writes
	// reach the watcher (OwnWrite) while holding r.mu.
	bytes atomic.Int64
	// released is the room of the file while it is released and not re-armed (0 else):
	// free space that is not the workload's. Atomic for the same reason as bytes.
	released atomic.Int64
	since    time.Time // when this reserve was first configured: the Since of a never-released one
	// failing is true from a failed attempt to make the file until it is armed: the
	// failure is reported once per episode, not at every tick (issue 25: a reserve on a
	// read-only mount made ~86,400 events a day). Guarded by r.mu.
	failing bool
	// arm serializes maintainReserve for this reserve: the reserve tick and a resume both
	// call it, and two creations through the one temp name made the second's rename fail
	// ("creating reserve failed: ... no such file") right after the first had armed it.
	arm sync.Mutex
}

// loadReserves builds the reserve states of r.opts, keeping the state of those in old
// whose filesystem and path are unchanged (Reconfigure).
func (r *Reclaimer) loadReserves(old map[string]*reserveState) {
	m := map[string]*reserveState{}
	for _, rc := range r.opts.Reserves {
		if rc.Bytes <= 0 || rc.Path == "" {
			continue
		}
		rs := &reserveState{cfg: rc, since: r.opts.Now()}
		if o, ok := old[rc.Filesystem]; ok && o.cfg.Path == rc.Path {
			rs.bytes.Store(o.bytes.Load())
			rs.since = o.since
		} else {
			rs.bytes.Store(allocated(rc.Path))
		}
		if d := r.rate.Reserves[rc.Filesystem]; d.Released && !r.opts.Observe {
			// Released at shutdown, on request or by `sandboxd boot`, and not re-armed
			// since: its room is still not the workload's after a restart.
			rs.released.Store(max(rc.Bytes-rs.bytes.Load(), 0))
		}
		if text, ok := ReadReleasedMarker(rc.Path); ok && rs.bytes.Load() == 0 && !r.opts.Observe {
			// Released from the host while the VM was stopped (`sandboxd image recover`).
			rs.released.Store(rc.Bytes)
			if old == nil && !r.rate.Reserves[rc.Filesystem].Released {
				r.rate.Reserves[rc.Filesystem] = reserveDoc{Released: true, Since: r.opts.Now(), Reason: text}
			}
		}
		m[rc.Filesystem] = rs
	}
	r.reserves.Store(&m)
}

// reserveMap is the current reserve states: replaced whole by Reconfigure, never written.
func (r *Reclaimer) reserveMap() map[string]*reserveState { return *r.reserves.Load() }

type unixStat = unix.Stat_t

// regularFile lstat's path into st and reports whether it is a regular file.
func regularFile(path string, st *unix.Stat_t) bool {
	return unix.Lstat(path, st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// allocated is st_blocks*512 of a regular file at path, 0 when it is absent or not one.
func allocated(path string) int64 {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	return st.Blocks * 512
}

// ReserveBytes is what the reserve file of the filesystem fs holds on disk, as last
// seen (0 while released or not yet created). Lock-free: the map is replaced whole.
func (r *Reclaimer) ReserveBytes(fs string) int64 {
	if rs, ok := r.reserveMap()[fs]; ok {
		return rs.bytes.Load()
	}
	return 0
}

// ReleasedBytes is the room of the reserve of fs while it is released and not re-armed
// (0 otherwise): free space that is kept for booting and reading, not the workload's
// (api.Filesystem.ReserveReleasedBytes). Lock-free, as ReserveBytes.
func (r *Reclaimer) ReleasedBytes(fs string) int64 {
	if rs, ok := r.reserveMap()[fs]; ok {
		return rs.released.Load()
	}
	return 0
}

// measure is Options.Measure with the room of a released reserve filled in from this
// Reclaimer's own state, so every verdict it makes counts it out (whoever measures).
func (r *Reclaimer) measure(ctx context.Context, path string) (api.Filesystem, error) {
	m, err := r.opts.Measure(ctx, path)
	if n := r.ReleasedBytes(path); n > 0 {
		m.ReserveReleasedBytes = uint64(n)
	}
	return m, err
}

// rearmBytes is what the reserve of fs lacks, which the next arming will write: a reclaim
// target counts it (0 in observe mode, which writes no reserve).
func (r *Reclaimer) rearmBytes(fs string) uint64 {
	rs, ok := r.reserveMap()[fs]
	if !ok || r.opts.Observe {
		return 0
	}
	return uint64(max(rs.cfg.Bytes-rs.bytes.Load(), 0))
}

// Conditions are the reserve conditions: ReserveReleased per filesystem with a reserve,
// true while its file is released. Since changes only when the status flips. The message
// says what is on disk: observe mode writes no reserve, so there it says what would be.
func (r *Reclaimer) Conditions() []api.Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []api.Condition
	for _, rc := range r.opts.Reserves {
		rs, ok := r.reserveMap()[rc.Filesystem]
		if !ok {
			continue
		}
		d := r.rate.Reserves[rc.Filesystem]
		c := api.Condition{Type: api.CondReserveReleased, Subject: rc.Filesystem, Status: d.Released, Since: d.Since, Severity: "warning"}
		if c.Since.IsZero() {
			c.Since = rs.since
		}
		held, want := uint64(max(rs.bytes.Load(), 0)), api.FormatSize(uint64(rc.Bytes))
		switch {
		case d.Released:
			c.Reason = "ReserveReleased"
			c.Message = fmt.Sprintf("the %s reserve file %s was released: %s; its room is kept for booting, reading and removing files, not for new work, "+
				"and the file is written again once free space is at or above the reclaim threshold plus reclaim.headroom plus the reserve", want, rc.Path, d.Reason)
		case r.opts.Observe && held == 0:
			c.Reason = "ObserveMode"
			c.Message = fmt.Sprintf("observe mode: would hold a %s reserve at %s; none is written", want, rc.Path)
		case r.opts.Observe:
			c.Reason = "ReserveHeld"
			c.Message = fmt.Sprintf("reserve file %s holds %s, left as found (observe mode: would keep it at %s)", rc.Path, api.FormatSize(held), want)
		case held == 0:
			c.Reason = "ReserveNotWritten"
			c.Message = fmt.Sprintf("the %s reserve file %s is not written yet: it is written once free space is at or above the reclaim threshold plus reclaim.headroom plus the reserve", want, rc.Path)
		default:
			c.Reason = "ReserveHeld"
			c.Message = fmt.Sprintf("reserve file %s holds %s", rc.Path, api.FormatSize(held))
		}
		out = append(out, c)
	}
	return append(out, r.refillConditions()...)
}

// releaseReserve deletes the reserve file of fs, so the box has room to act (or to boot
// after a stop at 100%).
func (r *Reclaimer) releaseReserve(fs, reason string) (api.Action, bool) {
	r.mu.Lock()
	rs, ok := r.reserveMap()[fs]
	r.mu.Unlock()
	if !ok || allocated(rs.cfg.Path) == 0 {
		return api.Action{}, false
	}
	a := api.Action{Source: "reserve", Path: rs.cfg.Path, Kind: api.ActionReleaseReserve}
	if r.opts.Observe {
		a.Status, a.FreedBytes, a.FreedFiles = api.ActionObserved, allocated(rs.cfg.Path), 1
		return a, true
	}
	freed := allocated(rs.cfg.Path)
	if err := removeReserve(rs.cfg.Path); err != nil {
		a.Status, a.Error = api.ActionFailed, err.Error()
		r.emit(api.EventReserve, fs, fmt.Sprintf("releasing reserve %s failed: %v", rs.cfg.Path, err), map[string]any{"path": rs.cfg.Path})
		return a, true
	}
	a.Status, a.FreedBytes, a.FreedFiles = api.ActionDone, freed, 1
	r.mu.Lock()
	rs.bytes.Store(0)
	rs.released.Store(rs.cfg.Bytes)
	r.rate.Reserves[fs] = reserveDoc{Released: true, Since: r.opts.Now(), Reason: reason}
	r.saveLocked()
	r.mu.Unlock()
	r.emit(api.EventReserve, fs, fmt.Sprintf("released reserve %s (%s): %s", rs.cfg.Path, api.FormatSize(uint64(freed)), reason),
		map[string]any{"path": rs.cfg.Path, "bytes": freed, "released": true})
	return a, true
}

// maintainReserve creates (or re-arms) the reserve of fs when m shows room for it: free
// at or above the reclaim threshold plus the headroom plus the reserve, so that arming it
// leaves the threshold plus the headroom (re-arming at threshold plus reserve left a box
// one MiB above the threshold, and the next MiB written started another reclaim). It runs
// on every reserve tick and after every resume, whatever the state was at start-up
// (CONTRACT §6, §13).
func (r *Reclaimer) maintainReserve(m api.Filesystem, fs string) {
	r.mu.Lock()
	rs, ok := r.reserveMap()[fs]
	r.mu.Unlock()
	if !ok || r.opts.Observe {
		return
	}
	rs.arm.Lock()
	defer rs.arm.Unlock()
	have := allocated(rs.cfg.Path)
	rs.bytes.Store(have) // what is on disk, also when the file went away behind our back
	if have >= rs.cfg.Bytes {
		rs.released.Store(0)
		return
	}
	headroom, _ := HeadroomFor(r.opts.Headroom, m.SizeBytes)
	if m.AvailBytes < m.ReclaimThresholdBytes+headroom+uint64(rs.cfg.Bytes)-uint64(have) {
		return
	}
	// The file is sandboxd's own write: declared first, so that the pressure watcher
	// never reads it as growth (a fresh 256 MiB reserve read as "filling at 255.8 MiB/s"
	// and sent the adaptive threshold to its cap).
	// The new file replaces what is there: the net write is the difference.
	r.ownWrite(rs.cfg.Path, rs.cfg.Bytes-have)
	err := createReserve(rs.cfg.Path, rs.cfg.Bytes)
	if err != nil {
		r.ownWrite(rs.cfg.Path, have-rs.cfg.Bytes)
	}
	r.mu.Lock()
	first := err != nil && !rs.failing
	rs.failing = err != nil
	if err == nil {
		rs.bytes.Store(allocated(rs.cfg.Path))
		rs.released.Store(0)
		if _, ok := ReadReleasedMarker(rs.cfg.Path); ok {
			removeReserve(ReleasedMarker(rs.cfg.Path)) // its room is the reserve again
		}
		r.rate.Reserves[fs] = reserveDoc{Released: false, Since: r.opts.Now()}
		r.saveLocked()
	}
	r.mu.Unlock()
	if err != nil {
		if first {
			r.emit(api.EventReserve, fs, fmt.Sprintf("creating reserve %s failed: %v (tried again at every tick, reported again once it is armed)", rs.cfg.Path, err),
				map[string]any{"path": rs.cfg.Path})
		}
		return
	}
	r.emit(api.EventReserve, fs, fmt.Sprintf("reserve %s armed (%s)", rs.cfg.Path, api.FormatSize(uint64(rs.cfg.Bytes))),
		map[string]any{"path": rs.cfg.Path, "bytes": rs.cfg.Bytes, "released": false})
}

// createReserve writes a fully allocated file: fallocate mode 0 (never sparse: a sparse
// reserve frees nothing when released), checked with st_blocks, renamed into place. The
// directory is reached by safefs's walk and every step works beneath its fd, so a parent
// swapped for a link cannot send the rename over a file elsewhere.
func createReserve(path string, size int64) error {
	dir, base, err := safefs.OpenParent(path)
	if err != nil {
		return fmt.Errorf("create reserve %s: %w", path, err)
	}
	defer dir.Close()
	tmp := "." + base + ".tmp"
	dir.RemoveFile(tmp)
	f, err := dir.CreateFile(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("create reserve %s: %w", path, err)
	}
	fail := func(err error) error {
		f.Close()
		dir.RemoveFile(tmp)
		return fmt.Errorf("create reserve %s: %w", path, err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return fail(fmt.Errorf("fallocate %d bytes: %w", size, err))
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fail(err)
	}
	if st.Blocks*512 < size {
		return fail(errors.New("file is sparse after fallocate"))
	}
	if err := f.Close(); err != nil {
		dir.RemoveFile(tmp)
		return fmt.Errorf("create reserve %s: %w", path, err)
	}
	if err := dir.ReplaceFile(tmp, base); err != nil {
		dir.RemoveFile(tmp)
		return fmt.Errorf("create reserve %s: %w", path, err)
	}
	return nil
}

// removeReserve unlinks the reserve file at path beneath its directory's safely walked
// fd: a regular file only, never through a link in any component.
func removeReserve(path string) error {
	dir, base, err := safefs.OpenParent(path)
	if err != nil {
		return err
	}
	defer dir.Close()
	_, err = dir.RemoveFile(base)
	return err
}

// Shutdown releases the reserve of every filesystem under replace_below, so a box stopped
// full can start again (a VM whose disk was full at stop could not boot).
func (r *Reclaimer) Shutdown(ctx context.Context) {
	r.mu.Lock()
	reserves := slices.Clone(r.opts.Reserves)
	r.mu.Unlock()
	for _, rc := range reserves {
		m, err := r.opts.Measure(ctx, rc.Filesystem)
		if err != nil || !m.BelowReplace() {
			continue
		}
		r.releaseReserve(rc.Filesystem, "shutting down below the replace threshold")
	}
}

// HasReserves reports whether any filesystem has a reserve file configured: its
// release is counted under the source "reserve".
func (r *Reclaimer) HasReserves() bool { return len(r.reserveMap()) > 0 }

func (r *Reclaimer) ownWrite(path string, bytes int64) {
	if r.opts.OwnWrite != nil {
		r.opts.OwnWrite(path, bytes)
	}
}

// reserveTick keeps every reserve armed where there is room, and removes the reserve
// files of filesystems this Reclaimer no longer keeps one on (a reload stopped watching
// them, or set reserve = "0").
func (r *Reclaimer) reserveTick(ctx context.Context) {
	r.dropOrphans()
	if r.opts.Observe {
		// Nothing is written or released; the figures still say what is on disk.
		for _, rs := range r.reserveMap() {
			rs.bytes.Store(allocated(rs.cfg.Path))
		}
		return
	}
	for _, rc := range r.opts.Reserves {
		if ctx.Err() != nil {
			return
		}
		if rc.Bytes <= 0 || rc.Path == "" {
			continue
		}
		m, err := r.opts.Measure(ctx, rc.Filesystem)
		if err != nil {
			continue
		}
		r.maintainReserve(m, rc.Filesystem)
	}
}

// Orphan names reserve files that an earlier configuration kept (from the Reclaimer it
// replaces); those this one does not keep are removed on its next reserve tick.
func (r *Reclaimer) Orphan(prev *Reclaimer) {
	if prev == nil {
		return
	}
	keep := map[string]bool{}
	for _, rc := range r.opts.Reserves {
		if rc.Bytes > 0 {
			keep[rc.Path] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rc := range prev.opts.Reserves {
		if rc.Path != "" && !keep[rc.Path] {
			r.orphans = append(r.orphans, rc.Path)
		}
	}
}

// dropOrphans removes the orphaned reserve files: regular files only, never through a
// symlink in any component (removeReserve).
func (r *Reclaimer) dropOrphans() {
	r.mu.Lock()
	paths := r.orphans
	r.orphans = nil
	r.mu.Unlock()
	if r.opts.Observe {
		return
	}
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if err := removeReserve(p); err != nil {
			r.emit(api.EventReserve, p, fmt.Sprintf("removing reserve %s of a filesystem no longer configured failed: %v", p, err), map[string]any{"path": p})
			continue
		}
		if r.opts.OwnFree != nil {
			r.opts.OwnFree(p, st.Blocks*512)
		}
		r.emit(api.EventReserve, p, fmt.Sprintf("removed reserve %s (%s): its filesystem no longer keeps one", p, api.FormatSize(uint64(st.Blocks*512))),
			map[string]any{"path": p, "bytes": st.Blocks * 512, "released": true})
	}
}
