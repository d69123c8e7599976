package retention

import (
	"container/heap"
	"math"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// entry is one top-level name of a site. A directory is one entry, removed whole. Kept
// small on purpose (CONTRACT: under 200 bytes per indexed entry): the job owns its entries
// by value, so there is no per-entry map slot and no per-entry pointer.
type entry struct {
	name  string
	mtime int64 // unix nanoseconds, as lstat last saw it
	size  int64
	ino   uint64
	// blocks is what unlinking the entry frees, in 512-byte units (st_blocks of a
	// single-link non-directory, saturated; 0 for a hard-linked file or a directory).
	blocks uint32
	typ    uint8 // S_IFMT >> 12, as lstat last saw it
	dirty  bool  // written since the last lstat: size (and mtime) need settling
}

// fileStat is what one lstat says of an entry, as the index keeps it.
type fileStat struct {
	mtime, size int64
	ino         uint64
	blocks      uint32
	typ         uint8
}

// statOf keeps of a statx what the index needs.
func statOf(stx *unix.Statx_t) fileStat {
	st := fileStat{
		mtime: stx.Mtime.Sec*1e9 + int64(stx.Mtime.Nsec),
		size:  int64(stx.Size), ino: stx.Ino,
		typ: uint8(uint32(stx.Mode) & unix.S_IFMT >> 12),
	}
	if stx.Nlink == 1 && st.typ != unix.S_IFDIR>>12 {
		st.blocks = uint32(min(stx.Blocks, math.MaxUint32))
	}
	return st
}

func (e *entry) isDir() bool { return e.typ == unix.S_IFDIR>>12 }

// Liveness of a job (CONTRACT §8).
const (
	liveUnknown uint8 = iota // not decided yet, or cannot be known: keep the files
	liveDead
	liveRunning
)

// job is all entries sharing one job id. Its age is its newest entry's mtime.
type job struct {
	id      string
	entries []entry
	newest  int64 // max mtime of entries
	bytes   int64
	heapIdx int32 // position in the site's expiry heap; -1 when not in it
	// firstIno, the lowest inode of its entries, orders jobs of equal age: creation
	// order, which is the order oldest-first gives when ages differ, and the order in
	// which unlinks touch the filesystem's inode and directory structures least randomly.
	firstIno uint64

	live   uint8
	busy   bool // claimed by a pruner: not in the heap, not to be claimed twice
	seen   bool // observe mode: already reported as would-prune
	failed bool // a deletion failed: left alone until the next rescan

	pid int32 // from <id>.pid; 0 = none or unreadable
	// ownTicks caches a decision for the process with these start ticks: ownDecided says
	// whether it was made, own what it was, so fds and cmdline are read once per process.
	ownTicks   uint64
	ownDecided bool
	own        bool
}

// jobID is the name up to its first '.' (the whole name when it has none, CONTRACT §8).
func jobID(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return name
}

func (j *job) find(name string) int {
	for i := range j.entries {
		if j.entries[i].name == name {
			return i
		}
	}
	return -1
}

func (j *job) recompute() {
	j.newest, j.bytes, j.firstIno = 0, 0, 0
	for i := range j.entries {
		if ino := j.entries[i].ino; j.firstIno == 0 || ino < j.firstIno {
			j.firstIno = ino
		}
		if j.entries[i].mtime > j.newest {
			j.newest = j.entries[i].mtime
		}
		j.bytes += j.entries[i].size
	}
}

// expiryHeap orders the jobs that may be pruned (liveness dead, not busy) by their newest
// mtime, oldest first: what to prune is found in O(expired), and a site with nothing
// expired answers by looking at the top only.
type expiryHeap []*job

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, k int) bool {
	if h[i].newest != h[k].newest {
		return h[i].newest < h[k].newest
	}
	return h[i].firstIno < h[k].firstIno
}
func (h expiryHeap) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].heapIdx = int32(i)
	h[k].heapIdx = int32(k)
}
func (h *expiryHeap) Push(x any) {
	j := x.(*job)
	j.heapIdx = int32(len(*h))
	*h = append(*h, j)
}
func (h *expiryHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	j.heapIdx = -1
	return j
}

// index is a site's entries grouped by job. Not safe for concurrent use: site.mu guards it.
type index struct {
	jobs  map[string]*job
	heap  expiryHeap
	files int64
	bytes int64 // apparent sizes: what max_bytes limits
	// alloc is what the entries hold on disk (st_blocks of single-link files, what pruning
	// them frees): the site's bytes in status, in the same measure as reclaim's figures.
	alloc int64
	// seenFiles and seenBytes are what observe mode already reported as would-prune:
	// nothing was deleted, but the limits are checked as if it had been.
	seenFiles int64
	seenBytes int64
	dirty     []string // names written since their last lstat, settled in the background
	// changes, when set, is the manager's change counter (Manager.Changes): every change
	// of what a site's status shows from the index moves it.
	changes *atomic.Uint64
}

// changed moves the manager's change counter.
func (x *index) changed() {
	if x.changes != nil {
		x.changes.Add(1)
	}
}

func newIndex() *index { return &index{jobs: map[string]*job{}} }

// prunable says whether j belongs in the expiry heap.
func prunable(j *job) bool {
	return j.live == liveDead && !j.busy && !j.seen && !j.failed && len(j.entries) > 0
}

// place puts j in or out of the heap after any change to it.
func (x *index) place(j *job) {
	defer x.changed()
	in := j.heapIdx >= 0
	want := prunable(j)
	switch {
	case want && in:
		heap.Fix(&x.heap, int(j.heapIdx))
	case want:
		heap.Push(&x.heap, j)
	case in:
		heap.Remove(&x.heap, int(j.heapIdx))
	}
	if len(j.entries) == 0 && !j.busy {
		delete(x.jobs, j.id)
	}
}

// upsert records name with fresh lstat figures and returns its job.
func (x *index) upsert(name string, st fileStat) *job {
	defer x.changed()
	id := jobID(name)
	j := x.jobs[id]
	if j == nil {
		j = &job{id: id, heapIdx: -1}
		x.jobs[id] = j
	}
	if j.seen {
		x.unsee(j) // changed since: judge it again
	}
	if i := j.find(name); i >= 0 {
		e := &j.entries[i]
		x.bytes += st.size - e.size
		x.alloc += int64(st.blocks)*512 - int64(e.blocks)*512
		e.mtime, e.size, e.ino, e.blocks, e.typ, e.dirty = st.mtime, st.size, st.ino, st.blocks, st.typ, false
	} else {
		j.entries = append(j.entries, entry{name: name, mtime: st.mtime, size: st.size, ino: st.ino, blocks: st.blocks, typ: st.typ})
		x.files++
		x.bytes += st.size
		x.alloc += int64(st.blocks) * 512
	}
	j.recompute()
	x.place(j)
	return j
}

// remove forgets name; it reports the job it belonged to (nil if unknown).
func (x *index) remove(name string) *job {
	defer x.changed()
	j := x.jobs[jobID(name)]
	if j == nil {
		return nil
	}
	i := j.find(name)
	if i < 0 {
		return j
	}
	x.files--
	x.bytes -= j.entries[i].size
	x.alloc -= int64(j.entries[i].blocks) * 512
	if j.seen {
		x.seenFiles--
		x.seenBytes -= j.entries[i].size
	}
	last := len(j.entries) - 1
	j.entries[i] = j.entries[last]
	j.entries[last] = entry{}
	j.entries = j.entries[:last]
	if len(j.entries) == 0 {
		j.entries = nil
	}
	if name == j.id+".pid" {
		j.pid = 0
	}
	j.recompute()
	x.place(j)
	return j
}

// touch notes a write to name without an lstat: Write events from running jobs' stdout
// come by the thousand, so they only mark the entry for a later settle.
func (x *index) touch(name string) {
	j := x.jobs[jobID(name)]
	if j == nil {
		return
	}
	if i := j.find(name); i >= 0 && !j.entries[i].dirty {
		j.entries[i].dirty = true
		x.dirty = append(x.dirty, name)
	}
}

// expired visits the jobs in the heap whose newest mtime is before cutoff, in heap order
// (not sorted), stopping when visit returns false. It costs O(expired).
func (x *index) expired(cutoff int64, visit func(*job) bool) {
	var walk func(i int) bool
	walk = func(i int) bool {
		if i >= len(x.heap) || x.heap[i].newest >= cutoff {
			return true
		}
		if !visit(x.heap[i]) {
			return false
		}
		return walk(2*i+1) && walk(2*i+2)
	}
	walk(0)
}

// see marks j as reported would-prune (observe mode).
func (x *index) see(j *job) {
	if j.seen {
		return
	}
	j.seen = true
	x.seenFiles += int64(len(j.entries))
	x.seenBytes += j.bytes
	x.place(j)
}

func (x *index) unsee(j *job) {
	j.seen = false
	x.seenFiles -= int64(len(j.entries))
	x.seenBytes -= j.bytes
}
