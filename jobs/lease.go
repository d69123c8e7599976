package jobs

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Shared (session) leases (issue 20 item 4, CONTRACT §17). A runner thinks in sessions:
// one lease per sandbox session, renewed every minute, and every command of the session
// lives under it. A job registered with "lease": NAME has no lease of its own: its lease
// is NAME's, so one heartbeat (POST /v1/leases/NAME/heartbeat, or a heartbeat of any of
// its jobs) renews them all and costs one small journal record, however many jobs; a
// lapse ends them all; DELETE /v1/leases/NAME ends them all and answers once every cgroup
// is empty. max_lifetime stays each job's own hard cap. A lease exists while a job of it
// is listed.

// lease is one shared lease; exported fields are what the journal keeps.
type lease struct {
	Name       string        `json:"name"`
	TTL        time.Duration `json:"ttl"`
	LeaseBoot  int64         `json:"lease_boot"`
	Heartbeats int64         `json:"heartbeats"`
}

// joinLeaseLocked is the lease a registration of ttl at boot joins, renewed to at least
// boot+ttl (a copy: committed by commitLeaseLocked once written down).
func (m *Manager) joinLeaseLocked(name string, ttl time.Duration, boot int64) lease {
	if l := m.leases[name]; l != nil {
		c := *l
		c.LeaseBoot = max(c.LeaseBoot, boot+int64(ttl))
		return c
	}
	return lease{Name: name, TTL: ttl, LeaseBoot: boot + int64(ttl)}
}

// commitLeaseLocked stores l and gives its running jobs its lease (each capped by its own
// max_lifetime).
func (m *Manager) commitLeaseLocked(l lease) {
	if m.leases == nil {
		m.leases = map[string]*lease{}
	}
	c := l
	m.leases[l.Name] = &c
	for j := range m.leaseJobs[l.Name] {
		if j.State == api.JobRunning {
			j.LeaseBoot = min(l.LeaseBoot, j.DeadlineBoot)
		}
	}
}

// listLocked lists j under its key, in place of any job listed there before, and among
// its lease's jobs.
func (m *Manager) listLocked(j *job) {
	if old := m.jobs[j.ID]; old != nil {
		m.unlistLocked(old)
	}
	m.jobs[j.ID] = j
	m.countLiveLocked(j, 1)
	if j.Lease == "" {
		return
	}
	if m.leaseJobs == nil {
		m.leaseJobs = map[string]map[*job]struct{}{}
	}
	js := m.leaseJobs[j.Lease]
	if js == nil {
		js = map[*job]struct{}{}
		m.leaseJobs[j.Lease] = js
	}
	js[j] = struct{}{}
}

// countLiveLocked adds d to the live count of j's owner when j is live (liveOf).
func (m *Manager) countLiveLocked(j *job, d int) {
	if !j.live() || j.Owner == nil {
		return
	}
	if m.liveOf == nil {
		m.liveOf = map[uint32]int{}
	}
	if m.liveOf[j.Owner.UID] += d; m.liveOf[j.Owner.UID] <= 0 {
		delete(m.liveOf, j.Owner.UID)
	}
}

// unlistLocked takes the listed job j off the list: an ended one no longer counts
// against keep_ended_max (m.ended), and a lease left without jobs is forgotten at the
// next prune.
func (m *Manager) unlistLocked(j *job) {
	if m.jobs[j.ID] != j {
		return
	}
	if isEnded(j) {
		m.endedN--
	}
	m.countLiveLocked(j, -1)
	if js := m.leaseJobs[j.Lease]; js != nil {
		delete(js, j)
		if len(js) == 0 {
			delete(m.leaseJobs, j.Lease)
			m.unusedLeases = append(m.unusedLeases, j.Lease)
		}
	}
	delete(m.jobs, j.ID)
}

func leaseRecord(l lease) record { return record{Op: "lease", Lease: &l} }

// renewLeaseLocked renews l by extend (0: its ttl) from now, writes it down and returns
// a warning when that could not be done.
func (m *Manager) renewLeaseLocked(l *lease, extend time.Duration) string {
	if extend <= 0 {
		extend = l.TTL
	}
	c := *l
	c.LeaseBoot = boottime() + int64(extend)
	c.Heartbeats++
	m.commitLeaseLocked(c)
	m.lastActivity = m.opts.Now()
	m.rearmLocked(c.LeaseBoot)
	if err := m.logLocked(leaseRecord(c)); err != nil {
		return "lease renewed in memory only: the registry cannot be written (" + err.Error() + "); a restart of sandboxd would give it one ttl of grace from its start"
	}
	return ""
}

// leaseJobsLocked are the listed jobs of lease name, oldest first.
func (m *Manager) leaseJobsLocked(name string) []*job {
	var out []*job
	for j := range m.leaseJobs[name] {
		if !j.placing {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].StartBoot != out[b].StartBoot {
			return out[a].StartBoot < out[b].StartBoot
		}
		return out[a].ID < out[b].ID
	})
	return out
}

func (m *Manager) leaseViewLocked(l *lease) api.Lease {
	now, boot := m.opts.Now(), boottime()
	v := api.Lease{Name: l.Name, TTLSeconds: l.TTL.Seconds(), Heartbeats: l.Heartbeats, Jobs: []string{},
		LeaseExpiresAt: now.Add(time.Duration(l.LeaseBoot - boot)).Round(time.Millisecond)}
	v.Name = pubID(l.Name)
	uid, _ := keyUID(l.Name)
	v.Owner = &api.JobOwner{UID: uid}
	for _, j := range m.leaseJobsLocked(l.Name) {
		v.Jobs = append(v.Jobs, pubID(j.ID))
		if j.State == api.JobRunning {
			v.Running++
		}
	}
	return v
}

// Leases lists the shared leases, by name (then owner); owner, when set, only that uid's.
func (m *Manager) Leases(owner *uint32) []api.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.leases))
	for k := range m.leases {
		if uid, _ := keyUID(k); owner == nil || uid == *owner {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]api.Lease, 0, len(keys))
	for _, k := range keys {
		out = append(out, m.leaseViewLocked(m.leases[k]))
	}
	return out
}

// findLeaseLocked is the key of the lease name names for by, as findLocked finds a job:
// by.Owner's, else by's own, else the only lease of that name; "" when there is none.
func (m *Manager) findLeaseLocked(name string, by Caller) (string, error) {
	target := by.UID
	if by.Owner != nil {
		target = *by.Owner
	}
	if k := jobKey(target, name); m.leases[k] != nil {
		return k, nil
	}
	if by.Owner != nil {
		return "", nil
	}
	var found []string
	for k := range m.leases {
		if pubID(k) == name {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	sort.Strings(found)
	return "", api.NewProblem(api.CodeConflict, "%d leases are named %q (%s) and none is yours (uid %d): name the owner with ?owner=UID",
		len(found), name, strings.Join(found, ", "), by.UID)
}

// checkLeaseLocked finds lease name with running jobs, and refuses a caller who may not
// act on every one of them (owner-or-root), or a heartbeat from inside one of them. The
// lease's key is returned as l.Name.
func (m *Manager) checkLeaseLocked(name string, by Caller, what string) (*lease, []*job, error) {
	if err := m.waitingLocked(); err != nil {
		return nil, nil, err
	}
	key, err := m.findLeaseLocked(name, by)
	if err != nil {
		return nil, nil, err
	}
	l := m.leases[key]
	var running []*job
	if l != nil {
		for _, j := range m.leaseJobsLocked(key) {
			if j.State == api.JobRunning {
				running = append(running, j)
			}
		}
	}
	if len(running) == 0 {
		if l != nil && what == "end" {
			return l, nil, nil // ending a lease whose jobs all ended already: nothing to do
		}
		return nil, nil, api.NewProblem(api.CodeNotFound, "no lease %q with a running job", name)
	}
	peerCg := ""
	if what == "heartbeat" && by.Peer != nil && by.Peer.PID > 0 {
		peerCg, _ = pidCgroup(m.opts.ProcRoot, strconv.Itoa(by.Peer.PID))
	}
	for _, j := range running {
		if err := m.mayManageLocked(j, by, what); err != nil {
			return nil, nil, err
		}
		if own := m.cg.rel(j.Cgroup); peerCg != "" && (peerCg == own || strings.HasPrefix(peerCg, own+"/")) {
			return nil, nil, api.NewProblem(api.CodeForbidden, "lease %q: the heartbeat comes from process %d inside its job %q (%s); a lease is renewed by its runner from outside its jobs",
				name, by.Peer.PID, pubID(j.ID), peerCg)
		}
	}
	return l, running, nil
}

// HeartbeatLease renews every job of lease name by extend (0: the lease's ttl), never
// past each job's max_lifetime.
func (m *Manager) HeartbeatLease(name string, extend time.Duration, by Caller) (api.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, _, err := m.checkLeaseLocked(name, by, "heartbeat")
	if err != nil {
		return api.Lease{}, err
	}
	warn := m.renewLeaseLocked(l, extend)
	v := m.leaseViewLocked(m.leases[l.Name])
	if warn != "" {
		v.Warnings = append(v.Warnings, warn)
	}
	return v, nil
}

// EndLease ends every running job of lease name as DELETE /v1/jobs/{id} does and, when
// wait is set, returns once every one of their cgroups is empty (or ctx ends).
func (m *Manager) EndLease(ctx context.Context, name string, wait bool, by Caller) (api.Lease, error) {
	m.mu.Lock()
	l, running, err := m.checkLeaseLocked(name, by, "end")
	if err != nil {
		m.mu.Unlock()
		return api.Lease{}, err
	}
	key := l.Name
	var done []chan struct{}
	for _, j := range running {
		j.askedBy = by.String()
		m.startEndLocked(j, api.ReasonDeleted)
		done = append(done, j.done)
	}
	m.mu.Unlock()
	if wait {
		for _, d := range done {
			select {
			case <-d:
			case <-ctx.Done():
				return m.leaseView(key), ctx.Err()
			}
		}
	}
	return m.leaseView(key), nil
}

func (m *Manager) leaseView(key string) api.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[key]; l != nil {
		return m.leaseViewLocked(l)
	}
	uid, _ := keyUID(key)
	return api.Lease{Name: pubID(key), Jobs: []string{}, Owner: &api.JobOwner{UID: uid}}
}

// pruneLeasesLocked drops leases no listed job names any more.
func (m *Manager) pruneLeasesLocked() {
	m.unusedLeases = m.unusedLeases[:0]
	for name := range m.leases {
		m.forgetUnusedLeaseLocked(name)
	}
}

// pruneUnusedLeasesLocked is pruneLeasesLocked of the leases whose last listed job left
// the list since the last prune: what a job's end may have dropped.
func (m *Manager) pruneUnusedLeasesLocked() {
	for _, name := range m.unusedLeases {
		m.forgetUnusedLeaseLocked(name)
	}
	clear(m.unusedLeases)
	m.unusedLeases = m.unusedLeases[:0]
}

// forgetUnusedLeaseLocked drops the lease name if it exists and no listed job names it.
func (m *Manager) forgetUnusedLeaseLocked(name string) {
	if m.leases[name] != nil && len(m.leaseJobs[name]) == 0 {
		delete(m.leases, name)
		m.logLocked(record{Op: "lease_forget", ID: name})
	}
}

// graceLeasesLocked is the stall grace of shared leases (stall.go): each still valid at
// the last tick is extended by the stall and to at least one ttl from now.
func (m *Manager) graceLeasesLocked(boot, lastTick int64, stall time.Duration) {
	for _, l := range m.leases {
		if l.LeaseBoot < lastTick {
			continue
		}
		c := *l
		c.LeaseBoot = max(l.LeaseBoot+int64(stall), boot+int64(l.TTL))
		m.commitLeaseLocked(c)
		m.logLocked(leaseRecord(c))
	}
}
