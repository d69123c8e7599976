package retention

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// rescan lists the whole root and makes the index match it, keeping what it knew of jobs
// that are still there (liveness, first sightings). It runs at attach, after an inotify
// queue overflow and every ReconcileInterval; it is the only full scan.
func (s *site) rescan() error {
	s.mu.Lock()
	root := s.root
	s.mu.Unlock()
	if root == nil {
		return nil
	}
	ents, err := root.ReadDir("")
	if err != nil {
		s.mu.Lock()
		if s.root == root {
			s.detachLocked(fmt.Sprintf("root %s cannot be listed: %v", s.path, err))
		}
		s.mu.Unlock()
		return err
	}
	pids := map[string]int32{}
	for _, e := range ents {
		if e.Type == unix.S_IFREG && isPidFile(e.Name) {
			pids[e.Name] = readPid(root.Fd(), e.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != root {
		return nil
	}
	present := make(map[string]struct{}, len(ents))
	for _, e := range ents {
		if e.Dev != root.Dev() {
			continue // a mount point: never ours to delete
		}
		present[e.Name] = struct{}{}
		j := s.idx.upsert(e.Name, e.Mtime.UnixNano(), e.Size, e.Ino)
		if p, ok := pids[e.Name]; ok {
			j.pid = p
		}
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
	s.ready = true
	s.setProblemLocked("")
	return nil
}

// pending collects inotify events between two passes of the site loop, coalesced by name:
// the reader only takes a small lock (once per read, for the batched reader) and never
// waits for the index, so the kernel queue (or fsnotify's unbuffered channels, in the
// fallback) is drained as fast as it fills. Ops use fsnotify's Op bits either way.
type pending struct {
	mu       sync.Mutex
	ops      map[string]fsnotify.Op
	overflow bool // the kernel dropped events, or we would keep too many: rescan
	rootGone bool // the watched directory itself was removed or moved
	kick     chan struct{}
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
		p.overflow = true
		clear(p.ops)
	case name == "":
		if op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename) {
			p.rootGone = true
		}
	case p.overflow:
	case len(p.ops) >= maxPending:
		p.overflow = true
		clear(p.ops)
	default:
		p.ops[name] |= op
	}
}

func (p *pending) setOverflow() {
	p.mu.Lock()
	p.overflow = true
	clear(p.ops)
	p.mu.Unlock()
	p.signal()
}

func (p *pending) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take hands over what was collected.
func (p *pending) take() (ops map[string]fsnotify.Op, overflow, rootGone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops, overflow, rootGone = p.ops, p.overflow, p.rootGone
	p.ops, p.overflow, p.rootGone = map[string]fsnotify.Op{}, false, false
	return
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
	name        string
	gone        bool
	mtime, size int64
	ino         uint64
	pid         int32
	isPid       bool
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
			u.mtime = stx.Mtime.Sec*1e9 + int64(stx.Mtime.Nsec)
			u.size, u.ino = int64(stx.Size), stx.Ino
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
		j := s.idx.upsert(u.name, u.mtime, u.size, u.ino)
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
		case !op.Has(fsnotify.Create) && (op.Has(fsnotify.Remove) || op.Has(fsnotify.Rename)):
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
