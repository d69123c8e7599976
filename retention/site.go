package retention

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// site is one write site: its root, index, liveness and counters.
type site struct {
	m          *Manager
	name, path string // fixed for the site's life; a new path makes a new site

	// sem is the prune lock: one prune of the site at a time (the launch call's or a drain
	// batch). A channel so a launch can give up on it when its deadline passes.
	sem chan struct{}
	// waiting counts launch calls waiting for sem; the drain yields to them between batches.
	waiting atomic.Int32
	// draining is set while the drain worker works on a backlog: from its kick until a
	// batch finds nothing left to claim (a launch call with room leaves the backlog to it).
	draining atomic.Bool
	// scanLeft counts the names a running scan has listed but not yet handed to the index:
	// work on its way to the drain, which judges by it whether a drain will be long.
	scanLeft atomic.Int64
	// drainKick wakes the drain worker; recheckNow asks the site loop to reconcile now.
	drainKick  chan struct{}
	recheckNow chan struct{}
	// started is closed once the first reconcile of Run is done.
	started     chan struct{}
	startedOnce sync.Once

	mu           sync.Mutex // guards every field below
	cfg          SiteConfig
	root         *safefs.Root
	matchRoots   []string // the root's path as /proc/PID/fd links may show it
	idx          *index
	ready        bool      // scanned since the root was opened
	filling      bool      // the first scan since the root was opened is entering its chunks
	raw          *rawWatch // the site loop's batched inotify reader; nil without one
	problem      string
	problemSince time.Time
	running      int64
	heldOldest   int64               // oldest newest-mtime among jobs outside the heap
	sightings    map[string]sighting // job id -> what its pid file named when first seen
	sightDirty   bool
	pruned       map[string]int64 // reason -> files pruned (or would-be pruned in observe mode)
	prunedTotal  int64
	lastPrune    time.Time
	pendingVal   int64     // last non-zero pending count, reused for pendingTTL
	pendingAt    time.Time // when it was counted (monotonic)
}

// notScanned is the problem of a site before its first scan (not a condition).
const notScanned = "not scanned yet"

// NotScanned is the Problem a site's status shows before its first scan: not a fault.
const NotScanned = notScanned

// sighting is what a job's pid file named when sandboxd first saw it (CONTRACT §8).
type sighting struct {
	Pid   int32  `json:"pid"`
	Ticks uint64 `json:"ticks"` // start time in clock ticks since boot; 0: not alive then
}

func newSite(m *Manager, cfg SiteConfig, sightings map[string]sighting) *site {
	if sightings == nil {
		sightings = map[string]sighting{}
	}
	return &site{
		m: m, name: cfg.Name, path: cfg.Path, cfg: cfg, sem: make(chan struct{}, 1), idx: m.newIndex(),
		drainKick: make(chan struct{}, 1), recheckNow: make(chan struct{}, 1), started: make(chan struct{}),
		sightings: sightings, pruned: map[string]int64{},
		problem: notScanned, problemSince: m.opts.Now(),
	}
}

// setProblemLocked records why the site is not cleaned ("" = fine) and reports a change.
func (s *site) setProblemLocked(p string) {
	if p == s.problem {
		return
	}
	was := s.problem
	s.problem = p
	s.m.changes.Add(1)
	s.problemSince = s.m.opts.Now()
	if was == notScanned && p == "" {
		return
	}
	msg := "site root is fine again"
	if p != "" {
		msg = p
		s.m.opts.Logger.Warn("site not cleaned", "site", s.name, "problem", p)
	}
	s.m.emit(api.Event{Kind: api.EventCondition, Subject: s.name, Message: msg,
		Fields: map[string]any{"type": api.CondSiteProblem, "status": p != ""}})
}

// attach opens and vets the root (when not open) or re-checks it (when open). The path is
// resolved from "/" one component at a time without following a symlink anywhere in it,
// and refused when an ancestor could be changed by a user other than root and the root's
// owner (safefs.OpenRoot); it must still name the very directory we hold (device and
// inode), owned by root or the site's owner, not writable by others without the sticky
// bit, and clear of the protected paths and the state dir by identity (cfg.Guards). A bad
// root is the site's problem. A missing one is not: sandboxd never creates it (a launcher
// that did not create its dir has nothing to prune, and creating it here would decide its
// owner and mode for the launcher), and attaches it once it appears.
//
// Between two checks the site works beneath the fd it holds: a later rename or symlink
// on the way to the path cannot redirect it; the next check (reconcile, reload) sees the
// change and detaches.
func (s *site) attach() (opened bool) {
	// The walk and the guard lookups run without the lock: a protected path on a hung
	// mount may keep a lookup waiting (safefs bounds it), and launch calls must not wait
	// behind it. Only this site's loop calls attach.
	s.mu.Lock()
	guards := s.cfg.Guards
	s.mu.Unlock()
	r, err := safefs.OpenRoot(s.path)
	guardProblem := ""
	if err == nil {
		guardProblem = r.CheckGuards(guards)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		if err == nil && r.ID() == s.root.ID() {
			r.Close()
			if p := s.vetLocked(s.root, guardProblem); p != "" {
				s.detachLocked(p)
			}
			return false
		}
		s.detachLocked("") // replaced, gone or unsafe now: judged below
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Not created yet (a fresh machine, or a launcher that has not run): nothing
			// to prune and nothing wrong; it is attached as soon as it appears. The walk
			// stops at a symlink before it can miss what lies behind one.
			s.setProblemLocked("")
			return false
		}
		s.setProblemLocked(rootProblem(s.path, err))
		return false
	}
	if p := s.vetLocked(r, guardProblem); p != "" {
		r.Close()
		s.setProblemLocked(p)
		return false
	}
	s.root = r
	s.matchRoots = []string{filepath.Clean(s.path)}
	if real, err := filepath.EvalSymlinks(s.path); err == nil && real != s.matchRoots[0] {
		s.matchRoots = append(s.matchRoots, real)
	}
	s.ready = false
	return true
}

// vetLocked is what a root must pass besides the safe walk: its owner and mode, then the
// guarded directories (guardProblem, checked by the caller without the lock).
func (s *site) vetLocked(r *safefs.Root, guardProblem string) string {
	if p := r.CheckOwner(s.allowedUIDs()...); p != "" {
		return p
	}
	return guardProblem
}

func rootProblem(path string, err error) string {
	var ue *safefs.UnsafeRootError
	switch {
	case errors.As(err, &ue):
		return ue.Error()
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Sprintf("root %s is not a directory", path)
	}
	return fmt.Sprintf("root %s cannot be opened: %v", path, err)
}

func (s *site) allowedUIDs() []uint32 { return append([]uint32{0}, s.cfg.OwnerUIDs...) }

// detachLocked closes the root and forgets the index: a root that went bad is not cleaned.
func (s *site) detachLocked(problem string) {
	if s.root != nil {
		s.root.Close()
		s.root = nil
	}
	s.ready, s.filling = false, false
	s.idx = s.m.newIndex()
	s.running, s.heldOldest = 0, 0
	s.m.changes.Add(1)
	if problem != "" {
		s.setProblemLocked(problem)
	}
}

// statName is lstat of a top-level name of the root. Names from getdents and inotify are
// single components, so a plain statx at the root fd cannot leave it; AT_SYMLINK_NOFOLLOW
// keeps it from following a link. It costs one syscall, where Root.Lstat opens the parent.
func statName(rootFd int, name string, stx *unix.Statx_t) error {
	if name == "" || strings.IndexByte(name, '/') >= 0 || name == "." || name == ".." {
		return unix.EINVAL
	}
	return unix.Statx(rootFd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC,
		unix.STATX_TYPE|unix.STATX_INO|unix.STATX_SIZE|unix.STATX_MTIME|unix.STATX_NLINK|unix.STATX_BLOCKS, stx)
}

// readPid reads the pid a "<id>.pid" file names; 0 when it names none. O_NONBLOCK and the
// regular-file check keep a planted FIFO from blocking us.
func readPid(rootFd int, name string) int32 {
	// O_NOATIME: reading a pid file must not write its inode. Under relatime the read of a
	// file whose atime is older than its ctime updates it, and on ext4 that is a journal
	// write per job, beside the drain's unlinks. It needs the file's owner or CAP_FOWNER;
	// without them (EPERM) the file is opened as it is.
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	fd, err := unix.Openat(rootFd, name, flags|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Openat(rootFd, name, flags, 0)
	}
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	buf := make([]byte, 32)
	n, _ := unix.Read(fd, buf)
	if n <= 0 {
		return 0
	}
	return parsePid(buf[:n])
}

func parsePid(b []byte) int32 {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseInt(f[0], 10, 32)
	if err != nil || v <= 0 {
		return 0
	}
	return int32(v)
}

func isPidFile(name string) bool {
	return strings.HasSuffix(name, ".pid") && jobID(name)+".pid" == name
}

func (s *site) markStarted() { s.startedOnce.Do(func() { close(s.started) }) }
