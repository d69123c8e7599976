package jobs

import (
	"errors"
	"os"

	"github.com/sandboxd/sandboxd/api"
)

// stateName is the registry's document in the state directory.
const stateName = "jobs"

type stateDoc struct {
	BootID string `json:"boot_id"`
	Jobs   []*job `json:"jobs"`
}

// load reads the registry of an earlier run. Jobs of another boot are dropped: their
// cgroups and processes went with that boot. A live job whose cgroup is gone ended while
// the daemon was down; Run ends a live one whose lease lapsed meanwhile.
func (m *Manager) load() {
	if m.opts.State == nil {
		return
	}
	var doc stateDoc
	if err := m.opts.State.Load(stateName, &doc); err != nil {
		m.opts.Logger.Warn("job registry unreadable: starting empty", "err", err)
		return
	}
	if doc.BootID != m.boot {
		if len(doc.Jobs) > 0 {
			m.opts.Logger.Info("job registry is from another boot: dropped", "jobs", len(doc.Jobs))
		}
		return
	}
	for _, j := range doc.Jobs {
		if j == nil || validID(j.ID) != nil {
			continue
		}
		j.done = make(chan struct{})
		if !j.live() {
			close(j.done)
		}
		if j.live() || j.State == api.JobLeaked {
			if _, err := os.Stat(j.Cgroup); errors.Is(err, os.ErrNotExist) {
				m.finishLocked(j, api.JobEnded, api.ReasonExited)
			}
		}
		m.jobs[j.ID] = j
	}
	if len(m.jobs) > 0 {
		m.rootReady = true
	}
}

// save writes the registry now. It is called synchronously for a registration (a
// registered job must survive a crash right after 201) and from Run's loop, coalesced,
// for heartbeats, whose answer must stay as cheap as /livez.
func (m *Manager) save() {
	if m.opts.State == nil {
		return
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	doc := stateDoc{BootID: m.boot, Jobs: make([]*job, 0, len(m.jobs))}
	for _, j := range m.jobs {
		if j.placing {
			continue // not registered until its 201: a crash now leaves an unknown cgroup, a leak
		}
		c := *j
		doc.Jobs = append(doc.Jobs, &c)
	}
	m.mu.Unlock()
	err := m.opts.State.Save(stateName, doc)
	if err != nil && m.saveErr == nil {
		m.opts.Logger.Warn("job registry not saved: kept in memory", "err", err)
	}
	m.saveErr = err
}
