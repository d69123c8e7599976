package retention

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// scanChunk is how many names the scan states between two hand-overs to the index: each
// chunk's jobs get their liveness and, when expired, go to the drain at once, so on a
// start over a big backlog deleting begins within milliseconds and runs beside the rest
// of the scan instead of after it.
const scanChunk = 1024

// rescan lists the whole root and makes the index match it, keeping what it knew of jobs
// that are still there (liveness, first sightings). It runs at attach, after an inotify
// queue overflow and every ReconcileInterval; it is the only full scan. The listing is
// getdents only; the names are then stated a job at a time, in chunks that enter the
// index as they are done (see scanChunk). Until the first scan of a root ends, the
// index is partial: the drain may delete what is expired by age, but nothing is pruned
// for count or size (CONTRACT §8: the oldest must go first, and that is not known yet).
func (s *site) rescan(p *pending) error {
	s.mu.Lock()
	root := s.root
	if root != nil && !s.ready {
		s.filling = true
	}
	s.mu.Unlock()
	if root == nil {
		return nil
	}
	names, err := root.ReadNames("")
	if err != nil {
		s.mu.Lock()
		if s.root == root {
			s.detachLocked(fmt.Sprintf("root %s cannot be listed: %v", s.path, err))
		}
		s.mu.Unlock()
		return err
	}
	present := make(map[string]struct{}, len(names))
	byJob := make(map[string][]string, len(names)/4+1)
	var order []string // job ids in listing order
	for _, n := range names {
		present[n] = struct{}{}
		id := jobID(n)
		if _, ok := byJob[id]; !ok {
			order = append(order, id)
		}
		byJob[id] = append(byJob[id], n)
	}
	chunk := make([]string, 0, scanChunk+8)
	flush := func() bool {
		ups := statNames(root.Fd(), root.Dev(), chunk)
		chunk = chunk[:0]
		s.mu.Lock()
		if s.root != root {
			s.mu.Unlock()
			return false
		}
		s.applyLocked(ups)
		jobs := make([]*job, 0, len(ups)/4+1)
		for _, u := range ups {
			if j := s.idx.jobs[jobID(u.name)]; j != nil && (len(jobs) == 0 || jobs[len(jobs)-1] != j) {
				jobs = append(jobs, j)
			}
		}
		s.mu.Unlock()
		s.refreshLiveness(jobs)
		s.applyGone(p)
		s.kickDrain()
		runtime.Gosched() // a launch call waiting for a P gets it between chunks
		return true
	}
	for _, id := range order {
		chunk = append(chunk, byJob[id]...)
		if len(chunk) >= scanChunk && !flush() {
			return nil
		}
	}
	if len(chunk) > 0 && !flush() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != root {
		return nil
	}
	var gone []string
	for _, j := range s.idx.jobs {
		j.failed = false
		for i := range j.entries {
			if _, ok := present[j.entries[i].name]; !ok {
				gone = append(gone, j.entries[i].name)
			}
		}
	}
	for _, n := range gone {
		s.idx.remove(n)
	}
	for _, j := range s.idx.jobs {
		s.idx.place(j)
	}
	s.idx.dirty = s.idx.dirty[:0]
	s.ready, s.filling = true, false
	s.setProblemLocked("")
	return nil
}

// applyGone forgets the names whose only pending events say they are gone: during a scan
// the site loop applies no events, and a drain deleting beside it would otherwise fill
// the pending set with its own unlinks until it overflows into another rescan.
func (s *site) applyGone(p *pending) {
	if p == nil {
		return
	}
	gone := p.takeGone()
	if len(gone) == 0 {
		return
	}
	s.mu.Lock()
	for _, n := range gone {
		s.idx.remove(n)
	}
	s.mu.Unlock()
}

// pending collects inotify events between two passes of the site loop, coalesced by name:
// the reader only takes a small lock (once per read, for the batched reader) and never
// waits for the index, so the kernel queue (or fsnotify's unbuffered channels, in the
// fallback) is drained as fast as it fills. Ops use fsnotify's Op bits either way.
type pending struct {
	mu  sync.Mutex
	ops map[string]fsnotify.Op
	// inflight holds what take handed over until the site loop has applied it (done): a
	// drain asking whether the index is current must see those names too; and an
	// overflow taken is not over until its rescan is done (inflightLost).
	inflight     map[string]fsnotify.Op
	inflightLost bool
	overflow     bool // the kernel dropped events, or we would keep too many: rescan
	rootGone     bool // the watched directory itself was removed or moved
	kick         chan struct{}

	// What quiet needs, kept countable without the lock (see rawWatch.quiet): how many
	// names in ops and inflight have a change pending (not only a going), and whether
	// events may have been lost.
	opsChanges, inflightChanges int
	changes                     atomic.Int64
	lost                        atomic.Bool
}

// isChange: the events of a name say it may be younger than the index thinks.
func isChange(op fsnotify.Op) bool { return op != 0 && !goneOp(op) }

// publish refreshes the lock-free figures; p.mu is held.
func (p *pending) publish() {
	p.changes.Store(int64(p.opsChanges + p.inflightChanges))
	p.lost.Store(p.overflow || p.inflightLost || p.rootGone)
}

// maxPending bounds the coalesced names kept between passes; past it a rescan is cheaper.
const maxPending = 1 << 16

func newPending() *pending {
	return &pending{ops: map[string]fsnotify.Op{}, kick: make(chan struct{}, 1)}
}

func (p *pending) add(name string, op fsnotify.Op) {
	p.mu.Lock()
	p.addLocked(name, op, false)
	p.mu.Unlock()
	p.signal()
}

// addLocked records one event; name "" is the root itself.
func (p *pending) addLocked(name string, op fsnotify.Op, overflow bool) {
	switch {
	case overflow:
		p.overflowLocked()
	case name == "":
		if op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename) {
			p.rootGone = true
			p.publish()
		}
	case p.overflow:
	case len(p.ops) >= maxPending:
		p.overflowLocked()
	default:
		before := p.ops[name]
		p.ops[name] = before | op
		if isChange(before|op) && !isChange(before) {
			p.opsChanges++
			p.publish()
		}
	}
}

func (p *pending) overflowLocked() {
	p.overflow = true
	clear(p.ops)
	p.opsChanges = 0
	p.publish()
}

func (p *pending) setOverflow() {
	p.mu.Lock()
	p.overflowLocked()
	p.mu.Unlock()
	p.signal()
}

func (p *pending) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take hands over what was collected; done says it has been applied.
func (p *pending) take() (ops map[string]fsnotify.Op, overflow, rootGone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops, overflow, rootGone = p.ops, p.overflow, p.rootGone
	p.ops, p.overflow, p.rootGone = map[string]fsnotify.Op{}, false, false
	p.inflight, p.inflightLost = ops, overflow || rootGone
	p.inflightChanges, p.opsChanges = p.opsChanges, 0
	p.publish()
	return
}

func (p *pending) done() {
	p.mu.Lock()
	p.inflight, p.inflightLost, p.inflightChanges = nil, false, 0
	p.publish()
	p.mu.Unlock()
}

// goneOp: the events of a name say only that it went (and was not created again).
func goneOp(op fsnotify.Op) bool {
	return !op.Has(fsnotify.Create) && (op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename))
}

// takeGone hands over the names whose events say only that they went.
func (p *pending) takeGone() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []string
	for n, op := range p.ops {
		if goneOp(op) {
			gone = append(gone, n)
			delete(p.ops, n)
		}
	}
	return gone
}

// quiet reports whether no event for any of names waits to be applied, other than its
// going away (an unlink of a name already gone changes nothing). The caller flushed the
// kernel queue first; an overflow means nothing is known.
func (p *pending) quiet(names []string) bool {
	if p.overflow || p.inflightLost || p.rootGone {
		return false
	}
	for _, n := range names {
		if op, ok := p.ops[n]; ok && !goneOp(op) {
			return false
		}
		if op, ok := p.inflight[n]; ok && !goneOp(op) {
			return false
		}
	}
	return true
}

// readEvents drains an fsnotify watcher into p until the watcher closes: the fallback
// when the batched reader (rawWatch) cannot be set up.
func readEvents(w *fsnotify.Watcher, prefix string, p *pending) {
	events, errs := w.Events, w.Errors
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			name := ev.Name
			if name == strings.TrimSuffix(prefix, "/") {
				name = ""
			} else {
				name = strings.TrimPrefix(name, prefix)
			}
			p.add(name, ev.Op)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				p.setOverflow()
			}
		}
	}
}

// statUpdate is what an lstat found for one name, gathered without the site lock.
type statUpdate struct {
	name  string
	gone  bool
	st    fileStat
	pid   int32
	isPid bool
}

// statNames lstats names beneath root for an index update.
func statNames(rootFd int, dev uint64, names []string) []statUpdate {
	out := make([]statUpdate, 0, len(names))
	var stx unix.Statx_t
	for _, n := range names {
		u := statUpdate{name: n}
		if err := statName(rootFd, n, &stx); err != nil || unix.Mkdev(stx.Dev_major, stx.Dev_minor) != dev {
			u.gone = true // vanished, unnamable, or a mount point: not indexed
		} else {
			u.st = statOf(&stx)
			if uint32(stx.Mode)&unix.S_IFMT == unix.S_IFREG && isPidFile(n) {
				u.isPid, u.pid = true, readPid(rootFd, n)
			}
		}
		out = append(out, u)
	}
	return out
}

// applyLocked puts statNames' findings into the index.
func (s *site) applyLocked(ups []statUpdate) {
	for _, u := range ups {
		if u.gone {
			s.idx.remove(u.name)
			continue
		}
		j := s.idx.upsert(u.name, u.st)
		if u.isPid && j.pid != u.pid {
			j.pid = u.pid
			j.ownDecided = false
			if j.live == liveDead {
				j.live = liveUnknown // decide again before anything is pruned
				s.idx.place(j)
			}
		}
	}
}

// applyEvents brings the index up to date with collected events. Create, Remove, Rename
// and Chmod (which is also how a utimes shows) are lstat'ed; a name that was only written
// is just marked for the next settle, so a chatty stdout costs a map update per pass.
func (s *site) applyEvents(ops map[string]fsnotify.Op) {
	s.mu.Lock()
	root := s.root
	s.mu.Unlock()
	if root == nil || len(ops) == 0 {
		return
	}
	var names, written, gone []string
	for n, op := range ops {
		switch {
		case op == fsnotify.Write:
			written = append(written, n)
		case goneOp(op):
			// Gone without an lstat: a drain's own unlinks come back as one event each,
			// and a name created again afterwards brings its own Create.
			gone = append(gone, n)
		default:
			names = append(names, n)
		}
	}
	ups := statNames(root.Fd(), root.Dev(), names)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != root || !s.ready {
		return
	}
	s.applyLocked(ups)
	for _, n := range gone {
		s.idx.remove(n)
	}
	for _, n := range written {
		s.idx.touch(n)
	}
}

// settle lstats the entries written since their last lstat, so sizes (for max_bytes) and
// mtimes catch up at most once per liveness interval, however often they are written.
func (s *site) settle() {
	s.mu.Lock()
	root := s.root
	names := s.idx.dirty
	s.idx.dirty = nil
	s.mu.Unlock()
	if root == nil || len(names) == 0 {
		return
	}
	ups := statNames(root.Fd(), root.Dev(), names)
	s.mu.Lock()
	if s.root == root {
		s.applyLocked(ups)
	}
	s.mu.Unlock()
}
