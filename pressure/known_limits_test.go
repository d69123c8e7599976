package pressure

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// inotifyChildEnv tells the test binary it is TestKnownWayWithoutInotify's child: the
// sysctl (of /proc/sys/user) to lower in its own user namespace, name=value.
const inotifyChildEnv = "SANDBOXD_TEST_INOTIFY_LIMIT"

// TestKnownWayWithoutInotify: with no inotify instance left, or too few watches for the
// whole way, MeasureSite measures the full way every call, never an error and never a
// stale answer: a fill and a swap for a symlink to another filesystem show at once. The
// limits are the user namespace's (fs.inotify's per-user counts, /proc/sys/user), lowered
// in a child process's own namespace, so no other test or service on the machine sees
// them.
func TestKnownWayWithoutInotify(t *testing.T) {
	if os.Getenv(inotifyChildEnv) != "" {
		inotifyLimitedChild(t)
		return
	}
	testenv.RequireRoot(t)
	for _, c := range []struct{ name, limit string }{
		{"no inotify instance left", "max_inotify_instances=0"},
		{"two watches left", "max_inotify_watches=2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := setup{a: testenv.Tmpfs(t, sizeA, 100), b: testenv.Tmpfs(t, sizeB, 100)}
			must(t, os.MkdirAll(filepath.Join(s.a, "x", "site"), 0o755))
			must(t, os.Mkdir(filepath.Join(s.b, "site"), 0o755))
			cmd := exec.Command(os.Args[0], "-test.run=^TestKnownWayWithoutInotify$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), inotifyChildEnv+"="+c.limit, "SANDBOXD_TEST_FS_A="+s.a, "SANDBOXD_TEST_FS_B="+s.b)
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "checked with "+c.limit) {
				t.Fatalf("child with %s: %v\n%s", c.limit, err, out)
			}
		})
	}
}

func inotifyLimitedChild(t *testing.T) {
	name, value, _ := strings.Cut(os.Getenv(inotifyChildEnv), "=")
	must(t, os.WriteFile(filepath.Join("/proc/sys/user", name), []byte(value), 0))
	a, b := os.Getenv("SANDBOXD_TEST_FS_A"), os.Getenv("SANDBOXD_TEST_FS_B")
	site := filepath.Join(a, "x", "site")
	w := New(Options{})
	defer w.mounts.close()
	ctx := context.Background()
	var first uint64
	for i := range 5 {
		fig, err := w.MeasureSite(ctx, site)
		if err != nil || fig.Path != site || fig.SizeBytes != sizeA {
			t.Fatalf("call %d: MeasureSite(%s) = %+v, %v", i, site, fig, err)
		}
		first = fig.AvailBytes
	}
	if h, _ := w.mounts.knownCounts(); h != 0 {
		t.Errorf("%d measurements on a known way with %s=%s: its watches could not all be made", h, name, value)
	}
	must(t, testenv.Fill(filepath.Join(site, "fill"), 4<<20))
	if fig, err := w.MeasureSite(ctx, site); err != nil || fig.AvailBytes > first-4<<20 {
		t.Errorf("after writing 4 MiB: avail %d, before %d (%v)", fig.AvailBytes, first, err)
	}
	must(t, os.Rename(site, site+".old")) // by path: tests only
	must(t, os.Symlink(filepath.Join(b, "site"), site))
	if fig, err := w.MeasureSite(ctx, site); err != nil || fig.SizeBytes != sizeB {
		t.Errorf("after the site became a symlink to a %d-byte tmpfs: %+v, %v", sizeB, fig, err)
	}
	if !t.Failed() {
		t.Logf("checked with %s=%s", name, value)
	}
}
