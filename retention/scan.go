package retention

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// scanChunk is how many names the scan states between two hand-overs to the index: each
// chunk's jobs get their liveness and, when expired, go to the drain at once, so on a
// start over a big backlog deleting begins within milliseconds and runs beside the rest
// of the scan instead of after it.
const scanChunk = 1024

// firstScanChunk is the size of a scan's first chunk.
const firstScanChunk = 64

// rescan lists the whole root and makes the index match it, keeping what it knew of jobs
// that are still there (liveness, first sightings). It runs at attach, after an inotify
// queue overflow and every ReconcileInterval; it is the only full scan. The listing is
// getdents only; the names are then stated a job at a time, in chunks that enter the
// index as they are done (see scanChunk). Until the first scan of a root ends, the
// index is partial: the drain may delete what is expired by age, but nothing is pruned
// for count or size (CONTRACT §8: the oldest must go first, and that is not known yet).
func (s *site) rescan(p *pending) error {
	s.mu.Lock()
	root, w := s.root, s.raw
	if root != nil && !s.ready {
		s.filling = true
	}
	// What the index knew that the listing lacks is gone; a first scan (an empty index:
	// nothing else adds to it while the scan runs) has nothing to look for.
	hadEntries := len(s.idx.jobs) > 0
	s.mu.Unlock()
	if root == nil {
		return nil
	}
	ents, err := root.ReadNameInos("")
	if w != nil {
		w.waitChildEvents() // before any statx (addChildEvents)
	}
	if err != nil {
		s.mu.Lock()
		if s.root == root {
			s.detachLocked(fmt.Sprintf("root %s cannot be listed: %v", s.path, err))
		}
		s.mu.Unlock()
		return err
	}
	if len(ents) > inodeSortMin && inodeOrderHelps(root.Fd()) {
		slices.SortFunc(ents, func(a, b safefs.NameIno) int { return cmp.Compare(a.Ino, b.Ino) })
	}
	heads, next := groupByJob(ents)
	var present map[string]struct{}
	if hadEntries {
		present = make(map[string]struct{}, len(ents))
		for i := range ents {
			present[ents[i].Name] = struct{}{}
		}
	}
	s.scanLeft.Store(int64(len(ents)))
	defer func() {
		s.scanLeft.Store(0)
		s.kickDrain() // a drain waiting for the rest of this scan's work (drainLoop)
	}()
	chunk := make([]string, 0, scanChunk+8)
	flush := func() bool {
		ups := statNames(root.Fd(), root.Dev(), chunk)
		handed := int64(len(chunk))
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
		// Only now is the chunk's work in the index for the drain: a drain that finds
		// nothing to claim and scanLeft at 0 may end (drainLoop).
		s.scanLeft.Add(-handed)
		s.applyGone(p)
		s.kickDrain()
		runtime.Gosched() // a launch call waiting for a P gets it between chunks
		return true
	}
	// The first chunks are small, so deleting starts within a millisecond of the listing's
	// end; they double up to scanChunk.
	limit := min(scanChunk, firstScanChunk)
	for _, h := range heads {
		for i := h; i >= 0; i = next[i] {
			chunk = append(chunk, ents[i].Name)
		}
		if len(chunk) >= limit {
			if !flush() {
				return nil
			}
			limit = min(scanChunk, 2*limit)
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
		if present == nil {
			continue
		}
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

// groupByJob groups a listing's names by job id without a slice per job: heads holds the
// position of each job's first name, in the order the jobs first appear (after an inode
// sort, their lowest inode first), and next links each position to the job's next name
// (-1 after its last).
func groupByJob(ents []safefs.NameIno) (heads, next []int32) {
	slot := make(map[string]int32, len(ents)/4+1)
	var tails []int32
	next = make([]int32, len(ents))
	for i := range ents {
		next[i] = -1
		id := jobID(ents[i].Name)
		if k, ok := slot[id]; ok {
			next[tails[k]], tails[k] = int32(i), int32(i)
			continue
		}
		slot[id] = int32(len(heads))
		heads, tails = append(heads, int32(i)), append(tails, int32(i))
	}
	return heads, next
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

// inodeSortMin is the size above which a listing is put in inode order before it is
// stated and handed to the drain: gnulib's fts (find, rm -r) does the same above 10,000
// entries. On ext4 a drain in getdents (hash) order touches the inode table at random and
// took 1.4 s for 100,000 files where inode order took 0.85 s (docs/benchmarks.md).
const inodeSortMin = 10000

// inodeOrderHelps reports whether inode order means anything for the filesystem of fd:
// as in gnulib's fts, not on tmpfs (no disk; its listing is already in creation order)
// nor on network filesystems.
func inodeOrderHelps(fd int) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return false
	}
	switch st.Type {
	case unix.TMPFS_MAGIC, unix.NFS_SUPER_MAGIC, unix.CIFS_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC, unix.RAMFS_MAGIC:
		return false
	}
	return true
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
