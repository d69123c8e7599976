package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// A spawned job (issue 27) is registered before its first process exists: Reserve checks
// and writes the registration down, makes the job's cgroup and opens its directory; the
// caller gets that fd (over SCM_RIGHTS) and starts its command straight in the cgroup with
// clone3(CLONE_INTO_CGROUP), which skips the migration a write to cgroup.procs costs (the
// kernel's cgroup synchronization, ~11 ms here). Then the caller reports its child:
//
//   - Adopt takes the child's pidfd. Nothing in it is taken on trust: the pidfd names one
//     process wherever it lives, its pid here comes from the kernel (fdinfo), and it is
//     the job's process only if it sits in the job's new cgroup and its parent is the
//     caller that reserved the job. Only a process the kernel let write the job's
//     cgroup.procs can have put it there (see below).
//   - Migrate is the fallback when clone3 into the cgroup fails: the caller itself is
//     moved into the cgroup, as POST /v1/jobs without a pid does.
//   - Abandon registers nothing: the cgroup is emptied (cgroup.kill) and removed.
//
// Who may spawn into the cgroup is the kernel's rule for CLONE_INTO_CGROUP, checked with
// the spawning process's own credentials, never with the fd's (kernel/cgroup/cgroup.c,
// cgroup_css_set_fork): write access to the destination's cgroup.procs and to the
// cgroup.procs of the common ancestor of its own cgroup and the destination (cgroup-v2
// "Delegation Containment"). The daemon hands out an O_PATH directory fd and changes no
// permission, so the fd grants nothing by itself: root may spawn into the job's cgroup; a
// non-root runner of a root daemon may not (the job cgroups and their ancestors are
// root's) and gets EACCES, and then asks for the migration, which the daemon does for the
// calling process only. A daemon that runs as the runner's own uid in a delegated subtree
// owns the job cgroups, and the runner may spawn into them within that subtree.

// Spawn is a job reserved for a process its caller has yet to start.
type Spawn struct {
	m       *Manager
	j       *job
	a       admission
	peerPID int  // the caller's pid in sandboxd's namespace: the child's parent
	gone    bool // Adopt found the job's cgroup empty: Settle ends the job
	// Fd is the job's cgroup directory, opened O_PATH|O_DIRECTORY (CLONE_INTO_CGROUP takes
	// an O_PATH fd); CloseFd closes it once it was sent.
	Fd int
}

// noPid is pidFrom for a spawned job: the caller names no process, and must be one
// sandboxd can see (the child's parent is checked against it).
func noPid(req *api.JobRequest, by Caller) error {
	if req.PID != 0 {
		return bad("field \"pid\": a spawned job has no process yet (its first process is reported after it started in the job's cgroup); register an existing process with POST /v1/jobs")
	}
	if by.Peer == nil || by.Peer.PID <= 0 || by.Peer.Pidfd < 0 {
		why := "the caller is not a process sandboxd can see"
		if by.Peer != nil && by.Peer.Exited {
			why = "the caller exited before sandboxd could pin it"
		} else if by.Peer != nil && by.Peer.PID <= 0 {
			why = by.Peer.whyForeign()
		}
		return bad("a spawned job is started by its caller, but %s", why)
	}
	return nil
}

// Reserve registers a job for a process the caller will start in its cgroup (see above).
// The job is in the registry (and its journal) but hidden and left alone by the dead-man
// switch until Adopt, Migrate or Abandon. Errors are *api.Problem.
func (m *Manager) Reserve(req api.JobRequest, by Caller) (*Spawn, error) {
	a, err := m.check(&req, by, noPid)
	if err != nil {
		return nil, err
	}
	// A job's process may not start a job of its own: what it starts would leave its
	// job's lease (the rule POST /v1/jobs applies to the caller it moves). The migration
	// fallback checks the rest of checkPid (PID 1, sandboxd itself).
	if err := m.inAJob(by.Peer.PID, "the calling process"); err != nil {
		return nil, err
	}
	j, err := m.admit(req, by, a)
	if err != nil {
		return nil, err
	}
	if err := m.makeCgroup(j); err != nil {
		m.drop(j)
		return nil, err
	}
	fd, err := unix.Open(j.Cgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		removeTree(j.Cgroup)
		m.drop(j)
		return nil, api.NewProblem(api.CodeJobsUnavailable, "open cgroup %s: %v", j.Cgroup, err)
	}
	return &Spawn{m: m, j: j, a: a, peerPID: by.Peer.PID, Fd: fd}, nil
}

// CloseFd closes the cgroup's fd (sent or not).
func (s *Spawn) CloseFd() {
	if s.Fd >= 0 {
		unix.Close(s.Fd)
		s.Fd = -1
	}
}

// View is the job as reserved: pid 0 until its process is reported.
func (s *Spawn) View() api.Job {
	s.m.mu.Lock()
	v := s.m.viewLocked(s.j)
	s.m.mu.Unlock()
	v.Warnings = s.a.warnings
	return v
}

// Adopt makes the process pidfd names the job's, after checking that the kernel put it in
// the job's cgroup as a child of the caller. On a refusal the job is abandoned (what is in
// its cgroup is killed) and nothing stays registered.
func (s *Spawn) Adopt(pidfd int) (api.Job, error) {
	s.CloseFd()
	p := &Peer{Pidfd: pidfd}
	ppid := 0
	if pid, parent, ok := pidfdInfo(pidfd); ok && parent == s.peerPID {
		p.PID, ppid = pid, parent
	} else if err := p.readFdinfo(); err != nil {
		// Without the ioctl, or a process the kernel does not give as the caller's child:
		// fdinfo and /proc decide, and say why.
		s.Abandon("the reported pidfd cannot be read")
		return api.Job{}, bad("the reported process: %v (a pidfd is wanted)", err)
	}
	pid, err := s.verify(p, pidfd, ppid)
	if err != nil {
		s.Abandon("the reported process was refused")
		return api.Job{}, err
	}
	m := s.m
	m.mu.Lock()
	s.j.PID = pid
	m.putLocked(s.j) // the job's process, for a restart (a write(), as every record)
	m.mu.Unlock()
	v := m.placed(s.j, s.a)
	s.gone = v.Processes == 0
	return v, nil
}

// Settle ends an adopted job whose process was gone by the time it was adopted: a command
// as short as /bin/true may be, and the watch added by Adopt fires only on a change. It is
// called after the caller's answer, which waits for nothing of it (issue 27: the job's
// end, its cgroup's removal and journal record, was on sandboxd run's critical path); a
// registration of the same id meanwhile looks for the end itself (admit).
func (s *Spawn) Settle() {
	if s.gone {
		s.m.checkEmpty(s.j)
	}
}

// verify says whether p is the process the caller started in the job's cgroup; ppid is
// its parent when the kernel gave it for the pidfd (pidfdInfo), else 0: read then.
func (s *Spawn) verify(p *Peer, pidfd, ppid int) (int, error) {
	pid := p.PID
	if p.Exited || pid <= 0 {
		return 0, bad("the reported process is gone or not visible from sandboxd (fdinfo pid %d): report the child's pidfd before waiting for it", pid)
	}
	if ppid == 0 {
		ppid = parentOf(s.m.opts.ProcRoot, pid)
	}
	if ppid != s.peerPID {
		return 0, api.NewProblem(api.CodeForbidden, "the reported process %d is not a child of the caller (its parent is %d, the caller is %d): only the process the caller started in the job's cgroup can be its job", pid, ppid, s.peerPID)
	}
	cg, err := pidCgroup(s.m.opts.ProcRoot, strconv.Itoa(pid))
	if want := s.m.cg.rel(s.j.Cgroup); err != nil || cg != want {
		return 0, api.NewProblem(api.CodeForbidden, "the reported process %d is in cgroup %q, not in the job's %s: start it with clone3(CLONE_INTO_CGROUP) on the fd sandboxd sent, or ask for the migration", pid, cg, want)
	}
	// Alive after the reads: the pid number read was this process's all along.
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return 0, bad("the reported process %d exited while it was checked: %v", pid, err)
	}
	return pid, nil
}

// Migrate registers the caller itself (pinned by the kernel, by) instead: it is moved
// into the job's cgroup, as Register does for a request without a pid.
func (s *Spawn) Migrate(by Caller) (api.Job, error) {
	s.CloseFd()
	if by.Peer == nil || by.Peer.PID != s.peerPID || by.Peer.Pidfd < 0 {
		s.Abandon("the migration was asked by another process")
		return api.Job{}, api.NewProblem(api.CodeForbidden, "only the process that reserved the job may be moved into it")
	}
	if err := s.m.checkPid(by.Peer.PID, by); err != nil {
		s.Abandon("the caller cannot be moved: " + err.Error())
		return api.Job{}, err
	}
	if err := s.m.move(s.j, by.Peer.PID, by.Peer.Pidfd); err != nil {
		s.m.drop(s.j)
		return api.Job{}, err
	}
	m := s.m
	m.mu.Lock()
	s.j.PID = by.Peer.PID
	m.putLocked(s.j)
	m.mu.Unlock()
	return m.placed(s.j, s.a), nil
}

// Abandon drops the reserved job: whatever is in its cgroup (a child that was started
// but never reported) is killed, the cgroup removed, the registration forgotten.
func (s *Spawn) Abandon(why string) {
	s.CloseFd()
	m := s.m
	m.mu.Lock()
	held := m.jobs[s.j.ID] == s.j && s.j.placing
	m.mu.Unlock()
	if !held {
		return
	}
	if countProcs(s.j.Cgroup) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.KillWait)
		m.cg.killAll(ctx, s.j.Cgroup, !m.opts.NoCgroupKill)
		waitEvents(ctx, s.j.Cgroup, func(populated, _ bool) bool { return !populated })
		cancel()
	}
	removeTree(s.j.Cgroup)
	m.drop(s.j)
	m.opts.Logger.Info("spawned job not registered", "job", s.j.ID, "why", why)
}

// pidfdInfo is the pid (in sandboxd's namespace) and the parent of the process pidfd
// names, from the kernel in one ioctl (PIDFD_GET_INFO, Linux 6.13) where fdinfo and
// /proc/PID/status are two file reads, ~90 µs of a spawn's answer on a VM (issue 27). The
// pidfd pins the process, so the two belong together. ok is false on a kernel without the
// ioctl (ENOTTY, EINVAL) and for a process that is reaped or not visible here (ESRCH):
// the reads decide then.
func pidfdInfo(pidfd int) (pid, ppid int, ok bool) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	if err := unix.IoctlPidfdInfo(pidfd, &info); err != nil || info.Mask&unix.PIDFD_INFO_PID == 0 || info.Pid == 0 || info.Ppid == 0 {
		return 0, 0, false
	}
	return int(info.Pid), int(info.Ppid), true
}

// parentOf is pid's parent (PPid of /proc/PID/status, in sandboxd's namespace); 0 if
// unknown.
func parentOf(procRoot string, pid int) int {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	return 0
}
