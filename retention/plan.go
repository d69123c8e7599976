package retention

import (
	"context"
	"math"
	"slices"
)

// PlanAll is PruneAll as a dry run (rung 1 of `sandboxd reclaim --dry-run`): what each
// site's index says a prune would take now — expired jobs, then the oldest past min_age
// while the site is over max_files or max_bytes — claiming, deleting and recording
// nothing. Observed is false: these are plans, not observe mode's would-prunes. Like a
// prune, a plan asked for right after start-up waits (within ctx) for the site's first
// scan, so it does not answer "not scanned yet" for a site it is about to know.
func (m *Manager) PlanAll(ctx context.Context) []PruneResult {
	var out []PruneResult
	for _, s := range m.siteList() {
		m.waitStarted(ctx, s)
		out = append(out, s.plan())
	}
	return out
}

// plan walks a copy of the expiry heap in its order (oldest newest mtime first) with the
// rules of choose, without popping or claiming: the index is left as it was.
func (s *site) plan() PruneResult {
	res := PruneResult{Site: s.name, ByReason: map[string]int64{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	bad := s.problem != "" && !(s.filling && s.problem == notScanned)
	if bad || s.root == nil || !(s.ready || s.filling) {
		res.Problem = s.problem
		return res
	}
	whole := s.ready
	now := s.m.opts.Now().UnixNano()
	ageCut := int64(math.MinInt64)
	if s.cfg.MaxAge > 0 {
		ageCut = now - int64(s.cfg.MaxAge)
	}
	minCut := now - int64(s.cfg.MinAge)
	files, bytes := s.idx.files-s.idx.seenFiles, s.idx.bytes-s.idx.seenBytes
	jobs := slices.Clone([]*job(s.idx.heap))
	h := expiryHeap(jobs)
	slices.SortFunc(jobs, func(a, b *job) int {
		switch {
		case a == b:
			return 0
		case h.lessJob(a, b):
			return -1
		}
		return 1
	})
	for _, j := range jobs {
		var reason string
		switch {
		case j.newest < ageCut:
			reason = ReasonAge
		case whole && j.newest < minCut && s.cfg.MaxFiles > 0 && files > s.cfg.MaxFiles:
			reason = ReasonCount
		case whole && j.newest < minCut && s.cfg.MaxBytes > 0 && bytes > s.cfg.MaxBytes:
			reason = ReasonBytes
		}
		if reason == "" {
			break
		}
		n := int64(len(j.entries))
		res.Files += n
		res.Bytes += j.bytes
		res.ByReason[reason] += n
		res.Jobs = append(res.Jobs, j.id)
		files -= n
		bytes -= j.bytes
	}
	return res
}

// lessJob is Less on two jobs rather than two positions (the order of the expiry heap).
func (expiryHeap) lessJob(a, b *job) bool {
	if a.newest != b.newest {
		return a.newest < b.newest
	}
	return a.firstIno < b.firstIno
}
