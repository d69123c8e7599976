package mountwatch

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A hung mount that nothing could remount is not aborted (issue 23 item 3): an abort ends
// the FUSE server's session for good (rclone exits), while a backend that comes back
// heals a mount left alone. It is reported hung, probed on, and healthy again on the
// same connection once the server answers; status says which recovery applies.
func TestHungWithoutRemountIsLeftToHeal(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	cfg := f.mountCfg("agent")
	cfg.ProbeTimeout = 1500 * time.Millisecond
	w := f.run(f.opts(cfg))
	m := f.waitState("agent", api.MountHealthy)
	if m.Recovery != "wait" {
		t.Errorf("recovery %q, want wait (no remount configured)", m.Recovery)
	}
	conn, _ := srv.Mounted()
	srv.Hang()
	f.waitState("agent", api.MountHung)
	f.waitFor("the left-as-is event", func() bool { return len(f.eventsWith(api.EventRemount, "its connection is not aborted")) > 0 })
	srv.Unhang() // the backend is back
	f.waitState("agent", api.MountHealthy)
	if n := w.Counters().Aborts["agent"]; n != 0 || len(f.eventsWith(api.EventMountAbort, "")) > 0 {
		t.Errorf("a mount nothing could remount was aborted (%d aborts)", n)
	}
	if now, ok := srv.Mounted(); !ok || now != conn {
		t.Errorf("connection %d -> %d (mounted %v): the mount did not heal in place", conn, now, ok)
	}
}

// A remount command that keeps running as the mount's server (`rclone mount` without
// --daemon) is not waited for: the remount succeeds at the first healthy probe of the new
// mount, the command is kept running, and launches pass again from then on.
func TestRemountSucceedsAtTheFirstHealthyProbe(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	cfg := f.mountCfg("agent")
	cfg.RemountCommand = srv.ForegroundCommand()
	cfg.RemountTimeout = 10 * time.Minute // a wait for the command's exit would outlast the test
	w := f.run(f.opts(cfg))
	if m := f.waitState("agent", api.MountHealthy); m.Recovery != "remount_command" {
		t.Errorf("recovery %q, want remount_command", m.Recovery)
	}
	srv.Kill()
	f.waitFor("the remount", func() bool { return len(f.eventsWith(api.EventRemount, "remounted agent")) > 0 })
	m := f.waitState("agent", api.MountHealthy)
	if m.RemountsTotal < 1 {
		t.Errorf("remounts_total %d", m.RemountsTotal)
	}
	if len(f.eventsWith(api.EventCommand, "kept as the mount's server")) == 0 {
		t.Error("no event says the still-running remount_command was kept as the mount's server")
	}
	if _, _, _, ok := w.Check(nil); !ok {
		t.Error("launch check refused after the remount")
	}
}

// A release during a remount does not wait for it: the remount stops, its command is
// killed, and the release answers (the remount would have waited ten minutes).
func TestReleaseDuringARemountDoesNotWait(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	testenv.RequireCommand(t, "sleep")
	o := f.opts()
	o.CommandTimeout = 10 * time.Minute
	w := f.run(o)
	cfg := f.mountCfg("s1")
	cfg.RemountCommand = []string{"sleep", "600"} // a remount that never mounts
	cfg.RemountTimeout = 10 * time.Minute
	if _, err := w.Add(cfg, Registration{Unmount: false}); err != nil {
		t.Fatal(err)
	}
	f.waitState("s1", api.MountHealthy)
	srv.Kill() // disconnected: the remount starts, and never mounts
	f.waitFor("the remount command to run", func() bool { return len(f.eventsWith(api.EventRemount, "lazily unmounted the old mount")) > 0 })
	done := make(chan error, 1)
	go func() {
		_, _, _, err := w.Release(context.Background(), "s1", nil, "test")
		done <- err
	}()
	var err error
	f.waitFor("the release to answer", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor("the remount to stop", func() bool { return len(f.eventsWith(api.EventRemount, "stopped")) > 0 })
	for _, e := range f.eventsWith(api.EventMountRegistry, "release s1: wait") {
		t.Errorf("the release waited: %s", e.Message)
	}
}
