package mountwatch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// startAt serves a test filesystem on dir (made here) with its own backing directory.
func (f *fixture) startAt(dir string) *fusetest.Server {
	f.t.Helper()
	backing := dir + "-backing"
	for _, d := range []string{dir, backing} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			f.t.Fatal(err)
		}
	}
	return fusetest.Start(f.t, dir, fusetest.Options{Backing: backing, Binary: testBin})
}

// A release never unmounts what the path does not name any more: the session's directory
// swapped for a symlink to another session's (as an agent owning it could do) leaves the
// other session's mount alone, and the registered one (moved away) too.
func TestReleaseDoesNotFollowASwappedPath(t *testing.T) {
	f := newFixture(t)
	a, b := filepath.Join(f.base, "a", "mnt"), filepath.Join(f.base, "b", "mnt")
	f.startAt(a)
	srvB := f.startAt(b)
	w := f.run(f.opts())
	if _, err := w.Add(MountConfig{Name: "sess-a", Path: a, ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second}, Registration{Unmount: true}); err != nil {
		t.Fatal(err)
	}
	f.waitState("sess-a", api.MountHealthy)
	if err := os.Rename(filepath.Join(f.base, "a"), filepath.Join(f.base, "a-moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.base, "b"), filepath.Join(f.base, "a")); err != nil {
		t.Fatal(err)
	}
	_, steps, unmounted, err := w.Release(context.Background(), "sess-a", nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("steps: %+v", steps)
	if unmounted {
		t.Error("release says it unmounted a mount that is no longer at the path")
	}
	if _, ok := srvB.Mounted(); !ok {
		t.Fatal("the other session's mount was unmounted through the swapped path")
	}
	entries, _ := readMountinfo("/proc")
	if e, ok := topmostAt(entries, filepath.Join(f.base, "a-moved", "mnt")); !ok || !isFUSE(e.FSType) {
		t.Error("the moved mount is gone")
	}
}

// A mount held busy (a process works in it) refuses umount and fusermount3 -u; the lazy
// umount is the last resort, and the steps say so in that order. Once the holder is gone
// the FUSE server exits.
func TestReleaseFallsBackToLazyUnmount(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	w := f.run(f.opts())
	if _, err := w.Add(MountConfig{Name: "busy", Path: f.mnt, ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second}, Registration{Unmount: true}); err != nil {
		t.Fatal(err)
	}
	f.waitState("busy", api.MountHealthy)
	holder := exec.Command("sleep", "300")
	holder.Dir = f.mnt // its cwd keeps the mount busy
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	pid := srv.Pid()
	_, steps, unmounted, err := w.Release(context.Background(), "busy", nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("steps: %+v", steps)
	var order []string
	for _, s := range steps {
		order = append(order, s.Step+":"+s.Result)
	}
	want := []string{"sync:done", "umount:failed", "fusermount3:failed", "umount_lazy:done"}
	if strings.Join(order, " ") != strings.Join(want, " ") || !unmounted {
		t.Fatalf("steps %v (unmounted %v), want %v", order, unmounted, want)
	}
	if _, ok := srv.Mounted(); ok {
		t.Fatal("still mounted after the lazy unmount")
	}
	holder.Process.Kill()
	holder.Wait()
	f.waitFor("the FUSE server to exit", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	if len(f.eventsWith(api.EventMountRegistry, "release busy: umount_lazy done")) != 1 {
		t.Error("no event for the lazy unmount step")
	}
}
