package retention

import "context"

// Draining reports whether the site's background drain is working on its backlog now
// (from its kick until a batch finds nothing left to claim), and the site's path ("" =
// the only site). The launch call asks it before it prunes: with a drain at work and a
// filesystem that has room for the call, it leaves the backlog to the drain (LeaveToDrain).
func (m *Manager) Draining(site string) (path string, draining bool, err error) {
	s, err := m.site(site)
	if err != nil {
		return "", false, err
	}
	return s.path, s.draining.Load(), nil
}

// LeaveToDrain is the launch call's retention on a site whose drain is working on its
// backlog, for a call whose filesystem already has what it needs: it deletes nothing
// and reports the backlog in Pending (CONTRACT §5: the backlog is drained in the
// background and reported as pending_prune). A launch that pruned here too would delete
// at its own pace, not at drain_rate, with one prune event per call, and hold the
// site's prune lock (and its directory) against the drain. The drain is kicked, in case
// it has just found its backlog empty. Like Prune, a call made before the site's first
// reconcile waits for it, within ctx.
func (m *Manager) LeaveToDrain(ctx context.Context, site string) (PruneResult, error) {
	s, err := m.site(site)
	if err != nil {
		return PruneResult{}, err
	}
	m.waitStarted(ctx, s)
	r := PruneResult{Site: s.name, Observed: m.opts.Observe, ByReason: map[string]int64{}, Pending: s.pending()}
	s.mu.Lock()
	if s.problem != "" && !(s.filling && s.problem == notScanned) {
		r.Problem = s.problem
	}
	s.mu.Unlock()
	if r.Pending > 0 {
		s.kickDrain()
	}
	return r, nil
}
