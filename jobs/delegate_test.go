package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// Under systemd with Delegate=yes the daemon's own cgroup (marked with the
// trusted.delegate xattr, as systemd marks it) is the default root: FindRoot finds it
// from /proc/self/cgroup, and the first job moves the daemon into the <own>/daemon leaf
// before it makes <own>/jobs/<id>, so the no-internal-processes rule holds.
func TestDelegatedRoot(t *testing.T) {
	root := testRoot(t)
	mount, _ := cgroup2Mount("/proc")
	orig, err := ownCgroup("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(root, "trusted.delegate", []byte("1"), 0); err != nil {
		t.Fatalf("set trusted.delegate as systemd does: %v", err)
	}
	self := strconv.Itoa(os.Getpid())
	// Registered after testRoot's cleanup, so it runs first: this process goes back
	// where it was before the tree it sits in is killed.
	t.Cleanup(func() {
		if err := writeFile(filepath.Join(mount, orig, "cgroup.procs"), self); err != nil {
			t.Errorf("move this test process back to %s: %v", orig, err)
		}
	})
	// As systemd starts a service: the daemon runs in the delegated cgroup itself.
	if err := writeFile(filepath.Join(root, "cgroup.procs"), self); err != nil {
		t.Fatal(err)
	}
	got, delegated, err := FindRoot("/proc")
	if err != nil || got != root || !delegated {
		t.Fatalf("FindRoot = %q, %v, %v; want %q, delegated", got, delegated, err, root)
	}
	m := New(Options{Grace: time.Second})
	if ok, why := m.Available(); !ok || m.Root() != root {
		t.Fatalf("available %v (%s), root %q", ok, why, m.Root())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	p := spawn(t, `exec sleep 600`)
	j, err := m.Register(api.JobRequest{ID: "delegated", PID: p.Process.Pid}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if own, _ := ownCgroup("/proc"); own != m.cg.rel(filepath.Join(root, "daemon")) {
		t.Errorf("the daemon is in %s, want the leaf %s/daemon", own, m.cg.rel(root))
	}
	if j.Cgroup != filepath.Join(root, "jobs", "delegated") {
		t.Errorf("job cgroup %s", j.Cgroup)
	}
	if v, err := m.End(ctx, "delegated", api.ReasonDeleted, true); err != nil || v.State != api.JobKilled {
		t.Errorf("end: %+v, %v", v, err)
	}
}
