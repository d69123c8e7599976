package pressure

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

// hangRoot is a FUSE root whose statfs answers zero figures, or blocks (ignoring
// interrupts, like a server that is gone) while armed, until released.
type hangRoot struct {
	fs.Inode
	calls   atomic.Int64
	armed   atomic.Bool
	lookups atomic.Bool // armed, a lookup in the root blocks too (else ENOENT)
	release chan struct{}
	once    sync.Once
}

var (
	_ fs.NodeStatfser = (*hangRoot)(nil)
	_ fs.NodeLookuper = (*hangRoot)(nil)
)

func (r *hangRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if r.armed.Load() && r.lookups.Load() {
		<-r.release
	}
	return nil, syscall.ENOENT
}

func (r *hangRoot) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	r.calls.Add(1)
	if r.armed.Load() {
		<-r.release
	}
	return 0
}

func (r *hangRoot) unblock() { r.once.Do(func() { close(r.release) }) }

// mountHang serves a hangRoot on a fresh directory. Cleanup unblocks the statfs before
// it unmounts: a pending request would keep the mount busy.
func mountHang(t *testing.T) (string, *hangRoot) {
	return mountHangOn(t, t.TempDir())
}

// mountHangOn is mountHang on dir.
func mountHangOn(t *testing.T, dir string) (string, *hangRoot) {
	testenv.RequireRoot(t)
	root := &hangRoot{release: make(chan struct{})}
	srv, err := fs.Mount(dir, root, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true, FsName: "sandboxd-test", Name: "hang",
	}})
	if err != nil {
		t.Fatalf("fuse mount on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("fuse unmount %s: %v", dir, err)
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	t.Cleanup(root.unblock)
	return dir, root
}

func TestHungStatfsMarksStaleAndLoopStaysFresh(t *testing.T) {
	hung, root := mountHang(t)
	healthy := testenv.Tmpfs(t, 8<<20, 100)
	root.armed.Store(true)
	before := root.calls.Load()

	w := New(Options{
		Filesystems: []FSConfig{
			{Path: hung, ReclaimBelow: units.Threshold{Amount: 1 << 20}},
			{Path: healthy, ReclaimBelow: units.Threshold{Amount: 1 << 20}},
		},
		SampleInterval: 20 * time.Millisecond,
		StatfsTimeout:  200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	poll(t, "the hung filesystem to be marked stale", func() bool {
		fig, _ := w.Filesystem(hung)
		return fig.Stale
	})
	if !w.Ready() {
		t.Error("not ready with one filesystem stale and the other sampled")
	}
	l1 := w.LastLoop()
	h1, _ := w.Filesystem(healthy)
	poll(t, "the loop and the healthy filesystem to move on", func() bool {
		h, _ := w.Filesystem(healthy)
		return w.LastLoop().After(l1) && h.SampledAt.After(h1.SampledAt)
	})
	if len(w.Conditions()) == 0 {
		t.Error("no conditions while one filesystem hangs")
	}
	// A stale filesystem has no verdict: FilesystemUnavailable, critical, says so (issue 10).
	if c, ok := unavailableCond(w, hung); !ok || !c.Status || c.Reason != ReasonStatfsHung || c.Severity != sevCritical ||
		!strings.Contains(c.Message, "statfs does not answer (hung), failing since ") {
		t.Errorf("FilesystemUnavailable of the hung filesystem: %+v", c)
	}
	if fig, _ := w.Filesystem(hung); fig.ErrorSince == nil {
		t.Error("a stale filesystem says nothing of since when")
	}
	snap := w.Snapshot()
	if _, err := json.Marshal(snap); err != nil {
		t.Fatal(err)
	}

	// Measure on the hung filesystem waits for the outstanding call, never starts another.
	mctx, mcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	fig, err := w.Measure(mctx, hung)
	mcancel()
	if !errors.Is(err, context.DeadlineExceeded) || !fig.Stale {
		t.Errorf("Measure on a hung filesystem = %+v, %v; want stale figures and a deadline error", fig, err)
	}
	if n := root.calls.Load() - before; n != 1 {
		t.Errorf("%d statfs calls reached the hung server, want 1", n)
	}
	if n := w.proberFor(hung).startedTotal(); n != 1 {
		t.Errorf("%d calls started on the hung filesystem, want 1", n)
	}
	if n := w.proberFor(hung).inlineTotal(); n != 0 {
		t.Errorf("%d calls on a FUSE filesystem measured on the caller's goroutine, want none", n)
	}

	// Released, it answers (zero-size figures) and is no longer stale.
	root.unblock()
	poll(t, "the hung filesystem to answer", func() bool {
		fig, _ := w.Filesystem(hung)
		return !fig.Stale && fig.Error == ""
	})
	if c, ok := unavailableCond(w, hung); !ok || c.Status || c.Reason != ReasonMeasured {
		t.Errorf("FilesystemUnavailable once statfs answers: %+v (it clears at once)", c)
	}
	fig, _ = w.Filesystem(hung)
	if fig.ErrorSince != nil {
		t.Errorf("error_since %v on a filesystem that answers", fig.ErrorSince)
	}
	if fig.SizeBytes != 0 || fig.UsedRatio != 0 || fig.Files != 0 {
		t.Errorf("zero-size FUSE figures: %+v", fig)
	}
	if _, err := json.Marshal(w.Snapshot()); err != nil {
		t.Fatalf("marshal with a zero-size filesystem: %v", err)
	}
	for _, c := range w.Conditions() {
		if c.Subject == hung && c.Status {
			t.Errorf("%s true on a filesystem that reports no capacity: %s", c.Type, c.Message)
		}
	}
}

func unavailableCond(w *Watcher, path string) (api.Condition, bool) {
	for _, c := range w.Conditions() {
		if c.Type == api.CondFilesystemUnavailable && c.Subject == path {
			return c, true
		}
	}
	return api.Condition{}, false
}
