package jobs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// legacyName is the registry's document in the state directory before issue 20 moved it
// to the journal in registry_dir: read once, at the first start of a newer sandboxd.
const legacyName = "jobs"

type stateDoc struct {
	BootID string `json:"boot_id"`
	Jobs   []*job `json:"jobs"`
}

// load opens the journal in RegistryDir and rebuilds the registry from it (falling back,
// once, on the state directory's document of older versions). Jobs of another boot are
// dropped: their cgroups and processes went with that boot. A live job whose cgroup is gone
// ended while the daemon was down; Run ends a live one whose lease lapsed meanwhile. A
// registry that cannot be opened leaves the Manager refusing registrations (regErr); one
// another sandboxd holds is waited for (acquire.go): Run takes it once it is free.
func (m *Manager) load() {
	if m.opts.RegistryDir == "" {
		close(m.loaded)
		return // memory only (tests, and a Manager without a registry)
	}
	jr, recs, bad, err := openJournal(m.opts.RegistryDir)
	if errors.Is(err, errHeld) {
		m.heldSince, m.regErr = m.opts.Now(), err
		m.opts.Logger.Info("job registry held by another sandboxd: waiting for it to stop (a handover); registrations are refused until then",
			"dir", m.opts.RegistryDir, "wait", m.opts.RegistryWait)
		return
	}
	if err != nil {
		m.regErr = err
		m.opts.Logger.Warn("job registry unusable: registrations are refused", "err", err)
		close(m.loaded)
		return
	}
	m.loadFrom(jr, recs, bad)
	close(m.loaded)
}

// loadFrom rebuilds the registry from the records of the journal jr, just opened: in New,
// or in Run (under mu) once the registry another sandboxd held is free.
func (m *Manager) loadFrom(jr *journal, recs []record, bad int) {
	m.journal = jr
	if bad > 0 {
		m.opts.Logger.Warn("job registry: lines that did not parse were skipped", "lines", bad)
	}
	var jobs []*job
	boot := ""
	if len(recs) > 0 {
		boot = recs[0].BootID
	} else if m.opts.State != nil {
		var doc stateDoc
		if err := m.opts.State.Load(legacyName, &doc); err == nil && len(doc.Jobs) > 0 {
			boot, jobs = doc.BootID, doc.Jobs
		}
	}
	if boot != m.boot {
		if len(recs) > 1 || len(jobs) > 0 {
			m.opts.Logger.Info("job registry is from another boot: dropped")
		}
		recs, jobs = nil, nil
	}
	byID := map[string]*job{}
	leases := map[string]*lease{}
	for _, j := range jobs {
		if j != nil {
			byID[j.ID] = j
		}
	}
	for _, r := range recs {
		switch r.Op {
		case "put":
			if r.Job != nil {
				byID[r.Job.ID] = r.Job
			}
		case "hb":
			if j := byID[r.ID]; j != nil {
				j.LeaseBoot, j.Heartbeats = r.LeaseBoot, r.Beats
			}
		case "forget":
			delete(byID, r.ID)
		case "lease":
			if r.Lease != nil {
				c := *r.Lease
				leases[c.Name] = &c
			}
		case "lease_forget":
			delete(leases, r.ID)
		}
	}
	m.rekeyed = rekeyLegacy(byID, leases)
	claimed := map[string]bool{} // the cgroups of the live jobs loaded so far
	for _, j := range sortedByOwnCgroup(m.root, byID) {
		if validKey(j.ID) != nil {
			continue
		}
		if uid, ok := keyUID(j.ID); ok && (j.Owner == nil || j.Owner.UID != uid) {
			// A key of one uid on a job of another: hand-edited, not ours to act on.
			msg := fmt.Sprintf("job %s quarantined at start: its registry key names uid %d but its owner is another; nothing in its cgroup was ended and the entry is dropped", j.ID, uid)
			m.opts.Logger.Error(msg)
			m.emit(api.Event{Time: m.opts.Now(), Kind: api.EventJob, Subject: pubID(j.ID), Message: msg,
				Fields: map[string]any{"result": "quarantined", "cgroup": j.Cgroup}})
			continue
		}
		if want := filepath.Join(m.root, "jobs", j.ID); m.root != "" && !cgroupOfKey(m.root, j) {
			// A hand-edited registry must not aim the dead-man switch at another cgroup
			// (issue 21: a root sleep elsewhere was killed and its tree removed): the entry
			// is quarantined, left out of the registry with nothing ended, and said.
			msg := fmt.Sprintf("job %s quarantined at start: its registry entry names the cgroup %s, not %s; nothing in it was ended and the entry is dropped", j.ID, j.Cgroup, want)
			m.opts.Logger.Error(msg)
			m.emit(api.Event{Time: m.opts.Now(), Kind: api.EventJob, Subject: pubID(j.ID), Message: msg,
				Fields: map[string]any{"result": "quarantined", "cgroup": j.Cgroup, "want": want}})
			continue
		}
		if held := j.live() || j.State == api.JobLeaked; held && claimed[filepath.Clean(j.Cgroup)] {
			msg := fmt.Sprintf("job %s quarantined at start: its cgroup %s is another job's; nothing in it was ended and the entry is dropped", j.ID, j.Cgroup)
			m.opts.Logger.Error(msg)
			m.emit(api.Event{Time: m.opts.Now(), Kind: api.EventJob, Subject: pubID(j.ID), Message: msg,
				Fields: map[string]any{"result": "quarantined", "cgroup": j.Cgroup}})
			continue
		} else if held {
			claimed[filepath.Clean(j.Cgroup)] = true
		}
		if filepath.Base(j.Cgroup) != j.ID {
			m.otherCgroups = true
		}
		j.done = make(chan struct{})
		if !j.live() {
			close(j.done)
		}
		if j.live() || j.State == api.JobLeaked {
			if _, err := os.Stat(j.Cgroup); errors.Is(err, os.ErrNotExist) {
				m.finishLocked(j, api.JobEnded, api.ReasonExited)
			} else if j.PID == 0 {
				// A spawned job whose report the crash cut off (spawn.go): its process,
				// if it started, is the one in its cgroup.
				if pids, err := procsOf(j.Cgroup); err == nil && len(pids) > 0 {
					j.PID = pids[0]
				}
			}
		}
		m.listLocked(j)
	}
	m.indexEndedLocked()
	for _, l := range leases {
		m.commitLeaseLocked(*l)
	}
	m.pruneLeasesLocked()
	if len(m.jobs) > 0 {
		m.rootReady = true
	}
	m.compactLocked() // a journal of this boot, holding just the jobs loaded
}

// logLocked appends recs to the journal (nothing without a registry). Its error is the
// registry's state until a write succeeds again; the journal is rewritten when due.
func (m *Manager) logLocked(recs ...record) error {
	if m.journal == nil {
		return m.regErr
	}
	err := m.journal.append(recs...)
	if err != nil {
		if m.regErr == nil {
			m.opts.Logger.Warn("job registry not written", "err", err)
		}
		m.regErr = err
		return err
	}
	m.regErr = nil
	if m.journal.due() {
		m.compactLocked()
	}
	return nil
}

func (m *Manager) putLocked(j *job) {
	c := *j
	m.logLocked(record{Op: "put", Job: &c})
}

// compactLocked rewrites the journal as one boot record and one put per job.
func (m *Manager) compactLocked() {
	if m.journal == nil {
		return
	}
	recs := []record{{Op: "boot", BootID: m.boot, Version: journalVersion}}
	for _, l := range m.leases {
		recs = append(recs, leaseRecord(*l))
	}
	for _, j := range m.jobs {
		c := *j
		recs = append(recs, record{Op: "put", Job: &c})
	}
	if err := m.journal.rewrite(recs); err != nil {
		m.opts.Logger.Warn("job registry not rewritten: appending to the old journal", "err", err)
	}
}

// closeRegistry writes the registry compactly and releases it (Run's end).
func (m *Manager) closeRegistry() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.journal == nil {
		return
	}
	m.compactLocked()
	m.journal.close()
	m.journal = nil
	m.regErr = errors.New("the job registry is closed: sandboxd is stopping")
}

// registryLocked is the registry part of the status.
func (m *Manager) registryLocked() *api.JobsRegistry {
	if m.opts.RegistryDir == "" {
		return nil
	}
	r := &api.JobsRegistry{Dir: m.opts.RegistryDir}
	if m.journal != nil {
		r.JournalBytes, r.WrittenBytes = m.journal.size, m.journal.written
	}
	if m.regErr != nil {
		r.Error = m.regErr.Error()
	}
	return r
}

// A registry written before ids were each owner's own (issue 21) holds a job of a
// non-root owner under its plain id, in <root>/jobs/<id>: it held that id against root,
// whose `run --id ID` was refused 409 until the old job ended. At load such a job is
// re-keyed as if registered now (ID@UID, its owner's namespace), its cgroup kept where it
// is on disk (a cgroup v2 directory cannot be renamed, and its processes were told the
// path in SANDBOXD_JOB_CGROUP); a shared lease whose jobs are all one such owner's is
// re-keyed the same way. Root's job of that id, registered while the old one still holds
// <root>/jobs/ID, gets the cgroup <root>/jobs/ID@0 (never a key: '@0' names no owner).

// rekeyLegacy re-keys byID's jobs of non-root owners saved under a plain id, and the
// plain leases only they share; it returns the new key of each job by its old one.
func rekeyLegacy(byID map[string]*job, leases map[string]*lease) map[string]string {
	moved := map[string]string{}
	for key, j := range byID {
		if strings.Contains(key, "@") || validKey(key) != nil || j.Owner == nil || j.Owner.UID == 0 {
			continue
		}
		if nk := jobKey(j.Owner.UID, key); byID[nk] == nil {
			moved[key] = nk
		}
	}
	for old, nk := range moved {
		j := byID[old]
		delete(byID, old)
		j.ID = nk
		byID[nk] = j
	}
	for name, l := range leases {
		if strings.Contains(name, "@") {
			continue
		}
		uid, n := uint32(0), 0
		for _, j := range byID {
			if j.Lease != name {
				continue
			}
			if _, ok := moved[pubID(j.ID)]; !ok || (n > 0 && j.Owner.UID != uid) {
				n = -1
				break
			}
			uid, n = j.Owner.UID, n+1
		}
		nk := jobKey(uid, name)
		if n <= 0 || leases[nk] != nil {
			continue
		}
		delete(leases, name)
		l.Name = nk
		leases[nk] = l
		for _, j := range byID {
			if j.Lease == name {
				j.Lease = nk
			}
		}
	}
	return moved
}

// cgroupOfKey says whether j's cgroup is the one its key may have: <root>/jobs/KEY; for
// ID@UID also <root>/jobs/ID (re-keyed from a registry before per-owner ids); for root's
// ID also <root>/jobs/ID@0 (made while such a job held <root>/jobs/ID).
func cgroupOfKey(root string, j *job) bool {
	dir := filepath.Join(root, "jobs")
	switch filepath.Clean(j.Cgroup) {
	case filepath.Join(dir, j.ID):
		return true
	case filepath.Join(dir, pubID(j.ID)):
		return strings.Contains(j.ID, "@")
	case filepath.Join(dir, j.ID+"@0"):
		return !strings.Contains(j.ID, "@")
	}
	return false
}

// sortedByOwnCgroup lists byID's jobs, those in the cgroup named by their key first (so a
// cgroup two entries claim stays the one whose name it bears), then by key.
func sortedByOwnCgroup(root string, byID map[string]*job) []*job {
	out := make([]*job, 0, len(byID))
	for _, j := range byID {
		if j != nil {
			out = append(out, j)
		}
	}
	named := func(j *job) bool { return filepath.Clean(j.Cgroup) == filepath.Join(root, "jobs", j.ID) }
	sort.Slice(out, func(a, b int) bool {
		if na, nb := named(out[a]), named(out[b]); na != nb {
			return na
		}
		return out[a].ID < out[b].ID
	})
	return out
}

// cgroupForLocked is the cgroup of a new job of key: <root>/jobs/KEY, unless a job
// re-keyed from an older registry holds it (then KEY@0). Caller holds m.mu.
func (m *Manager) cgroupForLocked(key string) string {
	dir := filepath.Join(m.root, "jobs", key)
	if !m.otherCgroups {
		return dir
	}
	for _, o := range m.jobs {
		if o.ID != key && filepath.Clean(o.Cgroup) == dir && (o.live() || o.State == api.JobLeaked) {
			return dir + "@0"
		}
	}
	return dir
}

// jobOfCgroupLocked is the job whose cgroup is dir (nil if none). Caller holds m.mu.
func (m *Manager) jobOfCgroupLocked(dir string) *job {
	if j := m.jobs[filepath.Base(dir)]; j != nil && filepath.Clean(j.Cgroup) == filepath.Clean(dir) {
		return j
	}
	if !m.otherCgroups {
		return nil
	}
	for _, j := range m.jobs {
		if filepath.Clean(j.Cgroup) == filepath.Clean(dir) {
			return j
		}
	}
	return nil
}

// CgroupOf is the cgroup of the job of key (where a mount tied to it runs its commands):
// its own, which for a job re-keyed from an older registry is not named by its key.
func (m *Manager) CgroupOf(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j := m.jobs[key]; j != nil {
		return j.Cgroup
	}
	return filepath.Join(m.root, "jobs", key)
}

// Rekeyed is the new key of each job the load re-keyed from a registry before per-owner
// ids, by its old key (a mount saved tied to the old key follows it).
func (m *Manager) Rekeyed() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]string, len(m.rekeyed))
	for k, v := range m.rekeyed {
		out[k] = v
	}
	return out
}
