package reclaim

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestReserveFailureIsOneEventPerEpisode: a reserve that cannot be made (issue 25: in the
// DaemonSet it lay on the read-only /host mount and failed every tick, ~86,400 events a
// day) is reported once, not at every tick, and once more when it is armed after all.
func TestReserveFailureIsOneEventPerEpisode(t *testing.T) {
	e := newEnv(t, 128*mib, 0)
	e.reclaimBelow, e.replaceBelow = 16*mib, 8*mib
	ro := testenv.Tmpfs(t, 32*mib, 0)
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	resPath := filepath.Join(ro, "reserve")
	o := e.options()
	o.Reserves = []ReserveConfig{{Filesystem: e.root, Path: resPath, Bytes: 10 * mib}}
	r := e.newReclaimer(o)
	count := func(word string) int {
		e.mu.Lock()
		defer e.mu.Unlock()
		n := 0
		for _, ev := range e.events {
			if strings.Contains(ev.Message, word) {
				n++
			}
		}
		return n
	}
	for i := 0; i < 5; i++ {
		r.reserveTick(context.Background())
	}
	if n := count("failed:"); n != 1 {
		t.Errorf("%d events for 5 failed attempts to make the reserve, want 1: %+v", n, e.events)
	}
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT, ""); err != nil {
		t.Fatal(err)
	}
	r.reserveTick(context.Background())
	r.reserveTick(context.Background())
	if count(" armed (") != 1 || allocated(resPath) < 10*mib {
		t.Errorf("once writable, the reserve was not armed (once): %+v", e.events)
	}
	// A new episode is reported again.
	unix.Unlink(resPath) // by path: the test's own reserve file on its own tmpfs
	unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
	r.reserveTick(context.Background())
	r.reserveTick(context.Background())
	if n := count("failed:"); n != 2 {
		t.Errorf("%d failure events after a second episode, want 2", n)
	}
}
