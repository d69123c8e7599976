package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Leaks is the loud leak check of CONTRACT §11: (1) jobs in state leaked, (2) live
// processes that a site's <id>.pid names, that no registered job holds and that have run
// longer than unleased_max, (3) non-empty cgroups under <root>/jobs the registry does not
// know. With clean it ends each one first, and still reports it: a check that cleans up
// silently is a cleanup step, not a check. An error means the check could not run.
func (m *Manager) Leaks(ctx context.Context, clean bool) (api.LeaksReport, error) {
	rep := api.LeaksReport{CheckedAt: m.opts.Now(), Cleaned: clean, Leaks: []api.Leak{}}
	if m.unavailable != "" {
		return rep, api.NewProblem(api.CodeJobsUnavailable, "the leak check cannot run: %s", m.unavailable)
	}
	if err := m.Waiting(); err != nil {
		return rep, err // every job of the registry another sandboxd holds would look leaked
	}
	jobsDir := filepath.Join(m.root, "jobs")
	ents, err := os.ReadDir(jobsDir)
	if err != nil && !os.IsNotExist(err) {
		return rep, api.NewProblem(api.CodeJobsUnavailable, "the leak check cannot run: read the cgroup root: %v", err)
	}
	boot := boottime()

	// (1) registered jobs that could not be emptied.
	m.mu.Lock()
	known := map[string]bool{}
	for key, j := range m.jobs {
		if j.live() || j.State == api.JobLeaked {
			// By key (a cgroup's name) and by id (a site's pid file names a job by its id,
			// whoever owns it).
			known[key], known[pubID(key)], known[filepath.Base(j.Cgroup)] = true, true, true
		}
		if j.State == api.JobLeaked {
			rep.Leaks = append(rep.Leaks, api.Leak{Kind: api.LeakRegistered, Job: pubID(key), Site: j.Site, PID: j.PID,
				Cgroup: j.Cgroup, AgeSeconds: float64(boot-j.StartBoot) / 1e9,
				Detail: fmt.Sprintf("job %s still has processes after SIGKILL (reason %s)", key, j.Reason)})
		}
	}
	m.mu.Unlock()

	// (3) cgroups nobody registered that hold processes.
	for _, e := range ents {
		if !e.IsDir() || known[e.Name()] {
			continue
		}
		dir := filepath.Join(jobsDir, e.Name())
		if n := countProcs(dir); n > 0 {
			// Its age is its oldest process's (the cgroup has no birth time): it said 0 for
			// a cgroup 67 s old (issue 23 item 8).
			age := m.oldestProcAge(dir, boot)
			rep.Leaks = append(rep.Leaks, api.Leak{Kind: api.LeakUnknownCgroup, Cgroup: dir, Processes: n, AgeSeconds: age.Seconds(),
				Detail: fmt.Sprintf("cgroup %s has %d processes and no registered job; its oldest process started %s ago", dir, n, api.FormatDuration(age.Round(time.Second)))})
		}
	}

	// (2) processes that pid files name and no job holds.
	doubts := map[int]string{} // index in rep.Leaks: why clean leaves it running
	fileUIDs := map[int]uint32{}
	if m.opts.PidFiles != nil {
		for _, pf := range m.opts.PidFiles() {
			if l, doubt, ok := m.unleased(pf, boot, known); ok {
				if doubt != "" {
					doubts[len(rep.Leaks)] = doubt
				}
				fileUIDs[len(rep.Leaks)] = pf.FileUID
				rep.Leaks = append(rep.Leaks, l)
			}
		}
	}
	for i := range rep.Leaks {
		l := &rep.Leaks[i]
		if l.Kind == api.LeakRegistered || l.Kind == api.LeakUnknownCgroup {
			if l.Processes == 0 {
				l.Processes = countProcs(l.Cgroup)
			}
		}
	}
	// (4) processes that escaped their job's cgroup but carry its SANDBOXD_JOB_ID.
	for _, l := range m.escapes(ctx, boot) {
		doubts[len(rep.Leaks)] = "left running: an escaped process is found by its environment, which is its own word (anyone can set SANDBOXD_JOB_ID): end it by hand if it is a leak"
		rep.Leaks = append(rep.Leaks, l)
	}
	if clean {
		for i := range rep.Leaks {
			if doubt, ok := doubts[i]; ok {
				rep.Leaks[i].Error = doubt
				m.emit(api.Event{Kind: api.EventKill, Subject: rep.Leaks[i].Job, Message: "leak check --clean: " + doubt + ": " + rep.Leaks[i].Detail,
					Fields: map[string]any{"kind": rep.Leaks[i].Kind, "job": rep.Leaks[i].Job, "pid": rep.Leaks[i].PID, "result": "left_running"}})
				continue
			}
			m.clean(ctx, &rep.Leaks[i], fileUIDs[i])
		}
	}
	sort.SliceStable(rep.Leaks, func(a, b int) bool { return rep.Leaks[a].Kind < rep.Leaks[b].Kind })
	counts := map[string]int{api.LeakRegistered: 0, api.LeakUnleased: 0, api.LeakUnknownCgroup: 0, api.LeakEscaped: 0}
	for _, l := range rep.Leaks {
		counts[l.Kind]++
	}
	m.mu.Lock()
	m.lastLeaks = counts
	m.mu.Unlock()
	if len(rep.Leaks) > 0 {
		m.opts.Logger.Warn("leak check found leaks", "leaks", len(rep.Leaks), "clean", clean)
	}
	return rep, nil
}

// unleased is the leak a pid file names, if any: a live process in no job whose pid file
// is older than unleased_max. The age is the file's, not the process's: anyone who can
// write a site can name any pid, and an old service would otherwise qualify at once
// (issue 21). When the clean-up must not end it (the process is not the file owner's, or
// it started before the file was written), the leak says so in doubt, and clean reports
// it without ending it.
func (m *Manager) unleased(pf PidFile, boot int64, known map[string]bool) (l api.Leak, doubt string, ok bool) {
	if pf.PID <= 1 || known[pf.Job] || pf.FileMtime.IsZero() {
		return api.Leak{}, "", false
	}
	ticks, uid, alive := procInfo(m.opts.ProcRoot, pf.PID)
	if !alive {
		return api.Leak{}, "", false
	}
	if cg, err := pidCgroup(m.opts.ProcRoot, strconv.Itoa(pf.PID)); err == nil {
		if _, ok := strings.CutPrefix(cg, m.cg.rel(filepath.Join(m.root, "jobs"))+"/"); ok {
			return api.Leak{}, "", false // held by a job's cgroup (a job under another id)
		}
	}
	now := m.opts.Now()
	age := now.Sub(pf.FileMtime)
	m.mu.Lock()
	limit := m.opts.UnleasedMax
	m.mu.Unlock()
	if age <= limit {
		return api.Leak{}, "", false
	}
	ran := time.Duration(boot - int64(ticks)*int64(time.Second)/clockTicks)
	started := now.Add(-ran)
	switch {
	case uid != pf.FileUID:
		doubt = fmt.Sprintf("left running: process %d runs as uid %d but %s.pid belongs to uid %d, and the clean-up ends only a process of the pid file's owner; end it by hand if it is a leak",
			pf.PID, uid, pf.Job, pf.FileUID)
	case started.Before(pf.FileMtime.Add(-m.opts.PidFileSlack)):
		doubt = fmt.Sprintf("left running: process %d started at %s, %s before %s.pid was written (%s): the file may name a process it was not written for; end it by hand if it is a leak",
			pf.PID, started.UTC().Format(time.RFC3339), api.FormatDuration(pf.FileMtime.Sub(started)), pf.Job, pf.FileMtime.UTC().Format(time.RFC3339))
	}
	return api.Leak{Kind: api.LeakUnleased, Job: pf.Job, Site: pf.Site, PID: pf.PID, Processes: 1,
		AgeSeconds: age.Seconds(),
		Detail: fmt.Sprintf("process %d (uid %d) named by %s's %s.pid (uid %d, written %s ago) has no lease (unleased_max %s)",
			pf.PID, uid, pf.Site, pf.Job, pf.FileUID, api.FormatDuration(age), api.FormatDuration(limit))}, doubt, true
}

// clean ends what l found. An unleased process is first adopted into a cgroup of its own
// with its descendants, so that ending it is the same race-free kill as for a job.
func (m *Manager) clean(ctx context.Context, l *api.Leak, fileUID uint32) {
	var err error
	switch l.Kind {
	case api.LeakRegistered:
		err = m.killCgroup(ctx, l.Cgroup)
		if err == nil {
			m.mu.Lock()
			j := m.jobOfCgroupLocked(l.Cgroup)
			m.mu.Unlock()
			if j != nil {
				m.checkEmpty(j)
			}
		}
	case api.LeakUnknownCgroup:
		if err = m.killCgroup(ctx, l.Cgroup); err == nil {
			err = removeTree(l.Cgroup)
		}
	case api.LeakUnleased:
		err = m.adoptAndEnd(ctx, l, fileUID)
	}
	l.Cleaned = err == nil
	if err != nil {
		l.Error = err.Error()
	}
	subject := l.Job
	if subject == "" {
		subject = l.Cgroup
	}
	m.emit(api.Event{Kind: api.EventKill, Subject: subject, Message: "leak check --clean: " + map[bool]string{true: "ended", false: "could not end"}[l.Cleaned] + ": " + l.Detail,
		Fields: map[string]any{"kind": l.Kind, "job": l.Job, "pid": l.PID, "cgroup": l.Cgroup, "error": l.Error}})
}

func (m *Manager) killCgroup(ctx context.Context, dir string) error {
	if err := m.cg.killAll(ctx, dir, !m.opts.NoCgroupKill); err != nil {
		return err
	}
	kctx, cancel := context.WithTimeout(ctx, m.opts.KillWait)
	defer cancel()
	if err := waitEvents(kctx, dir, func(p, _ bool) bool { return !p }); err != nil {
		return fmt.Errorf("cgroup %s still has %d processes after SIGKILL", dir, countProcs(dir))
	}
	return nil
}

// adoptAndEnd registers an unleased process as a job, moves its descendants of the same
// uid in with it (a descendant of another uid, a setuid program's, is not the file
// owner's to end), and ends it: SIGTERM, grace, SIGKILL, wait for empty.
func (m *Manager) adoptAndEnd(ctx context.Context, l *api.Leak, uid uint32) error {
	id := "leak-" + l.Job
	if validID(id) != nil {
		id = fmt.Sprintf("leak-%d", l.PID)
	}
	// A lease long enough that the dead-man switch does not start ending the process
	// before its descendants are in the cgroup too; End follows at once.
	hold := api.Duration(time.Hour)
	j, err := m.Register(api.JobRequest{ID: id, PID: l.PID, TTL: &hold, Site: l.Site,
		Labels: map[string]string{"adopted_by": "leak-check"}}, Caller{UID: 0})
	if err != nil {
		return err
	}
	for _, c := range m.descendants(l.PID) {
		if _, cu, ok := procInfo(m.opts.ProcRoot, c); !ok || cu != uid {
			continue
		}
		writeFile(filepath.Join(j.Cgroup, "cgroup.procs"), strconv.Itoa(c))
	}
	v, err := m.End(ctx, j.ID, api.ReasonLeaseExpired, true)
	if err != nil {
		return err
	}
	if v.State == api.JobLeaked {
		return fmt.Errorf("process %d's cgroup still has processes after SIGKILL", l.PID)
	}
	return nil
}

// descendants lists the live descendants of pid by their parent pids (read once).
func (m *Manager) descendants(pid int) []int {
	ents, err := os.ReadDir(m.opts.ProcRoot)
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.opts.ProcRoot, e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// oldestProcAge is how long the oldest process of cgroup dir has run, from /proc/PID/stat's
// start time against CLOCK_BOOTTIME (boot, ns): never the wall clock (0 when unknown).
func (m *Manager) oldestProcAge(dir string, boot int64) time.Duration {
	pids, err := procsOf(dir)
	if err != nil || boot == 0 {
		return 0
	}
	var oldest uint64
	for _, pid := range pids {
		if t, _, ok := procInfo(m.opts.ProcRoot, pid); ok && (oldest == 0 || t < oldest) {
			oldest = t
		}
	}
	if oldest == 0 {
		return 0
	}
	return max(time.Duration(boot-int64(oldest)*(1e9/clockTicks)), 0)
}
