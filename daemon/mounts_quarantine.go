package daemon

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/mountwatch"
)

// mountLimits are the caps on registrations of cfg ([mounts]).
func mountLimits(cfg *config.Config) mountwatch.Limits {
	return mountwatch.Limits{Max: int(cfg.RuntimeMounts.MaxRegistered), PerUID: int(cfg.RuntimeMounts.MaxPerUID)}
}

// mountsQuarantineDoc is the state document of saved registrations refused at start.
const mountsQuarantineDoc = "mounts-quarantined.json"

// maxQuarantined bounds the quarantine list: the oldest entries go first.
const maxQuarantined = 64

// quarantinedMount is a saved registration the daemon refused at start, with why.
type quarantinedMount struct {
	savedMount
	Reason        string    `json:"reason"`
	QuarantinedAt time.Time `json:"quarantined_at"`
}

// api is q as GET /v1/mounts shows it.
func (q quarantinedMount) api() api.QuarantinedMount {
	return api.QuarantinedMount{Name: q.Registration.Name, Path: q.Registration.Path, Job: q.Registration.Job,
		RegisteredBy: q.RegisteredBy, Reason: q.Reason, QuarantinedAt: q.QuarantinedAt}
}

// quarantineMounts records bad, each with an event and a log line, after the ones already
// quarantined (at most maxQuarantined kept, the newest).
func (d *Daemon) quarantineMounts(bad []quarantinedMount) {
	var list []quarantinedMount
	if err := d.state.Load(mountsQuarantineDoc, &list); err != nil {
		d.logger.Warn("quarantined mounts unreadable: starting a new list", "err", err)
		list = nil
	}
	for _, q := range bad {
		d.events.Warn(api.Event{Time: d.now(), Kind: api.EventMountRegistry, Subject: q.Registration.Name,
			Message: fmt.Sprintf("registered mount %s (%s) quarantined at start, no longer watched: %s; register it again once fixed (GET /v1/mounts lists the quarantine)",
				q.Registration.Name, q.Registration.Path, q.Reason),
			Fields: map[string]any{"component": "daemon", "result": "quarantined", "reason": q.Reason, "path": q.Registration.Path, "registered_by": q.RegisteredBy}})
	}
	list = append(list, bad...)
	if len(list) > maxQuarantined {
		list = list[len(list)-maxQuarantined:]
	}
	d.setQuarantined(list)
}

// setQuarantined replaces the quarantine list in memory and in the state dir.
func (d *Daemon) setQuarantined(list []quarantinedMount) {
	d.quarantineMu.Lock()
	d.quarantined = list
	d.quarantineMu.Unlock()
	if err := d.state.Save(mountsQuarantineDoc, list); err != nil {
		d.logger.Warn("quarantined mounts kept in memory only", "err", err)
	}
}

// unquarantine drops name from the quarantine: it was registered again.
func (d *Daemon) unquarantine(name string) {
	d.quarantineMu.Lock()
	var keep []quarantinedMount
	found := false
	for _, q := range d.quarantined {
		if q.Registration.Name == name {
			found = true
			continue
		}
		keep = append(keep, q)
	}
	d.quarantineMu.Unlock()
	if found {
		d.setQuarantined(keep)
	}
}

// quarantinedView is the quarantine as GET /v1/mounts shows it.
func (d *Daemon) quarantinedView() []api.QuarantinedMount {
	d.quarantineMu.Lock()
	defer d.quarantineMu.Unlock()
	out := make([]api.QuarantinedMount, 0, len(d.quarantined))
	for _, q := range d.quarantined {
		out = append(out, q.api())
	}
	return out
}
