package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// Bounds on what one registration may carry (bounded memory per job).
const (
	maxIDLen      = 128
	maxLabels     = 32
	maxLabelKey   = 64
	maxLabelValue = 256
	maxGrace      = 10 * time.Minute
)

// validID accepts what can name a cgroup directory and a site's job (the name up to its
// first '.'): letters, digits, '-' and '_'.
func validID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("%q is not a job id: use 1 to %d letters, digits, '-' or '_'", id, maxIDLen)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%q is not a job id: %q is not allowed (use letters, digits, '-' or '_'; the id names a cgroup directory and a site's files)", id, c)
		}
	}
	return nil
}

func bad(format string, args ...any) error {
	return api.NewProblem(api.CodeBadRequest, format, args...)
}

// Register makes pid a job: it moves the process into <root>/jobs/<id>, so everything it
// forks from then on is the job's, and starts its lease. Errors are *api.Problem.
func (m *Manager) Register(req api.JobRequest, by Caller) (api.Job, error) {
	a, err := m.check(&req, by, pidFrom)
	if err != nil {
		return api.Job{}, err
	}

	// Pin the process first: whatever happens to the pid number, fd names this process.
	// The caller itself is pinned already, by the kernel's own account of the connection.
	fd := -1
	if by.Peer != nil && by.Peer.PID == req.PID && by.Peer.Pidfd >= 0 {
		fd = by.Peer.Pidfd
	} else {
		var err error
		if fd, err = unix.PidfdOpen(req.PID, 0); err != nil {
			return api.Job{}, bad("field \"pid\": no process %d (%v)", req.PID, err)
		}
		defer unix.Close(fd)
	}
	if err := m.checkPid(req.PID, by); err != nil {
		return api.Job{}, err
	}
	j, err := m.admit(req, by, a)
	if err != nil {
		return api.Job{}, err
	}
	if err := m.place(j, fd); err != nil {
		m.drop(j)
		return api.Job{}, err
	}
	v := m.placed(j, a)
	if v.Processes == 0 {
		// Its process exited before the watch on its cgroup's events was added (placed),
		// or was a zombie when moved, which the pidfd's signal 0 does not tell: the empty
		// cgroup will not change, so no event would end the job, and it would hold its id
		// and a slot of its uid's max_per_uid as running until its lease lapsed.
		m.checkEmpty(j)
	}
	return v, nil
}

// admission is what check settled about a registration besides the request itself.
type admission struct {
	ttl, life, grace time.Duration
	warnings         []string
	id               string // the job id as asked (its key is the owner's: jobKey)
	by               Caller
}

// check validates req (filling in a generated id) as a registration by by; pid settles
// which process it names (pidFrom, or nothing for a spawned job). Errors are *api.Problem.
func (m *Manager) check(req *api.JobRequest, by Caller, pid func(*api.JobRequest, Caller) error) (admission, error) {
	if m.unavailable != "" {
		return admission{}, api.NewProblem(api.CodeJobsUnavailable, "jobs are unavailable on this host: %s", m.unavailable)
	}
	if err := m.Waiting(); err != nil {
		return admission{}, err
	}
	m.mu.Lock()
	lim := m.opts // SetLimits may change them under mu
	m.mu.Unlock()
	var warnings []string
	if req.ID == "" {
		var b [8]byte
		rand.Read(b[:])
		req.ID = hex.EncodeToString(b[:])
	}
	if err := validID(req.ID); err != nil {
		return admission{}, bad("field \"id\": %v", err)
	}
	if err := pid(req, by); err != nil {
		return admission{}, err
	}
	ttl := lim.DefaultTTL
	if req.TTL != nil {
		if ttl = req.TTL.D(); ttl <= 0 {
			return admission{}, bad("field \"ttl\": the lease must be longer than 0s, got %s", api.FormatDuration(ttl))
		}
	}
	life := lim.MaxLifetime
	if req.MaxLifetime != nil {
		switch v := req.MaxLifetime.D(); {
		case v <= 0:
			return admission{}, bad("field \"max_lifetime\": must be longer than 0s, got %s", api.FormatDuration(v))
		case v > life:
			warnings = append(warnings, fmt.Sprintf("max_lifetime %s is above the cap [jobs] max_lifetime = %s: clamped to %s", api.FormatDuration(v), api.FormatDuration(life), api.FormatDuration(life)))
		default:
			life = v
		}
	}
	if ttl > life {
		// Checked here, not as boot+ttl: a ttl of 2562047h overflowed the lease instant
		// into the past and ended the job at once (issue 21).
		warnings = append(warnings, fmt.Sprintf("ttl %s is longer than the job's max_lifetime %s: clamped to %s", api.FormatDuration(ttl), api.FormatDuration(life), api.FormatDuration(life)))
		ttl = life
	}
	grace := lim.Grace
	if req.Grace != nil {
		if grace = req.Grace.D(); grace > maxGrace {
			warnings = append(warnings, fmt.Sprintf("grace %s is above %s: clamped to %s", api.FormatDuration(grace), api.FormatDuration(maxGrace), api.FormatDuration(maxGrace)))
			grace = maxGrace
		}
	}
	if req.Lease != "" {
		if err := validID(req.Lease); err != nil {
			return admission{}, bad("field \"lease\": %v", strings.Replace(err.Error(), "job id", "lease name", 1))
		}
	}
	if req.Site != "" && lim.SiteKnown != nil && !lim.SiteKnown(req.Site) {
		return admission{}, api.NewProblem(api.CodeNotFound, "field \"site\": no site %q is configured", req.Site)
	}
	if len(req.Labels) > maxLabels {
		return admission{}, bad("field \"labels\": at most %d labels, got %d", maxLabels, len(req.Labels))
	}
	for k, v := range req.Labels {
		if k == "" || len(k) > maxLabelKey || len(v) > maxLabelValue {
			return admission{}, bad("field \"labels\": label %.40q: keys are 1 to %d bytes, values at most %d", k, maxLabelKey, maxLabelValue)
		}
	}

	return admission{ttl: ttl, life: life, grace: grace, warnings: warnings, id: req.ID, by: by}, nil
}

// admit reserves req.ID for a checked registration and writes it down first: a job that
// could not be made durable is refused before any process is moved or started, never
// answered 201 and forgotten by a restart. The job is placing until placed or dropped.
func (m *Manager) admit(req api.JobRequest, by Caller, a admission) (*job, error) {
	ttl, life, grace := a.ttl, a.life, a.grace
	// The job's key: its id within its owner's namespace (owner.go), so another uid can
	// never hold the id this caller will use.
	key := jobKey(by.UID, req.ID)
	m.mu.Lock()
	if old := m.holderLocked(key, req.ID, by.UID); old != nil && old.State == api.JobRunning && !old.placing {
		// The id's last job may have ended a moment ago with its end not yet noticed (it
		// is, from its cgroup's events, after its caller's answer: `sandboxd run --id x --
		// true` twice in a row): look now rather than refuse.
		m.mu.Unlock()
		m.checkEmpty(old)
		m.mu.Lock()
	}
	lim := m.opts
	if old := m.holderLocked(key, req.ID, by.UID); old != nil {
		owner := m.ownerUIDLocked(old)
		m.mu.Unlock()
		return nil, api.NewProblem(api.CodeConflict, "job %q is already registered and %s (pid %d, owner uid %d, since %s)",
			req.ID, old.State, old.PID, owner, old.StartedAt.Format(time.RFC3339))
	}
	// The counts walk every job, the ended ones kept listed too (up to keep_ended_max,
	// 1,024): only when they can matter, not on every registration's path (issue 27).
	if len(m.jobs) >= lim.MaxJobs {
		live := 0
		for _, j := range m.jobs {
			if j.live() {
				live++
			}
		}
		if live >= lim.MaxJobs {
			m.mu.Unlock()
			return nil, api.NewProblem(api.CodeJobsUnavailable, "the registry is full: %d live jobs, the most this daemon holds; end some first", live)
		}
	}
	if !by.privileged() {
		if n := m.liveOfLocked(by.UID); n >= lim.MaxPerUID {
			m.mu.Unlock()
			return nil, api.NewProblem(api.CodeJobsUnavailable, "uid %d holds %d live jobs, the most one uid may ([jobs] max_per_uid = %d); end some first", by.UID, n, lim.MaxPerUID)
		}
	}
	// Reserve the id while the cgroup is made, so a concurrent call for it gets 409, and
	// write the registration down first: a job that could not be made durable is refused
	// before any process is moved, never answered 201 and forgotten by a restart.
	now, boot := m.opts.Now(), boottime()
	j := &job{ID: key, Site: req.Site, PID: req.PID, State: api.JobRunning, Labels: req.Labels,
		Cgroup: m.cgroupForLocked(key),
		TTL:    ttl, Grace: grace, done: make(chan struct{}), placing: true, Owner: ownerOf(by, m.opts.ProcRoot),
		StartedAt: now.Round(time.Millisecond), StartBoot: boot, DeadlineBoot: boot + int64(life)}
	j.LeaseBoot = min(boot+int64(ttl), j.DeadlineBoot)
	recs := []record{}
	var shared lease
	if req.Lease != "" {
		lk := jobKey(by.UID, req.Lease) // a lease is its owner's too
		shared = m.joinLeaseLocked(lk, ttl, boot)
		j.Lease, j.LeaseBoot = lk, min(shared.LeaseBoot, j.DeadlineBoot)
		recs = append(recs, leaseRecord(shared))
	}
	c := *j
	if err := m.logLocked(append(recs, record{Op: "put", Job: &c})...); err != nil {
		m.mu.Unlock()
		return nil, api.NewProblem(api.CodeStateUnavailable, "job %q not registered: the registry in %s cannot be written, so the job would be forgotten by a restart of sandboxd and outlive its lease: %v", req.ID, m.opts.RegistryDir, err)
	}
	m.listLocked(j) // in place of an ended job of that key, listed until now
	if req.Lease != "" {
		m.commitLeaseLocked(shared)
	}
	m.mu.Unlock()

	return j, nil
}

// holderLocked is the job that holds the id a registration of uid asks for (key is its
// key in uid's namespace), if any: a live or leaked one.
func (m *Manager) holderLocked(key, id string, uid uint32) *job {
	for _, k := range []string{key, id} {
		old, ok := m.jobs[k]
		if !ok || !(old.live() || old.State == api.JobLeaked) || k != key && m.ownerUIDLocked(old) != uid {
			continue
		}
		return old
	}
	return nil
}

// drop forgets a job whose placing failed.
func (m *Manager) drop(j *job) {
	m.mu.Lock()
	if m.jobs[j.ID] == j {
		m.unlistLocked(j)
		m.logLocked(record{Op: "forget", ID: j.ID})
	}
	m.mu.Unlock()
}

// placed ends j's placing: its process is in its cgroup, the dead-man switch takes it.
func (m *Manager) placed(j *job, a admission) api.Job {
	now := m.opts.Now()
	m.mu.Lock()
	j.placing = false
	m.lastActivity = now
	// Ended jobs are pruned as they end (finish) and at each tick, not on the caller's
	// answer (issue 27).
	if m.watch != nil {
		j.wd = m.watch.add(j)
	}
	m.rearmLocked(min(j.LeaseBoot, j.DeadlineBoot))
	v := m.viewLocked(j)
	m.mu.Unlock()
	v.Processes = countProcs(j.Cgroup)
	v.Warnings = a.warnings
	m.emit(api.Event{Kind: api.EventJob, Subject: a.id, Message: "job registered by " + a.by.String(),
		Fields: map[string]any{"pid": j.PID, "cgroup": j.Cgroup, "ttl": a.ttl.String(), "max_lifetime": a.life.String(), "site": j.Site, "owner_uid": a.by.UID}})
	return v // the event is the log line (issue 23: every job event was logged twice)
}

// pidFrom settles which process req registers. Without a pid in the body it is the
// caller, as the kernel names it in sandboxd's pid namespace; a pid in the body is a number
// of the caller's namespace, taken only when that is sandboxd's own (CONTRACT §17): from a
// container it names, on the host, some unrelated process.
func pidFrom(req *api.JobRequest, by Caller) error {
	if req.PID < 0 {
		return bad("field \"pid\": want the process id (> 0) of the job's first process, or no pid to register the calling process, got %d", req.PID)
	}
	if by.Peer == nil { // sandboxd's own call: its numbers are its own
		if req.PID == 0 {
			return bad("field \"pid\": want the process id (> 0) of the job's first process, got 0")
		}
		return nil
	}
	if req.PID == 0 {
		if by.Peer.Exited {
			return bad("field \"pid\" is left out, so the job is the calling process, but it exited before sandboxd could pin it")
		}
		if by.Peer.PID <= 0 || by.Peer.Pidfd < 0 {
			return bad("field \"pid\" is left out, so the job is the calling process, but %s: register from a process sandboxd can see", by.Peer.whyForeign())
		}
		req.PID = by.Peer.PID
		return nil
	}
	if why := by.Peer.whyForeign(); why != "" {
		return bad("field \"pid\": %d is not taken: %s; leave \"pid\" out to register the calling process (sandboxd learns it from the kernel), e.g. `sandboxd run`", req.PID, why)
	}
	return nil
}

// checkPid refuses a process the caller may not hand over: another user's (unless the
// caller is root), the daemon itself, PID 1, or one that another job already holds.
func (m *Manager) checkPid(pid int, by Caller) error {
	if pid == 1 || pid == os.Getpid() {
		return api.NewProblem(api.CodeForbidden, "field \"pid\": process %d is %s and cannot be a job", pid,
			map[bool]string{true: "PID 1", false: "sandboxd itself"}[pid == 1])
	}
	_, uid, ok := procInfo(m.opts.ProcRoot, pid)
	if !ok {
		return bad("field \"pid\": no process %d", pid)
	}
	if by.UID != 0 && uid != by.UID {
		return api.NewProblem(api.CodeForbidden, "field \"pid\": process %d belongs to uid %d, not to the caller (uid %d); only root may register another user's process", pid, uid, by.UID)
	}
	return m.inAJob(pid, "field \"pid\": process")
}

// inAJob refuses (409) a process already inside a job's cgroup; what names it.
func (m *Manager) inAJob(pid int, what string) error {
	if cg, err := pidCgroup(m.opts.ProcRoot, strconv.Itoa(pid)); err == nil {
		jobsRel := m.cg.rel(filepath.Join(m.root, "jobs"))
		if rest, ok := strings.CutPrefix(cg, jobsRel+"/"); ok {
			owner, _, _ := strings.Cut(rest, "/")
			return api.NewProblem(api.CodeConflict, "%s %d already belongs to job %q (cgroup %s)", what, pid, pubID(owner), cg)
		}
	}
	return nil
}

// place makes the job's cgroup and moves the pinned process into it.
func (m *Manager) place(j *job, fd int) error {
	if err := m.makeCgroup(j); err != nil {
		return err
	}
	return m.move(j, j.PID, fd)
}

// makeCgroup makes the job's cgroup (reusing an empty one the registry does not know).
func (m *Manager) makeCgroup(j *job) error {
	if err := m.ensureRoot(); err != nil {
		return api.NewProblem(api.CodeJobsUnavailable, "cgroup root %s: %v", m.root, err)
	}
	dir := j.Cgroup
	err := unix.Mkdir(dir, 0o755)
	if errors.Is(err, unix.ENOENT) {
		// <root>/jobs went away since it was made (an admin, another daemon on the same
		// root stopping): make it again rather than refuse every registration until a
		// restart ("create cgroup .../jobs/leak-x: no such file or directory").
		m.mu.Lock()
		m.rootReady = false
		m.mu.Unlock()
		if err := m.ensureRoot(); err != nil {
			return api.NewProblem(api.CodeJobsUnavailable, "cgroup root %s: %v", m.root, err)
		}
		err = unix.Mkdir(dir, 0o755)
	}
	if err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return api.NewProblem(api.CodeJobsUnavailable, "create cgroup %s: %v", dir, err)
		}
		// A cgroup the registry does not know (or a job that ended): reuse it only empty.
		if n := countProcs(dir); n > 0 {
			return api.NewProblem(api.CodeConflict, "cgroup %s already has %d processes that no registered job holds (see GET /v1/jobs/leaks)", dir, n)
		}
	}
	return nil
}

// move migrates the process pid, pinned by fd, into j's cgroup (a write to cgroup.procs,
// which waits for the kernel's cgroup synchronization: the slow part of a registration
// that spawn.go avoids). On failure the cgroup is removed.
func (m *Manager) move(j *job, pid, fd int) error {
	dir := j.Cgroup
	if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		removeTree(dir)
		if errors.Is(err, unix.ESRCH) {
			return bad("field \"pid\": process %d exited during registration", pid)
		}
		return api.NewProblem(api.CodeJobsUnavailable, "move process %d into %s: %v", pid, dir, err)
	}
	// The process the pidfd names is alive now, so it was alive all along and the pid
	// number we wrote could only have named it, never a reused pid.
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		removeTree(dir)
		return bad("field \"pid\": process %d exited during registration", pid)
	}
	return nil
}

// ensureRoot creates <root>/jobs on the first registration. Under a delegated subtree the
// daemon first moves itself into the leaf <root>/daemon: cgroup v2's no-internal-processes
// rule would otherwise forbid children beside it once controllers are enabled.
func (m *Manager) ensureRoot() error {
	m.mu.Lock()
	ready := m.rootReady
	m.mu.Unlock()
	if ready {
		return nil
	}
	if m.delegated {
		leaf := filepath.Join(m.root, "daemon")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if own, err := ownCgroup(m.opts.ProcRoot); err == nil && own == m.cg.rel(m.root) {
			if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(m.root, "jobs"), 0o755); err != nil {
		return err
	}
	m.mu.Lock()
	m.rootReady = true
	m.mu.Unlock()
	return nil
}

// Heartbeat renews id's lease by extend (0: the job's ttl), never past its max_lifetime.
func (m *Manager) Heartbeat(id string, extend time.Duration) (api.Job, error) {
	return m.HeartbeatAs(id, extend, Caller{})
}

// HeartbeatAs is Heartbeat asked by by: only the job's owner, root or the daemon's uid,
// and never from a process inside the job's own cgroup (owner.go).
func (m *Manager) HeartbeatAs(id string, extend time.Duration, by Caller) (api.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.findLocked(id, by)
	if err != nil {
		return api.Job{}, err
	}
	if err := m.mayManageLocked(j, by, "heartbeat"); err != nil {
		return api.Job{}, err
	}
	if err := m.inOwnJobLocked(j, by); err != nil {
		return api.Job{}, err
	}
	if j.State != api.JobRunning {
		return api.Job{}, api.NewProblem(api.CodeNotFound, "job %q has ended (state %s, reason %s): a heartbeat cannot bring it back", pubID(j.ID), j.State, j.Reason)
	}
	if l := m.leases[j.Lease]; j.Lease != "" && l != nil {
		// A job of a shared lease has no lease of its own: its heartbeat is the lease's.
		j.Heartbeats++
		warn := m.renewLeaseLocked(l, extend)
		v := m.viewLocked(j)
		if warn != "" {
			v.Warnings = append(v.Warnings, warn)
		}
		return v, nil
	}
	if extend <= 0 {
		extend = j.TTL
	}
	// Without overflow: an extend past the deadline is the deadline (issue 21).
	boot := boottime()
	if left := j.DeadlineBoot - boot; int64(extend) >= left {
		j.LeaseBoot = j.DeadlineBoot
	} else {
		j.LeaseBoot = boot + int64(extend)
	}
	j.Heartbeats++
	m.lastActivity = m.opts.Now()
	// Renewed in memory whatever happens: the job is alive and its runner was heard. A
	// heartbeat that could not be written is covered after a crash by the restart's grace.
	err = m.logLocked(record{Op: "hb", ID: j.ID, LeaseBoot: j.LeaseBoot, Beats: j.Heartbeats})
	m.rearmLocked(j.LeaseBoot) // a shorter extend than the lease had left brings it nearer
	v := m.viewLocked(j)
	if err != nil {
		v.Warnings = append(v.Warnings, "lease renewed in memory only: the registry cannot be written ("+err.Error()+"); a restart of sandboxd would give it one ttl of grace from its start")
	}
	return v, nil
}

// pruneEndedLocked drops ended jobs past keep_ended, and the oldest beyond MaxEnded
// (keep_ended_max), in the order they ended: from the front of m.ended, each job
// looked at once, so a call costs what it drops (amortized O(1)), not every ended job.
func (m *Manager) pruneEndedLocked() {
	boot := boottime()
	for m.endedHead < len(m.ended) {
		j := m.ended[m.endedHead]
		switch {
		case m.jobs[j.ID] != j || !isEnded(j):
			// Left the list already (forgotten, its key registered again).
		case m.endedN > m.opts.MaxEnded:
			m.forgetLocked(j, fmt.Sprintf("[jobs] keep_ended_max = %d (the most ended jobs kept listed; the oldest go first)", m.opts.MaxEnded))
		case boot-j.EndedBoot > int64(m.opts.KeepEnded):
			m.forgetLocked(j, "[jobs] keep_ended = "+api.FormatDuration(m.opts.KeepEnded))
		default:
			m.compactEndedLocked()
			return // the oldest listed is within both limits: so is every later one
		}
		m.ended[m.endedHead] = nil
		m.endedHead++
	}
	m.compactEndedLocked()
}

// compactEndedLocked drops the consumed front of m.ended once it is most of it, and the
// entries of jobs no longer listed once they are most of the rest: an id registered
// again and again leaves one behind each time, which the front reaches only when every
// older ended job is gone (keep_ended later). Each costs a pass over what it frees.
func (m *Manager) compactEndedLocked() {
	if stale := len(m.ended) - m.endedHead - m.endedN; stale > 64 && stale > m.endedN {
		n := 0
		for _, j := range m.ended[m.endedHead:] {
			if m.jobs[j.ID] == j && isEnded(j) {
				m.ended[n] = j
				n++
			}
		}
		clear(m.ended[n:])
		m.ended, m.endedHead = m.ended[:n], 0
		return
	}
	if m.endedHead > 64 && m.endedHead > len(m.ended)/2 {
		n := copy(m.ended, m.ended[m.endedHead:])
		clear(m.ended[n:])
		m.ended, m.endedHead = m.ended[:n], 0
	}
}
