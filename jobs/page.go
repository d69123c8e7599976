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

// Page lists at most limit jobs in the order of List (start time, then key) after the
// cursor after ("" = from the first), counting processes for those only; next is the
// cursor of the following page, "" on the last. A cursor names a position, not a job,
// so a job that ends or is pruned in between does not break it. owner, when set, lists
// only that uid's jobs (?owner=UID).
func (m *Manager) Page(after string, limit int, owner *uint32) (page []api.Job, next string, err error) {
	if err := m.Waiting(); err != nil {
		return nil, "", err // an empty list would say the jobs of the registry another sandboxd holds are gone
	}
	var at int64
	var atKey string
	if after != "" {
		ns, key, ok := strings.Cut(after, ".")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if !ok || perr != nil {
			return nil, "", fmt.Errorf("%q is not a cursor of GET /v1/jobs: pass the \"next\" of the previous page", after)
		}
		at, atKey = n, key
	}
	m.mu.Lock()
	all := m.sortedLocked(owner)
	start := 0
	if after != "" {
		start = sort.Search(len(all), func(i int) bool {
			n := all[i].StartedAt.UnixNano()
			return n > at || n == at && all[i].ID > atKey
		})
	}
	end := min(start+limit, len(all))
	page = make([]api.Job, 0, end-start)
	for _, j := range all[start:end] {
		page = append(page, m.viewLocked(j))
	}
	if end < len(all) && end > start {
		last := all[end-1]
		next = strconv.FormatInt(last.StartedAt.UnixNano(), 10) + "." + last.ID
	}
	m.mu.Unlock()
	return m.countAll(page), next, nil
}
