package jobs

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Summary is the jobs part of GET /v1/status.
func (m *Manager) Summary() api.JobsSummary {
	s := api.JobsSummary{Available: m.unavailable == "", Reason: m.unavailable, Root: m.root}
	boot, now := boottime(), m.opts.Now()
	var oldest, next *job
	m.mu.Lock()
	defer m.mu.Unlock()
	s.Registry = m.registryLocked()
	for _, j := range m.jobs {
		switch j.State {
		case api.JobRunning:
			s.Running++
			if oldest == nil || j.StartBoot < oldest.StartBoot {
				oldest = j
			}
			if next == nil || min(j.LeaseBoot, j.DeadlineBoot) < min(next.LeaseBoot, next.DeadlineBoot) {
				next = j
			}
		case api.JobEnding:
			s.Ending++
		case api.JobLeaked:
			s.Leaked++
		default:
			s.Ended++
		}
	}
	if oldest != nil {
		t := oldest.StartedAt
		s.Oldest, s.OldestStartedAt = oldest.ID, &t
	}
	if next != nil {
		t := now.Add(time.Duration(min(next.LeaseBoot, next.DeadlineBoot) - boot)).Round(time.Millisecond)
		s.NextLapse, s.NextLapseAt = next.ID, &t
	}
	return s
}

// Conditions are the JobOverdue conditions: a job that is leaked, or past its deadline
// with processes left.
func (m *Manager) Conditions() []api.Condition {
	boot, now := boottime(), m.opts.Now()
	var out []api.Condition
	m.mu.Lock()
	defer m.mu.Unlock()
	out = append(out, m.heldConditionLocked()...)
	for _, j := range m.jobs {
		switch {
		case j.State == api.JobLeaked:
			out = append(out, api.Condition{Type: api.CondJobOverdue, Subject: j.ID, Status: true, Reason: "Leaked",
				Message: fmt.Sprintf("job %s still has processes after SIGKILL (cgroup %s, reason %s)", j.ID, j.Cgroup, j.Reason),
				Since:   j.EndedAt, Severity: "warning"})
		case j.live() && boot > j.DeadlineBoot:
			since := now.Add(time.Duration(j.DeadlineBoot - boot))
			out = append(out, api.Condition{Type: api.CondJobOverdue, Subject: j.ID, Status: true, Reason: "PastDeadline",
				Message: fmt.Sprintf("job %s is past its deadline (max_lifetime) and still %s", j.ID, j.State),
				Since:   since.Round(time.Second), Severity: "warning"})
		}
	}
	return out
}

// Counts are the jobs per state (sandboxd_jobs{state}), every state present.
func (m *Manager) Counts() map[string]int {
	out := map[string]int{api.JobRunning: 0, api.JobEnding: 0, api.JobEnded: 0, api.JobKilled: 0, api.JobLeaked: 0}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.jobs {
		out[j.State]++
	}
	return out
}

// EndedTotals are the jobs ended since start, per reason (sandboxd_jobs_ended_total).
func (m *Manager) EndedTotals() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.endedTotal))
	for k, v := range m.endedTotal {
		out[k] = v
	}
	return out
}

// LastLeaks are the leaks the last check found, per kind (sandboxd_jobs_leaked).
func (m *Manager) LastLeaks() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.lastLeaks))
	for k, v := range m.lastLeaks {
		out[k] = v
	}
	return out
}

// LastActivity is the time of the last registration or heartbeat (zero: none yet).
func (m *Manager) LastActivity() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastActivity
}
