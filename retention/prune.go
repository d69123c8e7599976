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

	errs []string // every job not fully pruned, for the drain's one event
}

// launchPruneTime bounds the deletion a launch call does itself, on top of its count
// budget: 256 entries are a few ms on tmpfs but 50-90 ms on ext4 (200-340 µs an unlink,
// FIELD-NOTES), and a launch answers in well under 10 ms. The rest is pending and drained.
const launchPruneTime = 2 * time.Millisecond

// DefaultCallBudget bounds the entries one launch call prunes when the caller gives no bound.
const DefaultCallBudget = 256

// Prune is the launch call's retention on one site ("" = the only site): expired jobs,
// then the oldest past min_age while over the limits, at most maxFiles entries (<= 0:
// DefaultCallBudget) and never past ctx. It reads only the index and cached liveness,
// never /proc or the directory listing; what is left is drained in the background and
// counted in Pending. A site that cannot be cleaned says why in Problem (not an error).
// A call that arrives before the site's first scan waits for it, within ctx (so callers
// pass a deadline).
func (m *Manager) Prune(ctx context.Context, site string, maxFiles int) (PruneResult, error) {
	s, err := m.site(site)
	if err != nil {
		return PruneResult{}, err
	}
	if maxFiles <= 0 {
		maxFiles = DefaultCallBudget
	}
	m.waitStarted(ctx, s)
	r := s.prune(ctx, maxFiles, pruneLaunch)
	if r.Pending > 0 {
		s.kickDrain()
	}
	return r, nil
}

// PruneAll is rung 1 of a resume: retention on every site (expired jobs, then limits),
// unbounded in count but stopping when ctx ends. What fails stays with its site, in its
// result's Problem.
func (m *Manager) PruneAll(ctx context.Context) []PruneResult {
	var out []PruneResult
	for _, s := range m.siteList() {
		m.waitStarted(ctx, s)
		r := s.prune(ctx, math.MaxInt, pruneResume)
		if r.Pending > 0 {
			s.kickDrain()
		}
		out = append(out, r)
		if ctx.Err() != nil {
			break
		}
	}
	return out
}

// waitStarted lets a call made right after start-up find the site scanned, within ctx.
// It waits whether or not Run has begun: the daemon serves calls while the goroutine that
// calls Run may not have been scheduled yet (a loaded machine, or a reload that replaced
// the manager), and a call that went ahead would find the index empty and answer for a
// site it had not looked at (0 files, nothing to prune, a full disk refused as
// replace_sandbox). A manager that is never run answers "not scanned yet" when ctx ends.
func (m *Manager) waitStarted(ctx context.Context, s *site) {
	select {
	case <-s.started:
		return // scanned: ctx's Done is not asked for (a launch's sets up a timer: issue 27)
	default:
	}
	select {
	case <-s.started:
	case <-ctx.Done():
	}
}

// pruneMode is who prunes a site, which sets the bounds of the call: a launch call
// (its count budget and launchPruneTime), a resume (no count bound, only its ctx), or a
// background drain batch (drainBatchTime; liveness re-checked first; it yields to a
// waiting launch call and is not counted as one).
type pruneMode int

const (
	pruneLaunch pruneMode = iota
	pruneResume
	pruneDrain
)

// String is the mode as the prune event's trigger field names it.
func (m pruneMode) String() string {
	switch m {
	case pruneLaunch:
		return "launch"
	case pruneResume:
		return "resume"
	}
	return "drain"
}

// timeBound is how long the mode deletes before it takes no new job (0: no bound).
func (m pruneMode) timeBound() time.Duration {
	switch m {
	case pruneLaunch:
		return launchPruneTime
	case pruneDrain:
		return drainBatchTime
	}
	return 0
}

// maxEventJobs caps the job ids listed in one prune event.
const maxEventJobs = 50

// pick is one job claimed for pruning.
type pick struct {
	j      *job
	reason string
	cutoff int64 // an entry must still be older than this when it is deleted
	bytes  int64
	// ents are the entries as the index knew them when claimed. clean: none was written
	// since its last lstat; trusted: clean, and no event about any of them waits to be
	// applied, so the index's figures are the plain files' own (markTrusted). A
	// directory is stated again whatever the pick is (deleteJob).
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
func (s *site) prune(ctx context.Context, maxFiles int, mode pruneMode) PruneResult {
	res, _ := s.pruneClaimed(ctx, maxFiles, mode)
	return res
}

// pruneClaimed is prune that also says how many jobs it claimed (the drain goes on while
// it claims any, even when they all turned out to be alive or too young).
func (s *site) pruneClaimed(ctx context.Context, maxFiles int, mode pruneMode) (PruneResult, int) {
	res := PruneResult{Site: s.name, Observed: s.m.opts.Observe, ByReason: map[string]int64{}}
	drain := mode == pruneDrain
	if !s.lockPrune(ctx, drain) {
		res.Pending = s.pending()
		res.Problem = "prune skipped: the call's deadline passed while another prune (a background drain batch or another call) held the site"
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
	bound := mode.timeBound()
	start := time.Now()
	var scratch []safefs.Entry // deleteJob's, reused from job to job
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
		scratch = s.deleteJob(ctx, root, d, &picks[i], scratch[:0])
	}
	s.finish(picks, now, mode, &res)
	return res, claimed
}

// lockPrune takes the site's prune lock, or reports false once ctx ends first. A call
// that is not a drain counts itself in waiting while it waits, so a drain batch in
// progress ends after the job in hand; a drain never counts itself, and so never
// uncounts itself either.
func (s *site) lockPrune(ctx context.Context, drain bool) bool {
	if !drain {
		s.waiting.Add(1)
		defer s.waiting.Add(-1)
	}
	select { // a free lock is taken even when ctx has ended: only waiting is bounded
	case s.sem <- struct{}{}:
		return true
	default:
	}
	select {
	case s.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
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
	var clones []entry // one backing array for the picks' copies of their entries
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
		if cap(clones)-len(clones) < n {
			clones = make([]entry, 0, max(n, min(budget, maxDrainBatch)))
		}
		clones = append(clones, top.entries...)
		p.ents = clones[len(clones)-n : len(clones) : len(clones)]
		p.clean = true
		for i := range top.entries {
			// A directory does not make the pick unclean: deleteJob states it again and
			// removes it by the tree walk, which checks everything inside (inotify on the
			// root sees nothing of what happens in there); only its plain files are trusted.
			if top.entries[i].dirty {
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
	if w == nil || !w.childEventsOn() {
		return // without events about writes, nothing can say a file is unchanged
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

// finish applies what the picks did to the index and the counters and reports it.
// A drain batch leaves Pending at zero: counting it walks every expired job, which a
// batch every few milliseconds need not pay for (the status and launch calls count it).
func (s *site) finish(picks []pick, now int64, mode pruneMode, res *PruneResult) {
	var errs []string
	var freed int64 // by these picks (res may sum several batches)
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
		freed += p.freed
		res.ByReason[p.reason] += n
		res.Jobs = append(res.Jobs, j.id)
		s.pruned[p.reason] += n
		s.prunedTotal += n
	}
	if res.Files > 0 {
		s.lastPrune = timeFromNanos(now)
		s.m.changes.Add(1)
	}
	if mode != pruneDrain {
		res.Pending = s.pendingLocked(now)
	}
	name := s.name
	s.mu.Unlock()
	if freed > 0 && !s.m.opts.Observe && s.m.opts.OwnFree != nil {
		s.m.opts.OwnFree(s.path, freed) // sandboxd's own free: not a fall of the growth rate
	}
	if len(errs) > 0 {
		res.Problem = fmt.Sprintf("%d jobs not fully pruned; first: %s", len(errs), errs[0])
		res.errs = errs
	}
	// A drain is one event for all its batches (drain.go), not one per batch: a backlog
	// of 100,000 files would otherwise push the rest of the audit trail out.
	if mode != pruneDrain && (res.Files > 0 || len(errs) > 0) {
		s.m.emit(pruneEvent(name, mode.String(), res, errs))
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
		Message: fmt.Sprintf("%s %s files (%s) of %s jobs in site %s", verb, api.FormatCount(uint64(max(res.Files, 0))), api.FormatSize(uint64(max(res.Bytes, 0))), api.FormatCount(uint64(len(res.Jobs))), site)}
}

func timeFromNanos(ns int64) time.Time { return time.Unix(0, ns) }
