package retention

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// Snapshot is every site as /v1/status shows it, in config order.
func (m *Manager) Snapshot() []api.Site {
	var out []api.Site
	for _, s := range m.siteList() {
		out = append(out, s.snapshot())
	}
	return out
}

// Site is one site as /v1/status shows it ("" = the only site).
func (m *Manager) Site(name string) (api.Site, error) {
	s, err := m.site(name)
	if err != nil {
		return api.Site{}, err
	}
	return s.snapshot(), nil
}

func (s *site) snapshot() api.Site {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.m.opts.Now()
	out := api.Site{
		Name: s.name, Path: s.path,
		Files: s.idx.files, Bytes: max(s.idx.alloc, 0), Jobs: int64(len(s.idx.jobs)), RunningJobs: s.running,
		MaxAgeSeconds: s.cfg.MaxAge.Seconds(), PendingPrune: s.pendingLocked(now.UnixNano()),
		PrunedTotal: s.prunedTotal,
	}
	oldest := s.heldOldest
	if len(s.idx.heap) > 0 && (oldest == 0 || s.idx.heap[0].newest < oldest) {
		oldest = s.idx.heap[0].newest
	}
	if oldest != 0 {
		out.OldestAgeSeconds = max(0, now.Sub(time.Unix(0, oldest)).Seconds())
	}
	if !s.lastPrune.IsZero() {
		t := s.lastPrune
		out.LastPruneAt = &t
	}
	if s.problem != "" {
		p := s.problem
		out.Problem = &p
	}
	return out
}

// Conditions lists a SiteProblem condition for every site that is not being cleaned.
func (m *Manager) Conditions() []api.Condition {
	var out []api.Condition
	for _, s := range m.siteList() {
		s.mu.Lock()
		if s.problem != "" && s.problem != notScanned {
			out = append(out, api.Condition{
				Type: api.CondSiteProblem, Subject: s.name, Status: true,
				Reason: "SiteRootUnsafe", Message: s.problem, Since: s.problemSince, Severity: api.HealthWarning,
			})
		}
		s.mu.Unlock()
	}
	return out
}

// PrunedTotals is, per site and reason (age, count, bytes), the entries pruned since start
// (in observe mode: the entries that would have been), for
// sandboxd_site_pruned_files_total. Every reason is present, at zero if need be.
func (m *Manager) PrunedTotals() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, s := range m.siteList() {
		s.mu.Lock()
		r := map[string]int64{ReasonAge: 0, ReasonCount: 0, ReasonBytes: 0}
		for k, v := range s.pruned {
			r[k] = v
		}
		out[s.name] = r
		s.mu.Unlock()
	}
	return out
}

// PidJob is a site job whose pid file names a live process that is the job's own.
type PidJob struct {
	Site string
	Job  string
	PID  int
	// FileUID and FileMtime are the pid file's owner and mtime at the call: the leak
	// clean-up ends only a process of the file's owner, aged by the file (issue 21).
	FileUID   uint32
	FileMtime time.Time
}

// PidJobs lists the site jobs that are running by their pid file and that the job
// registry does not hold (for the leak check of CONTRACT §11).
func (m *Manager) PidJobs() []PidJob {
	var out []PidJob
	for _, s := range m.siteList() {
		s.mu.Lock()
		if s.idx != nil {
			for _, j := range s.idx.jobs {
				if j.pid > 0 && j.live == liveRunning && (m.opts.Jobs == nil || !m.opts.Jobs.Holds(s.name, j.id)) && s.root != nil {
					// The file as it is now (statx beneath the root fd, no link followed):
					// one that is gone or no longer names the pid is no leak of it.
					var st unix.Stat_t
					if unix.Fstatat(s.root.Fd(), j.id+".pid", &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
						readPid(s.root.Fd(), j.id+".pid") != j.pid {
						continue
					}
					out = append(out, PidJob{Site: s.name, Job: j.id, PID: int(j.pid), FileUID: st.Uid, FileMtime: time.Unix(st.Mtim.Unix())})
				}
			}
		}
		s.mu.Unlock()
	}
	return out
}
