package retention

import (
	"context"
	"math"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Prune is the launch call's retention on one site ("" = the only site): expired jobs,
// then the oldest past min_age while over the limits, at most maxFiles entries (<= 0:
// DefaultCallBudget) and never past ctx. It reads only the index and cached liveness,
// never /proc or the directory listing; what is left is drained in the background and
// counted in Pending. A site that cannot be cleaned says why in Problem (not an error).
func (m *Manager) Prune(ctx context.Context, site string, maxFiles int) (PruneResult, error) {
	s, err := m.site(site)
	if err != nil {
		return PruneResult{}, err
	}
	if maxFiles <= 0 {
		maxFiles = DefaultCallBudget
	}
	m.waitStarted(ctx, s)
	r := s.prune(ctx, maxFiles, "launch", false)
	if r.Pending > 0 {
		s.kickDrain()
	}
	return r, nil
}

// PruneAll is rung 1 of a resume: retention on every site (expired jobs, then limits),
// unbounded in count but stopping when ctx ends.
func (m *Manager) PruneAll(ctx context.Context) ([]PruneResult, error) {
	var out []PruneResult
	for _, s := range m.siteList() {
		m.waitStarted(ctx, s)
		r := s.prune(ctx, math.MaxInt, "resume", false)
		if r.Pending > 0 {
			s.kickDrain()
		}
		out = append(out, r)
		if ctx.Err() != nil {
			break
		}
	}
	return out, nil
}

// waitStarted lets a call made right after start-up find the site scanned, within ctx.
func (m *Manager) waitStarted(ctx context.Context, s *site) {
	m.mu.Lock()
	running := m.runCtx != nil
	m.mu.Unlock()
	if !running {
		return
	}
	select {
	case <-s.started:
	case <-ctx.Done():
	}
}

// Snapshot is every site as /v1/status shows it, in config order.
func (m *Manager) Snapshot() []api.Site {
	var out []api.Site
	for _, s := range m.siteList() {
		out = append(out, s.snapshot())
	}
	return out
}

// Site is one site as /v1/status shows it ("" = the only site).
func (m *Manager) Site(name string) (api.Site, error) {
	s, err := m.site(name)
	if err != nil {
		return api.Site{}, err
	}
	return s.snapshot(), nil
}

func (s *site) snapshot() api.Site {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.m.opts.Now()
	out := api.Site{
		Name: s.name, Path: s.path,
		Files: s.idx.files, Bytes: s.idx.bytes, Jobs: int64(len(s.idx.jobs)), RunningJobs: s.running,
		MaxAgeSeconds: s.cfg.MaxAge.Seconds(), PendingPrune: s.pendingLocked(now.UnixNano()),
		PrunedTotal: s.prunedTotal,
	}
	oldest := s.heldOldest
	if len(s.idx.heap) > 0 && (oldest == 0 || s.idx.heap[0].newest < oldest) {
		oldest = s.idx.heap[0].newest
	}
	if oldest != 0 {
		out.OldestAgeSeconds = max(0, now.Sub(time.Unix(0, oldest)).Seconds())
	}
	if !s.lastPrune.IsZero() {
		t := s.lastPrune
		out.LastPruneAt = &t
	}
	if s.problem != "" {
		p := s.problem
		out.Problem = &p
	}
	return out
}

// Conditions lists a SiteProblem condition for every site that is not being cleaned.
func (m *Manager) Conditions() []api.Condition {
	var out []api.Condition
	for _, s := range m.siteList() {
		s.mu.Lock()
		if s.problem != "" && s.problem != notScanned {
			out = append(out, api.Condition{
				Type: api.CondSiteProblem, Subject: s.name, Status: true,
				Reason: "SiteRootUnsafe", Message: s.problem, Since: s.problemSince, Severity: api.HealthWarning,
			})
		}
		s.mu.Unlock()
	}
	return out
}

// PrunedTotals is, per site and reason (age, count, bytes), the entries pruned since start
// (in observe mode: the entries that would have been), for
// sandboxd_site_pruned_files_total. Every reason is present, at zero if need be.
func (m *Manager) PrunedTotals() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, s := range m.siteList() {
		s.mu.Lock()
		r := map[string]int64{ReasonAge: 0, ReasonCount: 0, ReasonBytes: 0}
		for k, v := range s.pruned {
			r[k] = v
		}
		out[s.name] = r
		s.mu.Unlock()
	}
	return out
}
