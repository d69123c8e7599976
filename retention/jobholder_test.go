package retention

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// holderSet is the job registry as retention sees it: which site jobs still have
// processes. The real one is jobs.Manager, wired in daemon/ (and tested there).
type holderSet struct {
	mu   sync.Mutex
	held map[string]bool
}

func (h *holderSet) Holds(site, id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[site+"/"+id]
}

// A registered job's files count as running while the registry holds it, past max_age
// and without pid file or lock; once the job ends they age normally and are pruned.
func TestRegisteredJobFilesKept(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	old := time.Now().Add(-24 * time.Hour)
	names := makeJob(t, dir, "held", deadPid(t), old)
	ageAll(t, dir, names, old)
	h := &holderSet{held: map[string]bool{"s/held": true}}
	hr := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}, Jobs: h})
	if _, err := hr.m.Prune(context.Background(), "s", 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !exists(dir, n) {
			t.Fatalf("%s of a job the registry holds was pruned", n)
		}
	}
	if pj := hr.m.PidJobs(); len(pj) != 0 {
		t.Errorf("PidJobs lists %+v: the registry holds that job", pj)
	}
	h.mu.Lock()
	h.held = nil
	h.mu.Unlock()
	waitFor(t, "the ended job's files to be pruned", func() bool {
		hr.m.Prune(context.Background(), "s", 0)
		return !exists(dir, "held.pid")
	})
}
