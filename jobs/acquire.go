package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// A handover: a new sandboxd started with --wait-for-socket while the one before it still
// serves (a package upgrade, a restart that overlaps, a DaemonSet's label flip), on the
// same registry_dir. The registry's lock (journal.go) is the old daemon's until its Run
// returns, after its socket closed and its calls drained, so New finds it held. Run then
// waits for it here, trying every registryRetry, before anything that acts on cgroups:
// the dead-man switch, the leak check and the removal of stray cgroups would take the old
// daemon's jobs for strangers. Once free it is loaded (the old daemon's jobs adopted, as at
// any start) and Run goes on. Meanwhile every job call is refused, 503 state_unavailable
// (Waiting: retry), Holds keeps every site job's files, and the daemon is not ready.
// Past RegistryWait the daemon says so (one ERROR line, the condition JobRegistryHeld turns
// critical) and goes on trying: the registry is taken as soon as it is free, never given
// up on. Two daemons never write it at once: nothing is written without the lock.

// registryRetry is how often Run tries a registry another sandboxd holds: each try is an
// open and a non-blocking flock.
const registryRetry = 100 * time.Millisecond

// acquire waits for the registry another sandboxd held at New and loads it; false: ctx
// ended first, and nothing of the registry is this Manager's.
func (m *Manager) acquire(ctx context.Context) bool {
	m.mu.Lock()
	since := m.heldSince
	m.mu.Unlock()
	if since.IsZero() {
		return true
	}
	start := time.Now()
	t := time.NewTicker(registryRetry)
	defer t.Stop()
	stuck := time.NewTimer(m.opts.RegistryWait)
	defer stuck.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-stuck.C:
			m.mu.Lock()
			m.heldStuck = true
			m.mu.Unlock()
			msg := fmt.Sprintf("the job registry in %s is still held by another sandboxd after %s: no job can be registered here until it is free (tried every %s); if that daemon is not the one before this one, give each daemon its own [jobs] registry_dir",
				m.opts.RegistryDir, api.FormatDuration(m.opts.RegistryWait), api.FormatDuration(registryRetry))
			m.opts.Logger.Error(msg)
			m.emit(api.Event{Time: m.opts.Now(), Kind: api.EventCondition, Subject: m.opts.RegistryDir, Message: msg,
				Fields: map[string]any{"condition": api.CondJobRegistryHeld}})
			continue
		case <-t.C:
		}
		jr, recs, bad, err := openJournal(m.opts.RegistryDir)
		if errors.Is(err, errHeld) {
			continue
		}
		m.mu.Lock()
		m.heldSince, m.heldStuck, m.regErr = time.Time{}, false, err
		if err == nil {
			m.loadFrom(jr, recs, bad)
		}
		n := 0
		for _, j := range m.jobs {
			if j.live() {
				n++
			}
		}
		m.mu.Unlock()
		if err != nil {
			m.opts.Logger.Warn("job registry unusable: registrations are refused", "err", err)
		}
		msg := fmt.Sprintf("JobRegistryHeld cleared: the job registry in %s is this daemon's now, %d live jobs adopted", m.opts.RegistryDir, n)
		if err != nil {
			msg = fmt.Sprintf("JobRegistryHeld cleared: the job registry in %s is free but unusable: %v", m.opts.RegistryDir, err)
		}
		m.emit(api.Event{Time: m.opts.Now(), Kind: api.EventCondition, Subject: m.opts.RegistryDir, Message: msg,
			Fields: map[string]any{"condition": api.CondJobRegistryHeld, "waited_seconds": time.Since(start).Seconds()}})
		close(m.loaded)
		return true
	}
}

// Loaded is closed once the registry is loaded, or known not to be (memory only,
// unusable); while another sandboxd holds it, not yet.
func (m *Manager) Loaded() <-chan struct{} { return m.loaded }

// Held says whether the registry is held by another sandboxd (since when), and whether
// the wait for it passed RegistryWait (stuck).
func (m *Manager) Held() (since time.Time, stuck bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heldSince, m.heldStuck
}

// Waiting is nil once the registry is this daemon's; while another sandboxd holds it, the
// refusal of a job call (503 state_unavailable: retry).
func (m *Manager) Waiting() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waitingLocked()
}

// waitingLocked is Waiting; caller holds mu.
func (m *Manager) waitingLocked() error {
	since, stuck := m.heldSince, m.heldStuck
	if since.IsZero() {
		return nil
	}
	if stuck {
		return api.NewProblem(api.CodeStateUnavailable, "the job registry in %s is held by another sandboxd, for %s now: no job call is answered here until it is free; if that daemon is not the one before this one, give each daemon its own [jobs] registry_dir",
			m.opts.RegistryDir, api.FormatDuration(m.opts.Now().Sub(since).Round(time.Second)))
	}
	return api.NewProblem(api.CodeStateUnavailable, "the job registry in %s is held by another sandboxd, for %s now (the one before this one, still stopping): this daemon takes it as soon as it is free; retry in a moment",
		m.opts.RegistryDir, api.FormatDuration(m.opts.Now().Sub(since).Round(time.Millisecond)))
}

// heldConditionLocked is JobRegistryHeld while the registry is another sandboxd's; caller
// holds mu.
func (m *Manager) heldConditionLocked() []api.Condition {
	if m.heldSince.IsZero() {
		return nil
	}
	c := api.Condition{Type: api.CondJobRegistryHeld, Subject: m.opts.RegistryDir, Status: true, Since: m.heldSince.Round(time.Second),
		Reason: "Waiting", Severity: api.HealthWarning,
		Message: fmt.Sprintf("the job registry in %s is held by another sandboxd (the one before this one, still stopping): job calls are refused until it is free", m.opts.RegistryDir)}
	if m.heldStuck {
		c.Reason, c.Severity = "Stuck", api.HealthCritical
		c.Message = fmt.Sprintf("the job registry in %s is still held by another sandboxd after %s: no job can be registered here until it is free; if that daemon is not the one before this one, give each daemon its own [jobs] registry_dir",
			m.opts.RegistryDir, api.FormatDuration(m.opts.RegistryWait))
	}
	return []api.Condition{c}
}

// RegistryHeld says whether another process holds the registry in dir, as a serving
// sandboxd does until its Run returns: `serve --wait-for-socket` waits for the daemon
// before it to let go of it before starting. A registry that does not exist is not held.
func RegistryHeld(dir string) bool {
	if dir == "" {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
