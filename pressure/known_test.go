package pressure

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestKnownWayMeasuresFresh: a path measured inline a second time is measured on its
// known way (the poll and a statfs by name), and what it answers is fresh: bytes written
// a moment before show in the next call, their removal in the one after.
func TestKnownWayMeasuresFresh(t *testing.T) {
	testenv.RequireRoot(t)
	for _, m := range measures {
		t.Run(m.name, func(t *testing.T) { testKnownWayMeasuresFresh(t, m.name == "MeasureSite", m.measure) })
	}
}

// measures are the two ways to measure a site: MeasureExisting, the inline way at every
// call (its way is never kept: a statfs by name could follow a symlink put on the way after
// the poll), and MeasureSite, held open on its known way.
var measures = []struct {
	name    string
	measure func(w *Watcher, ctx context.Context, path string) (api.Filesystem, error)
}{
	{"MeasureExisting", (*Watcher).MeasureExisting},
	{"MeasureSite", (*Watcher).MeasureSite},
}

func testKnownWayMeasuresFresh(t *testing.T, held bool, measure func(w *Watcher, ctx context.Context, path string) (api.Filesystem, error)) {
	fs := testenv.Tmpfs(t, 16<<20, 100)
	site := filepath.Join(fs, "x", "site")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	w := New(Options{})
	t.Cleanup(w.mounts.close) // its mountinfo poll, inotify fd and held sites: Run is not called
	ctx := context.Background()
	first, err := measure(w, ctx, site)
	if err != nil || first.Path != site || first.Mountpoint != fs {
		t.Fatalf("MeasureExisting(%s) = %+v, %v", site, first, err)
	}
	// Another test's mount or unmount anywhere reloads the table and forgets every way:
	// the count of measurements on the known way is checked over a stretch without one.
	for attempt := 0; ; attempt++ {
		measure(w, ctx, site) // learns the way again after a reload
		gen := tableAt(w)
		h0, _ := w.mounts.knownCounts()
		again, err := measure(w, ctx, site)
		if err != nil {
			t.Fatal(err)
		}
		if again.Path != first.Path || again.Mountpoint != first.Mountpoint || again.Devno != first.Devno || again.FSType != first.FSType ||
			again.Device != first.Device || again.SizeBytes != first.SizeBytes {
			t.Errorf("on its known way: %+v\nfound the inline way: %+v", again, first)
		}
		must(t, testenv.Fill(filepath.Join(site, "fill"), 4<<20))
		full, err := measure(w, ctx, site)
		if err != nil || full.AvailBytes > first.AvailBytes-4<<20 {
			t.Errorf("after writing 4 MiB: avail %d, before %d (%v): not measured fresh", full.AvailBytes, first.AvailBytes, err)
		}
		os.Remove(filepath.Join(site, "fill")) // by path: tests only
		back, err := measure(w, ctx, site)
		if err != nil || back.AvailBytes < first.AvailBytes {
			t.Errorf("after removing them: avail %d, at first %d (%v)", back.AvailBytes, first.AvailBytes, err)
		}
		h, _ := w.mounts.knownCounts()
		if tableAt(w) != gen && attempt < 50 {
			continue
		}
		want := uint64(0)
		if held {
			want = 3
		}
		if h != h0+want {
			t.Errorf("%d of 3 measurements on the known way, want %d", h-h0, want)
		}
		return
	}
}

// tableAt is when w's mount table was loaded: it changes with every reload.
func tableAt(w *Watcher) time.Time {
	w.mounts.mu.Lock()
	defer w.mounts.mu.Unlock()
	return w.mounts.loadedAt
}

// setup is a case's two tmpfs of other sizes, and the site a/x/site.
type setup struct{ a, b, site string }

const sizeA, sizeB = 16 << 20, 32 << 20

// TestKnownWayForgottenWhenTheWayChanges: each change that could make the path lead
// elsewhere (the path or an ancestor replaced by a symlink to another filesystem, the
// path removed or created, a mount on the way, the filesystem unmounted) is seen by the
// very next measurement, which measures where the path leads now; changes to other
// names in the same directories keep the way known. A known way holds no filesystem
// busy: the unmount succeeds.
func TestKnownWayForgottenWhenTheWayChanges(t *testing.T) {
	testenv.RequireRoot(t)
	for _, m := range measures {
		t.Run(m.name, func(t *testing.T) { testKnownWayForgotten(t, m.name == "MeasureSite", m.measure) })
	}
}

func testKnownWayForgotten(t *testing.T, held bool, measure func(w *Watcher, ctx context.Context, path string) (api.Filesystem, error)) {
	for _, c := range []struct {
		name     string
		path     func(s setup) string        // the path measured (MeasureExisting)
		change   func(t *testing.T, s setup) // between the second and third measurement
		wantPath func(s setup) string        // where the third measures
		wantSize uint64
		known    bool // the third is on the known way
	}{
		{"the site replaced by a symlink to another filesystem", func(s setup) string { return s.site },
			func(t *testing.T, s setup) {
				must(t, os.Rename(s.site, s.site+".old"))
				must(t, os.Symlink(filepath.Join(s.b, "site"), s.site))
			}, func(s setup) string { return "" }, sizeB, false},
		{"an ancestor replaced by a symlink to another filesystem", func(s setup) string { return s.site },
			func(t *testing.T, s setup) {
				must(t, os.Rename(filepath.Join(s.a, "x"), filepath.Join(s.a, "x.old")))
				must(t, os.Symlink(s.b, filepath.Join(s.a, "x")))
			}, func(s setup) string { return "" }, sizeB, false},
		{"the site removed", func(s setup) string { return s.site },
			func(t *testing.T, s setup) { must(t, os.Remove(s.site)) },
			func(s setup) string { return filepath.Join(s.a, "x") }, sizeA, false},
		{"a path below the site created", func(s setup) string { return filepath.Join(s.site, "new") },
			func(t *testing.T, s setup) { must(t, os.Mkdir(filepath.Join(s.site, "new"), 0o755)) },
			func(s setup) string { return filepath.Join(s.site, "new") }, sizeA, false},
		{"a filesystem mounted on the way", func(s setup) string { return s.site },
			func(t *testing.T, s setup) {
				must(t, unix.Mount("tmpfs", filepath.Join(s.a, "x"), "tmpfs", 0, "size=48m"))
				t.Cleanup(func() { unix.Unmount(filepath.Join(s.a, "x"), unix.MNT_DETACH) })
			}, func(s setup) string { return filepath.Join(s.a, "x") }, 48 << 20, false},
		{"the filesystem unmounted", func(s setup) string { return s.site },
			func(t *testing.T, s setup) {
				if !held {
					must(t, unix.Unmount(s.a, 0)) // a way known by name holds no filesystem busy
					return
				}
				// A held site holds its filesystem as the retention component's root does:
				// detached, it is let go at the next call.
				must(t, unix.Unmount(s.a, unix.MNT_DETACH))
			},
			func(s setup) string { return "" }, 0, false},
		{"other names created, renamed and removed on the way", func(s setup) string { return s.site },
			func(t *testing.T, s setup) {
				for _, d := range []string{s.a, filepath.Join(s.a, "x"), s.site} {
					must(t, os.Mkdir(filepath.Join(d, "other"), 0o755))
					must(t, os.Rename(filepath.Join(d, "other"), filepath.Join(d, "other2")))
					must(t, os.Remove(filepath.Join(d, "other2")))
				}
			}, func(s setup) string { return s.site }, sizeA, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Another test's mount or unmount anywhere forgets every way too: a try
			// whose table was reloaded meanwhile says nothing of the change, and is made
			// again on a fresh setup.
			for attempt := 0; ; attempt++ {
				if tryKnownWayChange(t, held, measure, c.path, c.change, c.wantPath, c.wantSize, c.known, attempt == 50) {
					return
				}
			}
		})
	}
}

// tryKnownWayChange is one try of a case of TestKnownWayForgottenWhenTheWayChanges; false
// when the mount table was reloaded while it learnt the way or measured after the change
// (unless last), and nothing was checked but the figures.
func tryKnownWayChange(t *testing.T, held bool, measure func(w *Watcher, ctx context.Context, path string) (api.Filesystem, error), path func(s setup) string, change func(t *testing.T, s setup), wantPath func(s setup) string,
	wantSize uint64, known, last bool) bool {
	s := setup{a: testenv.Tmpfs(t, sizeA, 100), b: testenv.Tmpfs(t, sizeB, 100)}
	s.site = filepath.Join(s.a, "x", "site")
	must(t, os.MkdirAll(s.site, 0o755))
	must(t, os.Mkdir(filepath.Join(s.b, "site"), 0o755))
	w := New(Options{})
	t.Cleanup(w.mounts.close) // its mountinfo poll, inotify fd and held sites: Run is not called
	ctx := context.Background()
	p := path(s)
	if _, err := measure(w, ctx, p); err != nil {
		t.Fatal(err)
	}
	gen := tableAt(w)
	if _, err := measure(w, ctx, p); err != nil {
		t.Fatal(err)
	}
	// Only a held site's way is kept, and only a path that exists is held.
	keeps := held && p == s.site
	known = known && keeps
	h0, f0 := w.mounts.knownCounts()
	if want := map[bool]uint64{true: 1}[keeps]; h0 != want {
		if tableAt(w) != gen && !last {
			return false
		}
		t.Fatalf("%d measurements of %s on its known way, want %d of 2", h0, p, want)
	}
	change(t, s)
	fig, err := measure(w, ctx, p)
	if err != nil {
		t.Fatalf("after the change: %v", err)
	}
	if want := wantPath(s); want != "" && fig.Path != want {
		t.Errorf("measured %s, want %s (%+v)", fig.Path, want, fig)
	}
	if wantSize != 0 && fig.SizeBytes != wantSize {
		t.Errorf("measured a filesystem of %d bytes, want %d: %+v", fig.SizeBytes, wantSize, fig)
	}
	if wantSize == 0 && fig.Mountpoint == s.a {
		t.Errorf("measured the unmounted filesystem: %+v", fig)
	}
	h1, f1 := w.mounts.knownCounts()
	if on := h1 > h0; on != known || (keeps && !known && f1 == f0) {
		if known && tableAt(w) != gen && !last {
			return false // forgotten for another test's mount
		}
		t.Errorf("after the change, measured on the known way: %v, want %v (%d forgotten)", on, known, f1-f0)
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// heldFds counts this process's open fds on dir (or on it deleted).
func heldFds(t *testing.T, dir string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && (l == dir || l == dir+" (deleted)") {
			n++
		}
	}
	return n
}

// TestMeasureSiteLetsItsFdGo: the fd MeasureSite holds a site's directory by goes when
// its way changes, at the next sampling tick even with no call (the site removed: its
// filesystem is not held by a directory that is gone), and when Run ends; MeasureExisting
// holds none.
func TestMeasureSiteLetsItsFdGo(t *testing.T) {
	testenv.RequireRoot(t)
	fs := testenv.Tmpfs(t, 16<<20, 100)
	site := filepath.Join(fs, "site")
	must(t, os.Mkdir(site, 0o755))
	w := New(Options{Filesystems: []FSConfig{{Path: fs}}, SampleInterval: 50 * time.Millisecond})
	_, stop := runWatcher(t, w)
	// heldBy measures site until its fd is held (a mount made by another test meanwhile
	// forgets every way) and says so; false when it never is within the deadline.
	heldBy := func() bool {
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
			if _, err := w.MeasureSite(context.Background(), site); err != nil {
				t.Fatal(err)
			}
			if heldFds(t, site) == 1 {
				return true
			}
		}
		return false
	}
	if !heldBy() {
		t.Fatalf("MeasureSite(%s) holds %d fds on it, want 1", site, heldFds(t, site))
	}
	for range 3 {
		if _, err := w.MeasureExisting(context.Background(), filepath.Join(fs, "other")); err != nil {
			t.Fatal(err)
		}
	}
	if n := heldFds(t, fs); n != 0 {
		t.Errorf("MeasureExisting(%s/other) holds %d fds on %s, want none", fs, n, fs)
	}
	must(t, os.Remove(site)) // by path: tests only
	for end := time.Now().Add(30 * time.Second); heldFds(t, site) != 0; {
		if time.Now().After(end) {
			t.Fatalf("the removed site's directory still held 30 s after (%d fds): the sampling tick did not let it go", heldFds(t, site))
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, os.Mkdir(site, 0o755))
	if !heldBy() {
		t.Fatalf("MeasureSite(%s) of the new directory holds %d fds on it, want 1", site, heldFds(t, site))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := heldFds(t, site); n != 0 {
		t.Errorf("%d fds on %s after Run returned, want none", n, site)
	}
}
