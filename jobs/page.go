package jobs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/api"
)

// Pages of GET /v1/jobs (issue 21: the whole list, open to readers, was 1.3 MB with 4,096
// jobs, each counting its cgroup's processes).
const (
	DefaultPageSize = 256
	MaxPageSize     = 1000
)

// Page lists at most limit jobs in the order of List (start time, then id) after the
// cursor after ("" = from the first), counting processes for those only; next is the
// cursor of the following page, "" on the last. A cursor names a position, not a job,
// so a job that ends or is pruned in between does not break it.
func (m *Manager) Page(after string, limit int) (page []api.Job, next string, err error) {
	var at int64
	var atID string
	if after != "" {
		ns, id, ok := strings.Cut(after, ".")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if !ok || perr != nil {
			return nil, "", fmt.Errorf("%q is not a cursor of GET /v1/jobs: pass the \"next\" of the previous page", after)
		}
		at, atID = n, id
	}
	m.mu.Lock()
	all := make([]api.Job, 0, len(m.jobs))
	for _, j := range m.jobs {
		if !j.placing {
			all = append(all, m.viewLocked(j))
		}
	}
	m.mu.Unlock()
	less := func(a, b api.Job) bool {
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.Before(b.StartedAt)
		}
		return a.ID < b.ID
	}
	sort.Slice(all, func(a, b int) bool { return less(all[a], all[b]) })
	start := 0
	if after != "" {
		start = sort.Search(len(all), func(i int) bool {
			n := all[i].StartedAt.UnixNano()
			return n > at || n == at && all[i].ID > atID
		})
	}
	end := min(start+limit, len(all))
	page = all[start:end]
	for i := range page {
		if page[i].State != api.JobEnded && page[i].State != api.JobKilled {
			page[i].Processes = countProcs(page[i].Cgroup)
		}
	}
	if end < len(all) && len(page) > 0 {
		last := page[len(page)-1]
		next = strconv.FormatInt(last.StartedAt.UnixNano(), 10) + "." + last.ID
	}
	return page, next, nil
}
