package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// Every job has an owner (issue 21): the uid that registered it and the pid namespace of
// the registering process. Only the owner, root or the daemon's own uid may end it,
// heartbeat it (extend or shorten its lease) or tie a mount to it; a process inside the
// job's own cgroup may not heartbeat it (a job could otherwise hold its lease forever).

// Owner is who registered a job.
type Owner struct {
	UID uint32 `json:"uid"`
	// PidNS is the registering process's pid namespace ("pid:[4026531836]"); "" when it
	// could not be read (a call from within sandboxd, a peer it cannot see).
	PidNS string `json:"pidns,omitempty"`
}

// ownerOf is the owner a registration by by records.
func ownerOf(by Caller, procRoot string) *Owner {
	o := &Owner{UID: by.UID}
	if by.Peer != nil && by.Peer.PID > 0 {
		o.PidNS, _ = os.Readlink(filepath.Join(procRoot, strconv.Itoa(by.Peer.PID), "ns", "pid"))
	}
	return o
}

// String names a caller for events and logs: "uid 1000 (pid 4242)", "sandboxd".
func (c Caller) String() string {
	if c.Peer == nil {
		if c.UID == 0 {
			return "sandboxd"
		}
		return fmt.Sprintf("uid %d", c.UID)
	}
	if c.Peer.PID > 0 {
		return fmt.Sprintf("uid %d (pid %d)", c.UID, c.Peer.PID)
	}
	return fmt.Sprintf("uid %d (pid not visible from sandboxd)", c.UID)
}

// privileged: root, or the daemon's own uid (which holds its rights already).
func (c Caller) privileged() bool { return c.UID == 0 || c.UID == uint32(os.Geteuid()) }

// ownerUIDLocked is j's owner's uid. A job saved before owners were recorded belongs to
// the uid its process runs as (a non-root caller could only register its own process),
// or to root once that process is gone. Caller holds m.mu.
func (m *Manager) ownerUIDLocked(j *job) uint32 {
	if j.Owner != nil {
		return j.Owner.UID
	}
	if _, uid, ok := procInfo(m.opts.ProcRoot, j.PID); ok {
		return uid
	}
	return 0
}

// mayManageLocked refuses (403) a caller other than j's owner, root or the daemon's uid;
// what names the act ("end", "heartbeat"). Caller holds m.mu.
func (m *Manager) mayManageLocked(j *job, by Caller, what string) error {
	if by.privileged() {
		return nil
	}
	if owner := m.ownerUIDLocked(j); owner != by.UID {
		m.opts.Logger.Warn("refused: a job of another uid", "job", pubID(j.ID), "act", what, "by", by.String(), "owner_uid", owner)
		return api.NewProblem(api.CodeForbidden, "job %q belongs to uid %d: only that uid or root may %s it (you are %s)", pubID(j.ID), owner, what, by)
	}
	return nil
}

// inOwnJobLocked refuses (403) a heartbeat from a process inside j's own cgroup: the
// job's processes cannot keep their own lease alive. A peer sandboxd cannot see is let
// through (its cgroup cannot be read). Caller holds m.mu.
func (m *Manager) inOwnJobLocked(j *job, by Caller) error {
	if by.Peer == nil || by.Peer.PID <= 0 {
		return nil
	}
	cg, err := pidCgroup(m.opts.ProcRoot, strconv.Itoa(by.Peer.PID))
	if err != nil {
		return nil
	}
	own := m.cg.rel(j.Cgroup)
	if cg == own || strings.HasPrefix(cg, own+"/") {
		m.opts.Logger.Warn("refused: a job's own process heartbeats it", "job", pubID(j.ID), "by", by.String())
		return api.NewProblem(api.CodeForbidden, "job %q: the heartbeat comes from process %d inside the job's own cgroup (%s); a job's lease is renewed by its runner from outside the job, never by the job itself",
			pubID(j.ID), by.Peer.PID, cg)
	}
	return nil
}

// liveOfLocked counts the live jobs uid owns; caller holds m.mu.
func (m *Manager) liveOfLocked(uid uint32) int { return m.liveOf[uid] }

// Resolve is the job id names for by (findLocked): its key, which OnEnd passes when it
// ends, its owner's uid and its state. Errors are *api.Problem.
func (m *Manager) Resolve(id string, by Caller) (key string, owner uint32, state string, reason string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.findLocked(id, by)
	if err != nil {
		return "", 0, "", "", err
	}
	return j.ID, m.ownerUIDLocked(j), j.State, j.Reason, nil
}

// OwnerUID is the uid that owns job id as root names it (false when there is no such
// job).
func (m *Manager) OwnerUID(id string) (uint32, bool) {
	_, uid, _, _, err := m.Resolve(id, Caller{})
	return uid, err == nil
}

// ownerView is j's owner as the API shows it; caller holds m.mu.
func (m *Manager) ownerView(j *job) *api.JobOwner {
	if j.Owner == nil {
		return &api.JobOwner{UID: m.ownerUIDLocked(j)}
	}
	return &api.JobOwner{UID: j.Owner.UID, PidNS: j.Owner.PidNS}
}

// Ids are namespaced per owner (issue 21: another uid could squat the id a runner would
// use, and `sandboxd run --id` then exited 65). The registry keys a job by its id and its
// owner: root's job "build-1" is "build-1", uid 65534's is "build-1@65534" — its key, its
// cgroup's name (<root>/jobs/build-1@65534) and its record in the journal. The API shows
// the id as it was asked for, with the owner beside it; '@' is never part of an id, so no
// id of one owner can name another's. Shared leases are keyed the same way. A registry
// written before keys (every job's key its id) still loads: such a job keeps its key and
// is found by its owner's uid (findLocked).

// Key is the registry's key of job (or lease) id owned by uid, as OnEnd names a job.
func Key(uid uint32, id string) string { return jobKey(uid, id) }

// jobKey is the key of job (or lease) id owned by uid.
func jobKey(uid uint32, id string) string {
	if uid == 0 {
		return id
	}
	return id + "@" + strconv.FormatUint(uint64(uid), 10)
}

// pubID is the id a key was asked for.
func pubID(key string) string {
	id, _, _ := strings.Cut(key, "@")
	return id
}

// validKey checks a key from the registry on disk: an id, or an id of a uid other than
// root.
func validKey(key string) error {
	id, uid, ok := strings.Cut(key, "@")
	if err := validID(id); err != nil {
		return err
	}
	if ok {
		if n, err := strconv.ParseUint(uid, 10, 32); err != nil || n == 0 || strconv.FormatUint(n, 10) != uid {
			return fmt.Errorf("%q is not a job key: want ID or ID@UID", key)
		}
	}
	return nil
}

// keyUID is the uid a key names (0 for a plain id).
func keyUID(key string) (uint32, bool) {
	_, s, ok := strings.Cut(key, "@")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// findLocked is the job id names for by: the job of by.Owner when set (?owner=UID), else
// by's own, else the only job of that id whoever owns it (so root can still end a job of
// another uid by its id; ending or heartbeating another's is refused by mayManageLocked).
// Caller holds m.mu.
func (m *Manager) findLocked(id string, by Caller) (*job, error) {
	if err := m.waitingLocked(); err != nil {
		return nil, err // not a 404: the job may be in the registry another sandboxd holds
	}
	target := by.UID
	if by.Owner != nil {
		target = *by.Owner
	}
	if j := m.jobs[jobKey(target, id)]; j != nil {
		return j, nil
	}
	if j := m.jobs[id]; j != nil && target != 0 && m.ownerUIDLocked(j) == target {
		return j, nil // registered before keys: its key is its id
	}
	if by.Owner != nil {
		return nil, m.notFoundLocked(jobKey(target, id))
	}
	var found []*job
	for _, j := range m.jobs {
		if pubID(j.ID) == id && !j.placing {
			found = append(found, j)
		}
	}
	switch len(found) {
	case 0:
		return nil, m.notFoundLocked(jobKey(target, id))
	case 1:
		return found[0], nil
	}
	var uids []string
	for _, j := range found {
		uids = append(uids, strconv.FormatUint(uint64(m.ownerUIDLocked(j)), 10))
	}
	sort.Strings(uids)
	return nil, api.NewProblem(api.CodeConflict, "%d jobs have the id %q, of uids %s, and none is yours (uid %d): name the owner with ?owner=UID",
		len(found), id, strings.Join(uids, ", "), by.UID)
}

// ownerUID is j's owner's uid, taking m.mu.
func (m *Manager) ownerUID(j *job) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ownerUIDLocked(j)
}
