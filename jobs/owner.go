package jobs

import (
	"fmt"
	"os"
	"path/filepath"
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
		m.opts.Logger.Warn("refused: a job of another uid", "job", j.ID, "act", what, "by", by.String(), "owner_uid", owner)
		return api.NewProblem(api.CodeForbidden, "job %q belongs to uid %d: only that uid or root may %s it (you are %s)", j.ID, owner, what, by)
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
		m.opts.Logger.Warn("refused: a job's own process heartbeats it", "job", j.ID, "by", by.String())
		return api.NewProblem(api.CodeForbidden, "job %q: the heartbeat comes from process %d inside the job's own cgroup (%s); a job's lease is renewed by its runner from outside the job, never by the job itself",
			j.ID, by.Peer.PID, cg)
	}
	return nil
}

// liveOfLocked counts the live jobs uid owns; caller holds m.mu.
func (m *Manager) liveOfLocked(uid uint32) int {
	n := 0
	for _, j := range m.jobs {
		if j.live() && j.Owner != nil && j.Owner.UID == uid {
			n++
		}
	}
	return n
}

// OwnerUID is the uid that owns job id (false when there is no such job).
func (m *Manager) OwnerUID(id string) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok {
		return 0, false
	}
	return m.ownerUIDLocked(j), true
}

// ownerView is j's owner as the API shows it; caller holds m.mu.
func (m *Manager) ownerView(j *job) *api.JobOwner {
	if j.Owner == nil {
		return &api.JobOwner{UID: m.ownerUIDLocked(j)}
	}
	return &api.JobOwner{UID: j.Owner.UID, PidNS: j.Owner.PidNS}
}
