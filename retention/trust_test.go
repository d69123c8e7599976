package retention

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// makeFileJob writes a job of six plain files (no directory) aged at, and returns the names.
func makeFileJob(t testing.TB, dir, id string, at time.Time) []string {
	t.Helper()
	var names []string
	for _, suf := range jobSuffixes[:6] {
		data := []byte("output\n")
		if suf == ".pid" {
			data = []byte(fmt.Sprintf("%d\n", deadPid(t)))
		}
		if err := os.WriteFile(filepath.Join(dir, id+suf), data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, id+suf)
	}
	ageAll(t, dir, names, at)
	return names
}

// watchUnapplied gives a static site the batched inotify reader, whose events nobody
// applies: what happens to the files stays pending, as it does between two passes of the
// site loop.
func watchUnapplied(t *testing.T, s *site) *pending {
	t.Helper()
	p := newPending()
	w, err := newRawWatch(s.path, s.root.Fd(), p)
	if err != nil {
		t.Fatal(err)
	}
	if w.childEventsOn() {
		t.Log("child events on before waitChildEvents (the kernel was quick)")
	}
	w.waitChildEvents() // what a scan does before it states anything
	if !w.childEventsOn() {
		t.Fatal("the watch has no events for writes of children")
	}
	s.mu.Lock()
	s.raw = w
	s.mu.Unlock()
	t.Cleanup(func() { s.mu.Lock(); s.raw = nil; s.mu.Unlock(); w.Close() })
	return p
}

// A drain skips the age recheck (no statx) only for jobs no pending event speaks of. A
// file written, touched, renamed over or created again after indexing leaves an event the
// drain reads before deciding, so that job is stated, found young and kept whole, while an
// untouched expired job goes.
func TestDrainTrustsTheIndexOnlyWithoutPendingChanges(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	old := time.Now().Add(-20 * time.Hour)
	stale := makeFileJob(t, dir, "stale", old)
	kept := map[string][]string{}
	for _, id := range []string{"written", "touched", "renamed", "recreated"} {
		kept[id] = makeFileJob(t, dir, id, old)
	}
	_, s := staticSite(t, dir, Options{})
	watchUnapplied(t, s)

	// What a still-running job's writer or a launcher could do between index and drain.
	if err := os.WriteFile(filepath.Join(dir, "written.out"), []byte("more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := os.Chtimes(filepath.Join(dir, "touched.status"), now, now); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp-new"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "tmp-new"), filepath.Join(dir, "renamed.err")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "recreated.callback.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "recreated.callback.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}

	r := drainAll(t, s)
	if r.Files != int64(len(stale)) || !slices.Equal(r.Jobs, []string{"stale"}) {
		t.Fatalf("pruned %d files of jobs %v, want the %d of job stale only", r.Files, r.Jobs, len(stale))
	}
	for _, n := range stale {
		if exists(dir, n) {
			t.Errorf("%s of the untouched expired job survived", n)
		}
	}
	for id, names := range kept {
		for _, n := range names {
			if !exists(dir, n) {
				t.Errorf("job %s was changed after indexing, yet its %s was pruned", id, n)
			}
		}
	}
}

// markTrusted itself: with the change still pending, the changed job is not trusted and the
// untouched one is; without the batched reader nothing is.
func TestMarkTrusted(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	old := time.Now().Add(-20 * time.Hour)
	makeFileJob(t, dir, "a", old)
	makeFileJob(t, dir, "b", old)
	_, s := staticSite(t, dir, Options{})
	claim := func() []pick {
		var res PruneResult
		picks, _, _ := s.choose(1000, true, &res)
		return picks
	}
	release := func(picks []pick) {
		s.mu.Lock()
		for _, p := range picks {
			p.j.busy = false
			s.idx.place(p.j)
		}
		s.mu.Unlock()
	}
	picks := claim()
	markTrusted(s.raw, picks)
	for _, p := range picks {
		if p.trusted {
			t.Fatalf("job %s trusted without an inotify reader", p.j.id)
		}
	}
	release(picks)

	watchUnapplied(t, s)
	if err := os.WriteFile(filepath.Join(dir, "b.out"), []byte("more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	picks = claim()
	defer release(picks)
	markTrusted(s.raw, picks)
	got := map[string]bool{}
	for _, p := range picks {
		got[p.j.id] = p.trusted
	}
	if !got["a"] || got["b"] || len(got) != 2 {
		t.Fatalf("trusted = %v, want a trusted and b (written since) not", got)
	}
}

// The site's events come through two inotify queues (changes, and names going). A name
// unlinked and created again must end up indexed: the unlink, read from the other queue,
// must never be applied after the new file's create.
func TestUnlinkThenCreateStaysIndexed(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	const n = 400
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("g%03d.out", i)), []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)}, LivenessInterval: time.Hour, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s := m.sites["s"]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-s.started
	for round := range 3 {
		for i := range n {
			p := filepath.Join(dir, fmt.Sprintf("g%03d.out", i))
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(fmt.Sprint(round)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The index catches up within a few reader pauses; give it ample time, then compare.
	var missing []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		missing = missing[:0]
		s.mu.Lock()
		for i := range n {
			name := fmt.Sprintf("g%03d.out", i)
			if j := s.idx.jobs[jobID(name)]; j == nil || j.find(name) < 0 {
				missing = append(missing, name)
			}
		}
		s.mu.Unlock()
		if len(missing) == 0 {
			return
		}
	}
	t.Fatalf("%d of %d files that exist are missing from the index, e.g. %v", len(missing), n, missing[:min(5, len(missing))])
}

// While the first scan is still handing chunks to the index, the drain may take what is
// expired by age, but nothing for count: which jobs are the oldest is not known yet.
func TestPartialIndexPrunesByAgeOnly(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	expired := makeFileJob(t, dir, "expired", time.Now().Add(-20*time.Hour))
	var oldish []string
	for i := range 4 {
		oldish = append(oldish, makeFileJob(t, dir, fmt.Sprintf("old%d", i), time.Now().Add(-time.Duration(2+i)*time.Hour))...)
	}
	cfg := siteCfg("s", dir)
	cfg.MaxFiles = 6
	_, s := staticSiteCfg(t, cfg, Options{})
	s.mu.Lock()
	s.ready, s.filling, s.problem = false, true, notScanned // as during the first scan
	s.mu.Unlock()

	r := drainAll(t, s)
	if r.ByReason[ReasonAge] != int64(len(expired)) || r.ByReason[ReasonCount] != 0 {
		t.Fatalf("partial index pruned %v, want the %d expired files by age only", r.ByReason, len(expired))
	}
	for _, n := range oldish {
		if !exists(dir, n) {
			t.Fatalf("%s pruned for count from a partial index", n)
		}
	}

	s.mu.Lock()
	s.ready, s.filling, s.problem = true, false, ""
	s.mu.Unlock()
	r = drainAll(t, s)
	if r.ByReason[ReasonCount] != 18 {
		t.Fatalf("complete index pruned %v for count, want the 3 oldest jobs (18 files) to go", r.ByReason)
	}
}

// Events lost to an overflow leave the index unsure until the rescan the overflow asked for
// is done: taking the overflow is not enough.
func TestOverflowKeepsTrustOffUntilItsRescanIsDone(t *testing.T) {
	p := newPending()
	p.add("a.out", fsnotify.Write)
	if p.changes.Load() != 1 || p.quiet([]string{"b.out"}) != true || p.quiet([]string{"a.out"}) {
		t.Fatalf("one write pending: changes=%d", p.changes.Load())
	}
	p.setOverflow()
	if !p.lost.Load() || p.changes.Load() != 0 {
		t.Fatalf("after overflow: lost=%v changes=%d", p.lost.Load(), p.changes.Load())
	}
	_, overflow, _ := p.take()
	if !overflow || !p.lost.Load() || p.quiet([]string{"b.out"}) {
		t.Fatal("overflow taken but its rescan not done: the index must not be trusted")
	}
	p.done()
	if p.lost.Load() || !p.quiet([]string{"b.out"}) {
		t.Fatal("rescan done: trust should be back")
	}
	p.add("c.out", fsnotify.Remove)
	if p.changes.Load() != 0 || !p.quiet([]string{"c.out"}) {
		t.Fatalf("a name only gone is not a change: changes=%d", p.changes.Load())
	}
	p.add("c.out", fsnotify.Create)
	if p.changes.Load() != 1 || p.quiet([]string{"c.out"}) {
		t.Fatalf("gone then created again is a change: changes=%d", p.changes.Load())
	}
}

// The unlink-only path (a trusted pick, no statx) against what leaves no inotify event in
// the site: a file bind-mounted over an indexed entry (the kernel refuses to unlink a mount
// point: the job is kept and the mount's source untouched) and an indexed symlink pointing
// out of the site (removed as a link; its target stays). Both picks are first shown to be
// trusted, so the path under test is the one taken.
func TestTrustedUnlinkAdversarial(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	outside := t.TempDir()
	old := time.Now().Add(-20 * time.Hour)
	makeFileJob(t, dir, "bind", old)
	linkJob := makeFileJob(t, dir, "link", old)
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(outside, "src")
	if err := os.WriteFile(src, []byte("mounted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "link.out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link.out")); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, "link.out"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	_, s := staticSite(t, dir, Options{})
	watchUnapplied(t, s)
	mnt := filepath.Join(dir, "bind.out")
	if err := unix.Mount(src, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })

	requireTrustedPicks(t, s)

	r := drainAll(t, s)
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Fatalf("the symlink's target outside the site: %q, %v", b, err)
	}
	for _, n := range linkJob {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s of the expired job with a symlink survived", n)
		}
	}
	if b, err := os.ReadFile(src); err != nil || string(b) != "mounted\n" {
		t.Fatalf("the bind mount's source: %q, %v", b, err)
	}
	if b, err := os.ReadFile(mnt); err != nil || string(b) != "mounted\n" {
		t.Fatalf("the mount point in the site: %q, %v (it must not be unlinked)", b, err)
	}
	if r.Problem == "" {
		t.Errorf("a job left in place because of a mount point is not reported: %+v", r)
	}
}

// requireTrustedPicks claims the site's prunable jobs as a drain would, fails the test
// for any pick the drain would not trust (the unlink-only path is what the caller wants
// to exercise), and puts every job back in the index for the prune that follows. It
// returns how many jobs were picked.
func requireTrustedPicks(t *testing.T, s *site) int {
	t.Helper()
	var res PruneResult
	picks, _, _ := s.choose(1000, true, &res)
	markTrusted(s.raw, picks)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range picks {
		if !p.trusted {
			t.Errorf("job %s not trusted: the unlink-only path is not what this test exercises", p.j.id)
		}
		p.j.busy = false
		s.idx.place(p.j)
	}
	return len(picks)
}
