package retention

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// oldDirJob is makeFileJob plus the job's directory (id itself, as a launcher leaves
// one), holding one file; all of it at.
func oldDirJob(t *testing.T, dir, id string, at time.Time) []string {
	t.Helper()
	names := makeFileJob(t, dir, id, at)
	sub := filepath.Join(dir, id)
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "result"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(sub, "result"), sub} {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	return append(names, id)
}

// A job with a directory is trusted for its plain files (no statx before their unlinks),
// but its directory is stated again and removed by the tree walk: something written
// inside it leaves no inotify event in the site, yet the job is kept whole; an untouched
// job with a directory goes entirely; a directory a bind mount covers (no event either)
// is never removed, and neither is the mount's source.
func TestTrustedPickRechecksItsDirectory(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	outside := t.TempDir()
	old := time.Now().Add(-20 * time.Hour)
	gone := oldDirJob(t, dir, "gone", old)
	kept := oldDirJob(t, dir, "kept", old)
	oldDirJob(t, dir, "bound", old)
	if err := os.WriteFile(filepath.Join(outside, "data"), []byte("mounted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, s := staticSite(t, dir, Options{})
	watchUnapplied(t, s)
	if err := os.WriteFile(filepath.Join(dir, "kept", "new"), []byte("written after indexing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "bound")
	if err := unix.Mount(outside, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })

	if n := requireTrustedPicks(t, s); n != 3 {
		t.Fatalf("%d picks, want 3", n)
	}

	drainAll(t, s)
	for _, n := range gone {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s of the untouched expired job survived", n)
		}
	}
	for _, n := range append(kept, "kept/new", "kept/result") {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s of the job written into after indexing was pruned: %v", n, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "data")); err != nil || string(b) != "mounted\n" {
		t.Fatalf("the bind mount's source: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "data")); err != nil || string(b) != "mounted\n" {
		t.Fatalf("the mount point in the site: %q, %v (it must not be removed)", b, err)
	}
}
