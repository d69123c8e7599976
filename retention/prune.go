package retention

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
)

// PruneResult is what one prune of a site did (or, in observe mode, would have done).
type PruneResult struct {
	Site     string
	Files    int64    // entries pruned (a directory entry counts once)
	Bytes    int64    // bytes freed (blocks of single-link files)
	Jobs     []string // ids of the jobs pruned
	Pending  int64    // expired entries not yet pruned: the background drain's backlog
	Observed bool     // observe mode: nothing was deleted, the figures say what would have been
	ByReason map[string]int64
	Problem  string // why the site is not cleaned, or what failed
}

// launchPruneTime bounds the deletion a launch call does itself, on top of its count
// budget: 256 entries are a few ms on tmpfs but 50-90 ms on ext4 (200-340 µs an unlink,
// FIELD-NOTES), and a launch answers in well under 10 ms. The rest is pending and drained.
const launchPruneTime = 2 * time.Millisecond

// DefaultCallBudget bounds the entries one launch call prunes when the caller gives no bound.
const DefaultCallBudget = 256

// maxEventJobs caps the job ids listed in one prune event.
const maxEventJobs = 50

// pick is one job claimed for pruning.
type pick struct {
	j      *job
	reason string
	cutoff int64 // an entry must still be older than this when it is deleted
	bytes  int64
	// ents are the entries as the index knew them when claimed. clean: none is a
	// directory or written since its last lstat; trusted: clean, and no event about any
	// of them waits to be applied, so the index's figures are the files' own (markTrusted).
	ents    []entry
	clean   bool
	trusted bool

	removed []string
	gone    []string // found gone already: forgotten, not counted
	freed   int64
	ups     []statUpdate // what verification saw, for a job that turned out too young
	err     error
}

// prune does one bounded prune of the site: expired jobs first (reason age), then, while
// the site is over max_files or max_bytes, the oldest jobs past min_age (count, bytes).
// Only jobs whose cached liveness is dead are candidates; drain batches re-check liveness
// of their picks first. It never waits for the prune lock past ctx.
func (s *site) prune(ctx context.Context, maxFiles int, trigger string, drain bool) PruneResult {
	res, _ := s.pruneClaimed(ctx, maxFiles, trigger, drain)
	return res
}

// pruneClaimed is prune that also says how many jobs it claimed (the drain goes on while
// it claims any, even when they all turned out to be alive or too young).
func (s *site) pruneClaimed(ctx context.Context, maxFiles int, trigger string, drain bool) (PruneResult, int) {
	res := PruneResult{Site: s.name, Observed: s.m.opts.Observe, ByReason: map[string]int64{}}
	if !drain {
		s.waiting.Add(1)
	}
	select {
	case s.sem <- struct{}{}:
		if !drain {
			s.waiting.Add(-1)
		}
	case <-ctx.Done():
		s.waiting.Add(-1)
		res.Pending = s.pending()
		res.Problem = "prune skipped: the deadline passed while a background drain batch held the site"
		return res, 0
	}
	defer func() { <-s.sem }()

	picks, root, now := s.choose(maxFiles, drain, &res)
	claimed := len(picks)
	if claimed == 0 {
		return res, 0
	}
	if drain {
		picks = s.recheck(picks)
	}
	s.mu.Lock()
	w := s.raw
	s.mu.Unlock()
	if w != nil {
		if w.acquire() {
			defer w.release()
		} else {
			w = nil // closing: nothing is trusted
		}
	}
	var d *safefs.Dir
	if !s.m.opts.Observe && len(picks) > 0 {
		// One fd of our own for the batch: a concurrent detach closing the root cannot
		// pull it from under the unlinks.
		var err error
		if d, err = root.OpenDir(""); err != nil {
			for i := range picks {
				picks[i].err = err
			}
		} else {
			defer d.Close()
		}
	}
	// Time bounds, besides the count: at least one job, then no new job once the bound has
	// passed; what is left stays claimed-but-untouched and finish puts it back in the heap.
	var bound time.Duration
	switch {
	case drain:
		bound = drainBatchTime
	case trigger == "launch":
		bound = launchPruneTime
	}
	start := time.Now()
	for i := range picks {
		if picks[i].err != nil {
			continue
		}
		if ctx.Err() != nil {
			picks[i].err = ctx.Err()
			continue
		}
		if i > 0 && (bound > 0 && time.Since(start) > bound || drain && s.waiting.Load() > 0) {
			// Past the time bound, or a launch call waits for the site: a drain batch
			// ends after the job in hand (on ext4 a single unlink can stall for
			// milliseconds in a journal commit, and a batch is many of them).
			continue
		}
		if s.m.opts.Observe {
			picks[i].removed, picks[i].freed = picks[i].names(), picks[i].bytes
			continue
		}
		markTrusted(w, picks[i:i+1])
		s.deleteJob(ctx, root, d, &picks[i])
	}
	s.finish(picks, now, trigger, drain, &res)
	return res, claimed
}

// names lists the pick's entry names.
func (p *pick) names() []string {
	out := make([]string, len(p.ents))
	for i := range p.ents {
		out[i] = p.ents[i].name
	}
	return out
}

// choose claims the jobs to prune, under the site lock. With nothing expired and the site
// within its limits it looks at the top of the heap only.
func (s *site) choose(maxFiles int, drain bool, res *PruneResult) ([]pick, *safefs.Root, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// During the first scan (filling) the index is partial: what it holds is known, so
	// what is expired by age may go, but the oldest jobs for count or size are not known.
	bad := s.problem != "" && !(s.filling && s.problem == notScanned)
	if bad || s.root == nil || !(s.ready || s.filling) {
		res.Problem = s.problem
		return nil, nil, 0
	}
	whole := s.ready
	now := s.m.opts.Now().UnixNano()
	ageCut := int64(math.MinInt64)
	if s.cfg.MaxAge > 0 {
		ageCut = now - int64(s.cfg.MaxAge)
	}
	minCut := now - int64(s.cfg.MinAge)
	files, bytes := s.idx.files-s.idx.seenFiles, s.idx.bytes-s.idx.seenBytes
	budget := maxFiles
	var picks []pick
	for len(s.idx.heap) > 0 {
		top := s.idx.heap[0]
		p := pick{j: top}
		switch {
		case top.newest < ageCut:
			p.reason, p.cutoff = ReasonAge, ageCut
		case whole && top.newest < minCut && s.cfg.MaxFiles > 0 && files > s.cfg.MaxFiles:
			p.reason, p.cutoff = ReasonCount, minCut
		case whole && top.newest < minCut && s.cfg.MaxBytes > 0 && bytes > s.cfg.MaxBytes:
			p.reason, p.cutoff = ReasonBytes, minCut
		}
		n := len(top.entries)
		if p.reason == "" || (n > budget && (len(picks) > 0 || !drain)) {
			break
		}
		heap.Pop(&s.idx.heap)
		top.busy = true
		p.ents = slices.Clone(top.entries)
		p.clean = true
		for i := range top.entries {
			if top.entries[i].dirty || top.entries[i].isDir() {
				p.clean = false
			}
		}
		p.bytes = top.bytes
		files -= int64(n)
		bytes -= top.bytes
		budget -= n
		picks = append(picks, p)
	}
	if len(picks) == 0 && !drain {
		res.Pending = s.pendingLocked(now)
	}
	return picks, s.root, now
}

// recheck refreshes the liveness of a drain batch's picks (CONTRACT §8: the drain looks
// again right before it deletes) and releases those no longer known dead.
func (s *site) recheck(picks []pick) []pick {
	jobs := make([]*job, len(picks))
	for i := range picks {
		jobs[i] = picks[i].j
	}
	s.refreshLiveness(jobs)
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(picks, func(p pick) bool {
		if p.j.live == liveDead {
			return false
		}
		p.j.busy = false
		s.idx.place(p.j)
		return true
	})
}

// markTrusted decides which clean picks may skip the age recheck: w, the site's batched
// inotify reader, is live, the kernel queue has just been read into the pending set, and no
// event about any of a pick's names waits there (or is being applied). A file written,
// touched, renamed over or created again since its last lstat always leaves such an event
// (IN_MODIFY, IN_ATTRIB, IN_MOVED_TO, IN_CREATE), so the index's mtime is the file's own,
// as sure as a statx here would be: both are a look just before the unlinks (it is made
// per job, right before the job's unlinks, as the statx pass would be; with no change
// anywhere, rawWatch.quiet says so without a lock for one ioctl). The caller holds
// w.acquire. Without the raw reader (the fsnotify fallback, or no watch)
// nothing is trusted.
func markTrusted(w *rawWatch, picks []pick) {
	if w == nil {
		return
	}
	if w.quiet() {
		for i := range picks {
			picks[i].trusted = picks[i].clean
		}
		return
	}
	if !w.flush() {
		return
	}
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range picks {
		picks[i].trusted = picks[i].clean && p.quiet(picks[i].names())
	}
}

// deleteJob removes one job's entries through the site root's open Dir, the pid file
// last, so a job cut short still shows whose it was. A trusted pick costs one unlinkat per
// file. Otherwise each entry is verified first, one statx each (the age recheck, which
// also gives the type and the bytes freed); directories go first (a tree with a newer file
// inside is kept, and then nothing else of the job goes), and if an entry became younger
// than the cutoff, nothing is removed.
func (s *site) deleteJob(ctx context.Context, root *safefs.Root, d *safefs.Dir, p *pick) {
	dev := root.Dev()
	var ents []safefs.Entry
	if p.trusted {
		ents = make([]safefs.Entry, 0, len(p.ents))
		for _, e := range p.ents {
			ents = append(ents, safefs.Entry{
				Name: e.name, Type: uint32(e.typ) << 12, Size: e.size, Ino: e.ino, Dev: dev,
				Mtime: timeFromNanos(e.mtime), Nlink: 1, Blocks: int64(e.blocks),
			})
		}
	} else {
		ents = make([]safefs.Entry, 0, len(p.ents))
		for _, n := range p.names() {
			e, err := d.Lstat(n)
			if err != nil {
				p.gone = append(p.gone, n)
				continue // gone already
			}
			if e.Dev != dev || e.MountRoot {
				continue // a mount point: never removed
			}
			if e.Mtime.UnixNano() >= p.cutoff {
				p.ups = statNames(root.Fd(), dev, p.names())
				return
			}
			ents = append(ents, e)
		}
	}
	rank := func(e safefs.Entry) int {
		switch {
		case e.IsDir():
			return 0 // what OnlyOlderThan may keep, so before anything else goes
		case isPidFile(e.Name):
			return 2
		}
		return 1
	}
	slices.SortStableFunc(ents, func(a, b safefs.Entry) int { return rank(a) - rank(b) })
	opts := safefs.RemoveOptions{MakeWritable: true}
	if p.cutoff != math.MinInt64 {
		opts.OnlyOlderThan = timeFromNanos(p.cutoff)
	}
	for _, e := range ents {
		st, err := d.RemoveEntry(ctx, e, opts)
		p.freed += st.Bytes
		switch {
		case st.Files+st.Dirs > 0 && st.Skipped == 0 && err == nil:
			p.removed = append(p.removed, e.Name)
			continue
		case st.Files+st.Dirs+st.Skipped == 0 && err == nil:
			p.gone = append(p.gone, e.Name) // unlinked by someone else meanwhile
			continue
		}
		if err == nil {
			err = fmt.Errorf("prune %s/%s: left in place (newer, or a mount point beneath)", d.Path(), e.Name)
		}
		if st.Files+st.Dirs > 0 {
			p.removed = append(p.removed, e.Name) // partly: the index rescans what is left
		}
		p.err = err
		if len(p.removed) == 0 {
			return // nothing of the job is gone yet: keep it whole
		}
	}
}

// finish applies what the picks did to the index and the counters and reports it.
// A drain batch leaves Pending at zero: counting it walks every expired job, which a
// batch every few milliseconds need not pay for (the status and launch calls count it).
func (s *site) finish(picks []pick, now int64, trigger string, drain bool, res *PruneResult) {
	var errs []string
	s.mu.Lock()
	for i := range picks {
		p := &picks[i]
		j := p.j
		// Still busy while its entries go: out of the heap, so a job of seven entries
		// costs one placement, not seven heap fixes.
		if len(p.ups) > 0 {
			s.applyLocked(p.ups)
		}
		if s.m.opts.Observe && len(p.removed) > 0 {
			s.idx.see(j)
		} else {
			for _, n := range p.removed {
				s.idx.remove(n)
			}
		}
		for _, n := range p.gone {
			s.idx.remove(n)
		}
		if p.err != nil {
			errs = append(errs, fmt.Sprintf("job %q: %v", j.id, p.err))
			if !errors.Is(p.err, context.DeadlineExceeded) && !errors.Is(p.err, context.Canceled) {
				j.failed = true
			}
		}
		j.busy = false
		s.idx.place(j)
		if len(p.removed) == 0 {
			continue
		}
		n := int64(len(p.removed))
		res.Files += n
		res.Bytes += p.freed
		res.ByReason[p.reason] += n
		res.Jobs = append(res.Jobs, j.id)
		s.pruned[p.reason] += n
		s.prunedTotal += n
	}
	if res.Files > 0 {
		s.lastPrune = timeFromNanos(now)
	}
	if !drain {
		res.Pending = s.pendingLocked(now)
	}
	name := s.name
	s.mu.Unlock()
	if len(errs) > 0 {
		res.Problem = fmt.Sprintf("%d jobs not fully pruned; first: %s", len(errs), errs[0])
	}
	if res.Files > 0 || len(errs) > 0 {
		s.m.emit(pruneEvent(name, trigger, res, errs))
	}
}

// pendingTTL is how long a non-zero pending count is reused. Counting walks every expired
// job (a millisecond for a backlog of 100,000 entries), and during a drain every launch
// call and status read asked for it; the figure changes every batch anyway. Zero is never
// reused, so a finished backlog shows at once.
const pendingTTL = 50 * time.Millisecond

// pendingLocked counts the expired entries still in the heap, in O(expired).
func (s *site) pendingLocked(now int64) int64 {
	if s.cfg.MaxAge <= 0 || len(s.idx.heap) == 0 {
		return 0
	}
	cutoff := now - int64(s.cfg.MaxAge)
	if s.idx.heap[0].newest >= cutoff {
		return 0 // nothing expired: the top says so
	}
	if s.pendingVal > 0 && time.Since(s.pendingAt) < pendingTTL {
		return s.pendingVal
	}
	var n int64
	s.idx.expired(cutoff, func(j *job) bool {
		n += int64(len(j.entries))
		return true
	})
	s.pendingVal, s.pendingAt = n, time.Now()
	return n
}

func (s *site) pending() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked(s.m.opts.Now().UnixNano())
}

func pruneEvent(site, trigger string, res *PruneResult, errs []string) api.Event {
	verb := "pruned"
	if res.Observed {
		verb = "would prune"
	}
	jobs := res.Jobs
	if len(jobs) > maxEventJobs {
		jobs = jobs[:maxEventJobs]
	}
	f := map[string]any{
		"trigger": trigger, "files": res.Files, "bytes": res.Bytes, "jobs": jobs,
		"jobs_total": len(res.Jobs), "reasons": res.ByReason, "observed": res.Observed,
		"pending": res.Pending,
	}
	if len(errs) > 0 {
		if len(errs) > 5 {
			errs = errs[:5]
		}
		f["errors"] = errs
	}
	return api.Event{Kind: api.EventPrune, Subject: site, Fields: f,
		Message: fmt.Sprintf("%s %d files (%s) of %d jobs in site %s", verb, res.Files, api.FormatSize(uint64(res.Bytes)), len(res.Jobs), site)}
}

func timeFromNanos(ns int64) time.Time { return time.Unix(0, ns) }
