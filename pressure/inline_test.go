package pressure

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

// TestMeasureInlineOnLocalFilesystems: on a tmpfs and a loop-mounted ext4 (under this
// machine's ext4 root), Measure and MeasureExisting measure on the caller's goroutine:
// every call the prober starts is an inline one, and the figures are those of a statfs
// on the goroutine path (the watched filesystem's object; for a site not created yet,
// the filesystem it will be created on). A path through a symlink, and a FUSE mount, are
// handed to a goroutine and still answer.
func TestMeasureInlineOnLocalFilesystems(t *testing.T) {
	testenv.RequireRoot(t)
	tmp := testenv.Tmpfs(t, 8<<20, 100)
	ext4, _ := testenv.LoopMount(t, testenv.Ext4Image(t, 8<<20))
	fuseDir, _ := mountHang(t) // not armed: its statfs answers
	entries, err := mountinfo.Read("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tmp, ext4} {
		if _, ok := localChain(entries, p); !ok {
			// The mounts above the test's directories (this machine: "/" is ext4) are
			// what the inline path requires; say which are not.
			var on []string
			for _, e := range entries {
				if mountinfo.Under(p, e.MountPoint) {
					on = append(on, e.MountPoint+" ("+e.FSType+")")
				}
			}
			t.Fatalf("%s: the mounts on its way are not all local: %s", p, strings.Join(on, ", "))
		}
	}

	w := New(Options{Filesystems: []FSConfig{
		{Path: tmp, ReclaimBelow: units.Threshold{Amount: 1 << 20}},
		{Path: ext4, ReclaimBelow: units.Threshold{Amount: 1 << 20}},
	}})
	t.Cleanup(w.mounts.close) // its mountinfo poll, inotify fd and held sites: Run is not called
	ctx := context.Background()
	for _, root := range []string{tmp, ext4} {
		os.Mkdir(filepath.Join(root, "site"), 0o755)
		p := w.proberFor(root)
		for i := 0; i < 3; i++ {
			fig, err := w.Measure(ctx, root)
			if err != nil || fig.Path != root || fig.SizeBytes == 0 || fig.SampledAt.IsZero() || fig.Mountpoint != root {
				t.Fatalf("Measure(%s) = %+v, %v", root, fig, err)
			}
			fig, err = w.MeasureExisting(ctx, filepath.Join(root, "site", "not", "yet"))
			if err != nil || fig.Path != root || fig.SizeBytes == 0 {
				t.Fatalf("MeasureExisting of a path not created yet on %s = %+v, %v", root, fig, err)
			}
			fig, err = w.MeasureExisting(ctx, filepath.Join(root, "site"))
			if err != nil || fig.Path != root {
				t.Fatalf("MeasureExisting(%s/site) = %+v, %v", root, fig, err)
			}
		}
		if s, in := p.startedTotal(), p.inlineTotal(); s != 9 || in != 9 {
			t.Errorf("%s: %d calls started, %d of them inline; want all 9 inline", root, s, in)
		}
		// An answer inline is a sample like any other: the watched filesystem has it.
		if fig, ok := w.Filesystem(root); !ok || fig.SampledAt.IsZero() || fig.FSType == "" {
			t.Errorf("%s after inline measures: %+v", root, fig)
		}
	}

	// A symlink on the way could lead through any mount: handed off, same answer.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(tmp, "site"), link); err != nil {
		t.Fatal(err)
	}
	p := w.proberFor(tmp)
	s0, in0 := p.startedTotal(), p.inlineTotal()
	if fig, err := w.MeasureExisting(ctx, filepath.Join(link, "x")); err != nil || fig.Path != tmp {
		t.Fatalf("MeasureExisting through a symlink = %+v, %v", fig, err)
	}
	lp := w.proberFor(link)
	if lp.inlineTotal() != 0 || lp.startedTotal() != 1 || p.startedTotal() != s0 || p.inlineTotal() != in0 {
		t.Errorf("through a symlink: %d started, %d inline; want 1 handed off", lp.startedTotal(), lp.inlineTotal())
	}

	// A FUSE mount is never measured inline, even while it answers.
	fp := w.proberFor(fuseDir)
	for i := 0; i < 2; i++ {
		mctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := w.Measure(mctx, fuseDir)
		cancel()
		if err != nil {
			t.Fatalf("Measure of an answering FUSE mount: %v", err)
		}
	}
	if s, in := fp.startedTotal(), fp.inlineTotal(); s != 2 || in != 0 {
		t.Errorf("FUSE mount: %d calls started, %d inline; want 2, none inline", s, in)
	}
}

// TestMeasureInlineSeesANewMount: a FUSE mount put on the measured path after a first
// inline measure is seen by the next call before its lookup (mountinfo's POLLPRI reloads
// the table at once, not after its 10-s age): a path beneath it, whose lookup the
// FUSE server never answers, is handed off and the call ends at its deadline.
func TestMeasureInlineSeesANewMount(t *testing.T) {
	testenv.RequireRoot(t)
	outer := testenv.Tmpfs(t, 8<<20, 100)
	w := New(Options{})
	t.Cleanup(w.mounts.close) // its mountinfo poll, inotify fd and held sites: Run is not called
	ctx := context.Background()
	dir := filepath.Join(outer, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fig, err := w.Measure(ctx, dir)
	if err != nil || fig.Mountpoint != outer {
		t.Fatalf("Measure(%s) = %+v, %v", dir, fig, err)
	}
	if in := w.proberFor(dir).inlineTotal(); in != 1 {
		t.Fatalf("%d inline calls on a tmpfs, want 1", in)
	}
	// A FUSE mount on the path: the table's reload shows it, the next call is handed off.
	fuseDir, _ := mountHangOn(t, dir)
	p := w.proberFor(fuseDir)
	s0, in0 := p.startedTotal(), p.inlineTotal()
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	fig, err = w.Measure(mctx, fuseDir)
	cancel()
	if err != nil || fig.Mountpoint != fuseDir || !strings.HasPrefix(fig.FSType, "fuse") {
		t.Fatalf("Measure of the FUSE mount on %s = %+v, %v", fuseDir, fig, err)
	}
	if p.startedTotal() != s0+1 || p.inlineTotal() != in0 {
		t.Errorf("a FUSE mount put on the path was measured inline (%d started, %d inline)", p.startedTotal()-s0, p.inlineTotal()-in0)
	}
}

func TestMeasureInlineNeverLooksUpThroughANewHungMount(t *testing.T) {
	testenv.RequireRoot(t)
	outer := testenv.Tmpfs(t, 8<<20, 100)
	w := New(Options{})
	t.Cleanup(w.mounts.close) // its mountinfo poll, inotify fd and held sites: Run is not called
	dir := filepath.Join(outer, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	below := filepath.Join(dir, "site")
	if _, err := w.MeasureExisting(context.Background(), below); err != nil {
		t.Fatal(err)
	}
	if in := w.proberFor(below).inlineTotal(); in != 1 {
		t.Fatalf("%d inline calls on a tmpfs, want 1", in)
	}
	_, root := mountHangOn(t, dir)
	root.lookups.Store(true)
	root.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := w.MeasureExisting(ctx, below)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("MeasureExisting beneath a hung FUSE mount: %v, want its deadline", err)
		}
	case <-time.After(time.Minute):
		// Unblocked by the cleanup (the FUSE root's release), so the goroutine ends.
		t.Fatal("MeasureExisting beneath a hung FUSE mount held its caller a minute past a 200-ms deadline: looked up inline")
	}
}

// mountinfoFds counts this process's open fds on its mountinfo.
func mountinfoFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasSuffix(l, "/mountinfo") {
			n++
		}
	}
	return n
}

// TestWatcherRunReleasesItsMountinfoPoll: the fd an inline measurement polls mountinfo
// through is the Watcher's, and goes when its Run ends (a daemon stopped and built again in
// one process kept one per instance); a measurement after that still answers, handed off.
func TestWatcherRunReleasesItsMountinfoPoll(t *testing.T) {
	before := mountinfoFds(t)
	w := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	dir := t.TempDir()
	if _, err := w.Measure(context.Background(), dir); err != nil {
		t.Fatalf("Measure(%s): %v", dir, err)
	}
	if n := mountinfoFds(t); n != before+1 {
		t.Fatalf("%d fds on mountinfo while the Watcher runs, want %d (its poll)", n, before+1)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := mountinfoFds(t); n != before {
		t.Errorf("%d fds on mountinfo after Run returned, want %d: the poll fd stayed open", n, before)
	}
	mctx, mcancel := context.WithTimeout(context.Background(), time.Minute)
	defer mcancel()
	if fig, err := w.Measure(mctx, dir); err != nil || fig.Mountpoint == "" {
		t.Errorf("Measure after Run returned: %+v, %v", fig, err)
	}
}
