package safefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// WalkPath refuses a symlink anywhere on the way (the last component too) and magic
// links, names it, stops at the first missing component, and knows "/" under another name.
func TestWalkPath(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.MkdirAll(filepath.Join(real, "sub"), 0o755)
	os.Symlink("/", filepath.Join(dir, "toroot"))
	os.Symlink(real, filepath.Join(dir, "alias"))
	for _, c := range []struct{ path, component string }{
		{filepath.Join(dir, "toroot"), filepath.Join(dir, "toroot")},
		{filepath.Join(dir, "alias", "sub"), filepath.Join(dir, "alias")},
		{filepath.Join(dir, "alias", "missing", "x"), filepath.Join(dir, "alias")},
		{"/proc/self/root", "/proc/self"},
		{"/proc/1/root", "/proc/1/root"},
	} {
		_, err := WalkPath(c.path)
		var u *UnsafeRootError
		if !errors.As(err, &u) || u.Component != c.component || !strings.Contains(u.Reason, "symlink") || !errors.Is(err, ErrUnsafeRoot) {
			t.Errorf("WalkPath(%s) = %v, want a symlink refusal naming %s", c.path, err, c.component)
		}
	}
	pw, err := WalkPath(filepath.Join(real, "sub"))
	if err != nil || !pw.Exists || pw.ID == (ID{}) || pw.KernelFS() != "" {
		t.Errorf("WalkPath of a plain directory: %+v, %v", pw, err)
	}
	pw, err = WalkPath(filepath.Join(real, "missing", "deeper"))
	if err != nil || pw.Exists || pw.Deepest != real {
		t.Errorf("WalkPath of a missing path: %+v, %v", pw, err)
	}
	if pw, err := WalkPath("/"); err != nil || pw.ID != RootID() || pw.ID == (ID{}) {
		t.Errorf("WalkPath(/) = %+v, %v; RootID %v", pw, err, RootID())
	}
	if pw, err := WalkPath("/proc/1"); err != nil || pw.KernelFS() != "procfs" {
		t.Errorf("WalkPath(/proc/1) = %+v (%q), %v, want procfs", pw, pw.KernelFS(), err)
	}
}

// A FUSE mount whose server hangs: WalkPath of the mount point answers (O_PATH opens,
// statx AT_STATX_DONT_SYNC) instead of stalling the registration that asked.
func TestWalkPathOnAHungMount(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	srv.Hang()
	// Hung once a lookup beneath it no longer answers (the server takes the signal in its
	// own time; the blocked lookups end when the mount is torn down in cleanup).
	for i := 0; ; i++ {
		done := make(chan struct{})
		go func() { os.Lstat(filepath.Join(mnt, fmt.Sprintf("probe-%d", i))); close(done) }()
		select {
		case <-done:
			time.Sleep(50 * time.Millisecond)
			continue
		case <-time.After(2 * time.Second):
		}
		break
	}
	type result struct {
		pw  PathWalk
		err error
	}
	got := make(chan result, 1)
	go func() { pw, err := WalkPath(mnt); got <- result{pw, err} }()
	select {
	case r := <-got:
		if r.err != nil || !r.pw.Exists || r.pw.ID == (ID{}) {
			t.Errorf("WalkPath of a hung mount: %+v, %v", r.pw, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WalkPath of a hung FUSE mount did not answer within 30 s")
	}
}
