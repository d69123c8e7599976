package retention

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func pruneNow(t *testing.T, m *Manager, site string) PruneResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := m.Prune(ctx, site, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Over max_files, the oldest non-running jobs past min_age go first, whole jobs at a time;
// a running job (the oldest of all) and jobs younger than min_age stay.
func TestOverMaxFilesOldestFirst(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	now, dead := time.Now(), deadPid(t)
	for i := 1; i <= 10; i++ {
		makeJob(t, dir, fmt.Sprintf("d%02d", i), dead, now.Add(-time.Duration(i)*time.Hour))
	}
	running := makeJob(t, dir, "run", dead, now)
	startJob(t, dir, "run")
	ageAll(t, dir, running, now.Add(-20*time.Hour))
	makeJob(t, dir, "y1", dead, now.Add(-time.Minute))
	makeJob(t, dir, "y2", dead, now.Add(-time.Minute))
	cfg := siteCfg("s", dir)
	cfg.MaxAge, cfg.MaxFiles = 0, 35
	h := run(t, Options{Sites: []SiteConfig{cfg}})
	pruneNow(t, h.m, "s") // the drain may have been first: judge the outcome
	waitFor(t, "the count prune", func() bool { return h.m.PrunedTotals()["s"][ReasonCount] >= 56 })
	time.Sleep(200 * time.Millisecond) // give an over-eager pruner the rope to hang itself
	if tot := h.m.PrunedTotals()["s"]; tot[ReasonCount] != 56 || tot[ReasonAge] != 0 {
		t.Fatalf("pruned %v; want 8 whole jobs (56 entries) for count", tot)
	}
	for i := 1; i <= 10; i++ {
		for _, suf := range jobSuffixes {
			name := fmt.Sprintf("d%02d%s", i, suf)
			if got, want := exists(dir, name), i <= 2; got != want {
				t.Errorf("%s exists=%v, want %v", name, got, want)
			}
		}
	}
	for _, id := range []string{"run", "y1", "y2"} {
		for _, suf := range jobSuffixes {
			if !exists(dir, id+suf) {
				t.Errorf("%s%s pruned", id, suf)
			}
		}
	}
}

// A wall-clock jump of days (a paused VM resumed) makes idle jobs old, but never turns a
// running job into a dead one.
func TestClockJumpKeepsRunningJobs(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	var mu sync.Mutex
	offset := time.Duration(0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	makeJob(t, dir, "run", deadPid(t), time.Now())
	startJob(t, dir, "run")
	idle := makeJob(t, dir, "idle", deadPid(t), time.Now())
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}, Now: now})
	waitFor(t, "the running job seen", func() bool { s, _ := h.m.Site("s"); return s.RunningJobs == 1 })
	mu.Lock()
	offset = 5 * 24 * time.Hour
	mu.Unlock()
	time.Sleep(200 * time.Millisecond) // a few liveness rounds under the new clock
	pruneNow(t, h.m, "s")
	waitFor(t, "the idle job pruned", func() bool { return !exists(dir, idle[0]) && !exists(dir, idle[1]) })
	for _, suf := range jobSuffixes {
		if !exists(dir, "run"+suf) {
			t.Fatalf("running job's %s pruned after a clock jump", "run"+suf)
		}
	}
	if s, _ := h.m.Site("s"); s.RunningJobs != 1 {
		t.Fatalf("running jobs %d after the jump, want 1", s.RunningJobs)
	}
}

// A root that is a symlink or world-writable without the sticky bit is a problem and a
// SiteProblem condition, and nothing in it is deleted.
func TestUnsafeRootNotCleaned(t *testing.T) {
	base := testenv.Tmpfs(t, 64<<20, 0)
	ww := filepath.Join(base, "ww")
	real := filepath.Join(base, "real")
	for _, d := range []string{ww, real} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ww, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-13 * time.Hour)
	a := makeJob(t, ww, "a", deadPid(t), old)
	b := makeJob(t, real, "b", deadPid(t), old)
	h := run(t, Options{Sites: []SiteConfig{siteCfg("ww", ww), siteCfg("link", link)}})
	for _, name := range []string{"ww", "link"} {
		r := pruneNow(t, h.m, name)
		if r.Problem == "" || r.Files != 0 {
			t.Errorf("site %s: %+v; want a problem and nothing pruned", name, r)
		}
		s, _ := h.m.Site(name)
		if s.Problem == nil {
			t.Errorf("site %s has no problem in its status", name)
		}
	}
	if c := h.m.Conditions(); len(c) != 2 {
		t.Errorf("conditions %+v, want 2 SiteProblem", c)
	}
	time.Sleep(200 * time.Millisecond)
	for _, n := range a {
		if !exists(ww, n) {
			t.Fatalf("%s deleted from a world-writable root", n)
		}
	}
	for _, n := range b {
		if !exists(real, n) {
			t.Fatalf("%s deleted through a symlinked root", n)
		}
	}
	if !strings.Contains(*mustSite(t, h.m, "link").Problem, "symlink") {
		t.Errorf("symlink problem not named: %q", *mustSite(t, h.m, "link").Problem)
	}
}

func mustSite(t *testing.T, m *Manager, name string) *struct{ Problem *string } {
	s, err := m.Site(name)
	if err != nil {
		t.Fatal(err)
	}
	return &struct{ Problem *string }{s.Problem}
}

// Observe mode deletes nothing and reports what it would have pruned.
func TestObserveDeletesNothing(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	old := time.Now().Add(-13 * time.Hour)
	var all []string
	for i := 0; i < 20; i++ {
		all = append(all, makeJob(t, dir, fmt.Sprintf("o%02d", i), deadPid(t), old)...)
	}
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}, Observe: true})
	if r := pruneNow(t, h.m, "s"); !r.Observed {
		t.Fatalf("observe prune: %+v; want Observed", r)
	}
	waitFor(t, "the observed drain", func() bool {
		return h.m.PrunedTotals()["s"][ReasonAge] == int64(len(all))
	})
	for _, n := range all {
		if !exists(dir, n) {
			t.Fatalf("observe mode deleted %s", n)
		}
	}
	evs := h.events.kinds("prune")
	if len(evs) == 0 || !strings.Contains(evs[0].Message, "would prune") {
		t.Fatalf("prune events %+v; want would-prune", evs)
	}
}

// Names with newlines and invalid UTF-8 are indexed, grouped and pruned like any other.
func TestOddNames(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	old := time.Now().Add(-13 * time.Hour)
	oddOld := []string{"j\nb.out", "j\nb.status", "\xff\xfe.pid", "\xff\xfe", "plain\n"}
	oddNew := []string{"n\new.out", "\xfa.err"}
	for _, n := range append(append([]string{}, oddOld...), oddNew...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("output\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ageAll(t, dir, oddOld, old)
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}})
	pruneNow(t, h.m, "s")
	waitFor(t, "the odd names pruned", func() bool { return h.m.PrunedTotals()["s"][ReasonAge] == int64(len(oddOld)) })
	for _, n := range oddOld {
		if exists(dir, n) {
			t.Errorf("%q survived", n)
		}
	}
	for _, n := range oddNew {
		if !exists(dir, n) {
			t.Errorf("%q pruned", n)
		}
	}
}

// An inotify queue overflow means lost events: the handler rescans. The kernel's
// max_queued_events is host-global, so the overflow is fed through the reader path.
func TestOverflowRescans(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)}})
	if err != nil {
		t.Fatal(err)
	}
	s := m.sites["s"]
	s.attach() // no watcher: what happens on disk now is missed, as in an overflow
	s.rescan(nil)
	makeJob(t, dir, "late", deadPid(t), time.Now())
	if s.snapshot().Files != 0 {
		t.Fatal("index saw files without a watcher")
	}
	w := &fsnotify.Watcher{Events: make(chan fsnotify.Event), Errors: make(chan error)}
	p := newPending()
	done := make(chan struct{})
	go func() { readEvents(w, dir+"/", p); close(done) }()
	w.Errors <- fsnotify.ErrEventOverflow
	close(w.Events)
	close(w.Errors)
	<-done
	if s.handle(p) {
		t.Fatal("overflow asked for a reconcile, want a rescan")
	}
	if got := s.snapshot().Files; got != int64(len(jobSuffixes)) {
		t.Fatalf("after the overflow rescan the index has %d files, want %d", got, len(jobSuffixes))
	}
	s.mu.Lock()
	s.detachLocked("")
	s.mu.Unlock()
}
