package jobs

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Ended jobs stay listed for [jobs] keep_ended, at most [jobs] keep_ended_max of them
// (issue 20 item 3). A job dropped from the list is remembered by id a while longer
// (maxForgotten ids, oldest first out), so that asking for it answers "ended and
// forgotten" with when and why, not a bare "no job" that reads like a typo.

// maxForgotten bounds the ids remembered after their jobs were dropped.
const maxForgotten = 4096

type forgotten struct {
	endedAt time.Time
	state   string
	reason  string
	why     string // the limit that dropped it
	cgroup  string
}

// forgetLocked drops j from the registry, remembering why.
func (m *Manager) forgetLocked(j *job, why string) {
	m.unlistLocked(j)
	m.logLocked(record{Op: "forget", ID: j.ID})
	if m.forgot == nil {
		m.forgot = map[string]forgotten{}
	}
	if _, ok := m.forgot[j.ID]; !ok {
		m.forgotOrder = append(m.forgotOrder, j.ID)
	}
	m.forgot[j.ID] = forgotten{endedAt: j.EndedAt, state: j.State, reason: j.Reason, why: why, cgroup: j.Cgroup}
	for len(m.forgotOrder) > maxForgotten {
		delete(m.forgot, m.forgotOrder[0])
		m.forgotOrder = m.forgotOrder[1:]
	}
}

// notFoundLocked is the 404 for the job key: "ended and forgotten" when it was dropped
// from the list, else "no job".
func (m *Manager) notFoundLocked(key string) error {
	id, whose := pubID(key), ""
	if uid, ok := keyUID(key); ok {
		whose = fmt.Sprintf(" of uid %d", uid)
	}
	if f, ok := m.forgot[key]; ok {
		return api.NewProblem(api.CodeNotFound, "job %q%s ended and forgotten: it was %s (%s) at %s and dropped from the list by %s",
			id, whose, f.state, f.reason, f.endedAt.Format(time.RFC3339), f.why)
	}
	return api.NewProblem(api.CodeNotFound, "no job %q%s", id, whose)
}

// NotFound is the 404 for id as root names it (GET /v1/jobs/{id} of a job not listed).
func (m *Manager) NotFound(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.notFoundLocked(id)
}
