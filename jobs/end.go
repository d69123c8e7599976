package jobs

import (
	"cmp"
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// End ends job id as DELETE does (reason api.ReasonDeleted) or as the dead-man switch
// does: SIGTERM to every process of its cgroup, SIGKILL after its grace, and, when wait is
// set, it returns only once the cgroup is empty (or the job is leaked), or ctx ends.
func (m *Manager) End(ctx context.Context, id, reason string, wait bool) (api.Job, error) {
	return m.EndAs(ctx, id, reason, wait, Caller{})
}

// EndAs is End asked by by: only the job's owner, root or the daemon's uid may end it,
// and the kill event names who asked.
func (m *Manager) EndAs(ctx context.Context, id, reason string, wait bool, by Caller) (api.Job, error) {
	m.mu.Lock()
	j, err := m.findLocked(id, by)
	if err != nil {
		m.mu.Unlock()
		return api.Job{}, err
	}
	if err := m.mayManageLocked(j, by, "end"); err != nil {
		m.mu.Unlock()
		return api.Job{}, err
	}
	if j.State == api.JobRunning {
		j.askedBy = by.String()
	}
	if j.placing {
		m.mu.Unlock()
		return api.Job{}, api.NewProblem(api.CodeConflict, "job %q is being registered right now; end it once that answered", pubID(j.ID))
	}
	m.startEndLocked(j, reason)
	done := j.done
	m.mu.Unlock()
	if wait {
		select {
		case <-done:
		case <-ctx.Done():
			return m.view(j), ctx.Err()
		}
	}
	return m.view(j), nil
}

// startEndLocked moves a running job to ending and starts the goroutine that ends it.
func (m *Manager) startEndLocked(j *job, reason string) {
	if j.State == api.JobRunning {
		j.State, j.Reason = api.JobEnding, reason
		m.putLocked(j)
	}
	if j.State != api.JobEnding || j.endOnce {
		return
	}
	j.endOnce = true
	wg, ctx := m.wg, m.runCtx // under mu, which Run sets them under
	wg.Add(1)
	reason = j.Reason
	asked := j.askedBy
	go func() {
		defer wg.Done()
		// Said here, off the registry's lock: the event sink is the daemon's, and the event
		// log writes its one log line (a Logger line here logged every job event twice).
		msg := "ending job: " + reason
		fields := map[string]any{"reason": reason, "pid": j.PID, "cgroup": j.Cgroup, "owner_uid": m.ownerUID(j)}
		if asked != "" {
			msg += ", asked by " + asked
			fields["asked_by"] = asked
		}
		m.emit(api.Event{Kind: api.EventKill, Subject: pubID(j.ID), Message: msg + " (SIGTERM, then SIGKILL after " + api.FormatDuration(j.Grace) + ")",
			Fields: fields})
		m.runEnd(ctx, j)
	}()
}

// runEnd is the ending of one job. Nothing here sleeps: every wait is on cgroup.events.
func (m *Manager) runEnd(ctx context.Context, j *job) {
	dir := j.Cgroup
	start := time.Now()
	pop, _, err := events(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && !pop {
		m.finish(j, api.JobEnded, api.ReasonExited, dir)
		return
	}
	n, _ := m.cg.signalAll(dir, unix.SIGTERM)
	gctx, cancel := context.WithTimeout(ctx, j.Grace)
	err = waitEvents(gctx, dir, func(p, _ bool) bool { return !p })
	cancel()
	killed := false
	if err != nil {
		if ctx.Err() != nil {
			return // the daemon stops: the job stays ending, and the next start finishes it
		}
		killed = true
		if err := m.cg.killAll(ctx, dir, !m.opts.NoCgroupKill); err != nil {
			m.opts.Logger.Warn("job kill failed", "job", j.ID, "cgroup", dir, "err", err)
		}
		kctx, cancel := context.WithTimeout(ctx, m.opts.KillWait)
		err = waitEvents(kctx, dir, func(p, _ bool) bool { return !p })
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.finish(j, api.JobLeaked, j.Reason, dir)
			return
		}
	}
	m.opts.Logger.Info("job processes gone", "job", j.ID, "sigterm", n, "sigkill", killed, "took", time.Since(start).Round(time.Millisecond))
	m.finish(j, api.JobKilled, j.Reason, dir)
}

// finish records the end of j, removes its (empty) cgroup, and tells OnEnd. Only a live
// job ends, and only a leaked one becomes killed once it empties: whichever of the
// ending goroutine and the cgroup.events watcher comes second changes nothing.
func (m *Manager) finish(j *job, state, reason, dir string) {
	m.mu.Lock()
	wasLive := j.live()
	ok := wasLive || j.State == api.JobLeaked && state == api.JobKilled
	m.mu.Unlock()
	if !ok {
		return
	}
	if state != api.JobLeaked {
		if err := removeTree(dir); err != nil {
			m.opts.Logger.Warn("job cgroup not removed", "job", j.ID, "err", err)
		}
	}
	m.mu.Lock()
	if wasLive != j.live() || !wasLive && j.State != api.JobLeaked {
		m.mu.Unlock()
		return // someone else finished it meanwhile
	}
	m.finishLocked(j, state, reason)
	m.putLocked(j)
	if m.watch != nil && j.wd != 0 && state != api.JobLeaked {
		m.watch.remove(j.wd)
		j.wd = 0
	}
	// keep_ended_max holds at once, at the cost of what it drops (pruneEndedLocked), and
	// so does the end of a shared lease whose last listed job that dropped.
	m.pruneEndedLocked()
	m.pruneUnusedLeasesLocked()
	cbs := append([]func(string, string){}, m.onEnd...)
	m.mu.Unlock()
	fields := map[string]any{"state": state, "reason": reason, "pid": j.PID, "cgroup": dir, "owner_uid": m.ownerUID(j)}
	msg := "job " + state + ": " + reason
	if state == api.JobLeaked {
		msg = "job leaked: processes left after SIGKILL and " + api.FormatDuration(m.opts.KillWait)
	}
	m.emit(api.Event{Kind: api.EventKill, Subject: pubID(j.ID), Message: msg, Fields: fields})
	if !wasLive {
		return
	}
	if m.opts.OnEnd != nil {
		m.opts.OnEnd(j.ID, reason)
	}
	for _, f := range cbs {
		f(j.ID, reason)
	}
}

func (m *Manager) finishLocked(j *job, state, reason string) {
	if j.live() {
		m.endedTotal[reason]++
	}
	wasEnded, listed := isEnded(j), m.jobs[j.ID] == j
	if listed {
		m.countLiveLocked(j, -1) // counted again below if it is still live
	}
	j.State, j.Reason = state, reason
	if listed {
		m.countLiveLocked(j, 1)
	}
	if j.EndedAt.IsZero() {
		j.EndedAt = m.opts.Now().Round(time.Millisecond)
		j.EndedBoot = boottime()
	}
	if !wasEnded && isEnded(j) && listed {
		m.addEndedLocked(j)
	}
	select {
	case <-j.done:
	default:
		close(j.done)
	}
}

// isEnded says whether j is over for good (ended, killed): listed until pruneEndedLocked.
func isEnded(j *job) bool { return j.State == api.JobEnded || j.State == api.JobKilled }

// addEndedLocked puts j, just ended, in m.ended by EndedBoot: at the back, but for a
// leaked job killed at last, whose end was its leak.
func (m *Manager) addEndedLocked(j *job) {
	m.endedN++
	i := len(m.ended)
	for i > m.endedHead && m.ended[i-1].EndedBoot > j.EndedBoot {
		i--
	}
	m.ended = slices.Insert(m.ended, i, j)
}

// indexEndedLocked rebuilds m.ended from m.jobs (after a load).
func (m *Manager) indexEndedLocked() {
	m.ended, m.endedHead, m.endedN = m.ended[:0], 0, 0
	for _, j := range m.jobs {
		if isEnded(j) {
			m.ended = append(m.ended, j)
		}
	}
	slices.SortFunc(m.ended, func(a, b *job) int { return cmp.Compare(a.EndedBoot, b.EndedBoot) })
	m.endedN = len(m.ended)
}
