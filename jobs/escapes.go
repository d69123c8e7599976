package jobs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Escapes (issue 20 item 6). A cgroup holds what a job forks, but not a process that
// writes itself into another cgroup (root can), nor one started on the job's behalf by a
// server outside it (a tmux or screen server already running, a systemd --user unit, a
// daemon reached over a socket). What such a process usually still carries is the job's
// environment: sandboxd run exports SANDBOXD_JOB_ID to its command, and children inherit
// it (with SANDBOXD_JOB_CGROUP). The leak check reads /proc/PID/environ of every process
// outside its job's cgroup and reports, kind "escaped", each one whose SANDBOXD_JOB_ID
// names a job of this registry (listed, or ended and forgotten lately; the cgroup, when
// set, must be that job's) that is no longer running, or a running one whose cgroup it
// is not in. An id this registry never had is left alone: another sandboxd's.
//
// What cannot be caught this way: a process that cleared or changed its environment
// (env -i, a server that builds its children's environment from scratch: a tmux server
// started before the job gives its new windows the server's environment, not the
// client's), a process of another user when sandboxd is not root (its environ is
// unreadable), and work handed to a long-running service that does it in-process. Escaped
// processes are reported, never ended by --clean: the environment is the process's own
// word, which anyone can forge for a process of theirs (a setuid program inherits it too).

// escapeReadBudget bounds the whole environ scan: reading another process's environ takes
// its mmap lock, which a page fault on a hung FUSE file can hold (FIELD-NOTES).
const escapeReadBudget = 5 * time.Second

type escapee struct {
	pid   int
	job   string
	jobCg string // its SANDBOXD_JOB_CGROUP, "" when it has none
	cg    string // the cgroup it is in
}

// scanEnviron lists the processes outside jobsRel's cgroups that carry SANDBOXD_JOB_ID,
// reading in a goroutine the caller stops waiting for after the budget.
func (m *Manager) scanEnviron(ctx context.Context) ([]escapee, bool) {
	jobsRel := m.cg.rel(filepath.Join(m.root, "jobs"))
	out := make(chan []escapee, 1)
	go func() {
		var found []escapee
		ents, _ := os.ReadDir(m.opts.ProcRoot)
		self := os.Getpid()
		key, cgKey := []byte(api.JobIDEnv+"="), []byte(api.JobCgroupEnv+"=")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || ctx.Err() != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(m.opts.ProcRoot, e.Name(), "environ"))
			if err != nil || !bytes.Contains(b, key) {
				continue
			}
			var id, jobCg string
			for _, kv := range bytes.Split(b, []byte{0}) {
				if v, ok := bytes.CutPrefix(kv, key); ok {
					id = string(v)
				} else if v, ok := bytes.CutPrefix(kv, cgKey); ok {
					jobCg = string(v)
				}
			}
			if id == "" {
				continue
			}
			cg, err := pidCgroup(m.opts.ProcRoot, e.Name())
			if err != nil {
				continue
			}
			if cg == jobsRel+"/"+id || strings.HasPrefix(cg, jobsRel+"/"+id+"/") {
				continue // where it belongs
			}
			if own := m.cg.rel(jobCg); jobCg != "" && filepath.Dir(jobCg) == filepath.Join(m.root, "jobs") && (cg == own || strings.HasPrefix(cg, own+"/")) {
				continue // in the job cgroup it was started in (a key other than its id: ID@UID, ID@0)
			}
			found = append(found, escapee{pid: pid, job: id, jobCg: jobCg, cg: cg})
		}
		out <- found
	}()
	select {
	case f := <-out:
		return f, true
	case <-time.After(escapeReadBudget):
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
}

// escapes are the escaped-process leaks: each process found by scanEnviron whose job is
// not running, or which is outside its running job's cgroup.
func (m *Manager) escapes(ctx context.Context, boot int64) []api.Leak {
	found, complete := m.scanEnviron(ctx)
	var out []api.Leak
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range found {
		ticks, _, ok := procInfo(m.opts.ProcRoot, e.pid)
		if !ok {
			continue
		}
		age := float64(boot)/1e9 - float64(ticks)/clockTicks
		l := api.Leak{Kind: api.LeakEscaped, Job: e.job, PID: e.pid, Cgroup: e.cg, Processes: 1, AgeSeconds: max(age, 0)}
		// Only this registry's jobs: another sandboxd on the host (a test, a container's)
		// has jobs of its own, maybe of the same id, told apart by their cgroup.
		key := e.job // its key is its cgroup's name when the process says which
		var j *job
		if e.jobCg != "" && filepath.Dir(e.jobCg) == filepath.Join(m.root, "jobs") {
			key = filepath.Base(e.jobCg)
			if j = m.jobOfCgroupLocked(e.jobCg); j != nil {
				key = j.ID // a job re-keyed from an older registry keeps its cgroup's name
			}
		} else {
			j = m.jobs[key]
		}
		f, forgot := m.forgot[key]
		switch {
		case j != nil && e.jobCg != "" && e.jobCg != j.Cgroup,
			j == nil && (!forgot || e.jobCg != "" && e.jobCg != f.cgroup):
			continue
		}
		switch {
		case j == nil:
			l.Detail = fmt.Sprintf("process %d outlives job %s (%s, %s, ended and forgotten), in cgroup %s", e.pid, e.job, f.state, f.reason, e.cg)
		case j.State == api.JobRunning || j.State == api.JobEnding:
			l.Site = j.Site
			l.Detail = fmt.Sprintf("process %d of running job %s (%s=%s) is outside the job's cgroup, in %s: it moved itself out or was started by a server outside the job, and will outlive it", e.pid, e.job, api.JobIDEnv, e.job, e.cg)
		default:
			l.Site = j.Site
			l.Detail = fmt.Sprintf("process %d of job %s outlives the job (%s, %s), in cgroup %s", e.pid, e.job, j.State, j.Reason, e.cg)
		}
		out = append(out, l)
	}
	if !complete {
		m.opts.Logger.Warn("leak check: the environ scan for escaped processes did not finish within its budget", "budget", escapeReadBudget)
	}
	return out
}
