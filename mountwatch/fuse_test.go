package mountwatch

import (
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// A healthy mount reads healthy; once its static credential expires it answers EACCES
// on lookup/readdir/create (root getattr still fine), the watcher sees denied, and the
// remount_command (a restart with fresh keys) brings it back.
func TestExpiredStaticCredentialsRemount(t *testing.T) {
	f := newFixture(t)
	// 5 s: time for a loaded machine to see it healthy and Check it before it expires.
	if err := fusetest.WriteCred(f.cred, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	srv := f.startServer(fusetest.Options{Credential: f.cred})
	cfg := f.mountCfg("agent")
	cfg.CredentialFile = f.cred
	cfg.RemountCommand = srv.RemountCommand(time.Hour)
	w := f.run(f.opts(cfg))
	f.waitState("agent", api.MountHealthy)
	if _, _, _, ok := w.Check(nil); !ok {
		t.Fatal("Check refused a healthy mount")
	}
	f.waitFor("a denied state event", func() bool { return len(f.eventsWith(api.EventMountProbe, "is denied: EACCES")) > 0 })
	m := f.waitState("agent", api.MountHealthy)
	if m.RemountsTotal < 1 {
		t.Fatalf("remounts_total = %d, want >= 1", m.RemountsTotal)
	}
	// The remount's count and event follow its healthy verdict by a moment.
	f.waitFor("the remount's event and count", func() bool {
		return len(f.eventsWith(api.EventRemount, "remounted agent")) > 0 && w.Counters().Remounts["agent"]["ok"] >= 1
	})
	if c := w.Counters(); c.Remounts["agent"]["ok"] < 1 || c.Failures["agent"]["denied"] < 1 {
		t.Fatalf("counters: %+v %+v", c.Remounts, c.Failures)
	}
	if m.CredentialExpiresAt == nil || time.Until(*m.CredentialExpiresAt) < 30*time.Minute {
		t.Fatalf("credential_expires_at = %v, want the renewed expiry", m.CredentialExpiresAt)
	}
}

// With a refresh_command that renews the credential file before it expires, the mount
// never goes denied.
func TestRefreshCommandKeepsMountHealthy(t *testing.T) {
	f := newFixture(t)
	// 8 s, refreshed at half its life: 4 s in which a loaded machine must start the watcher,
	// and then run each refresh, before the server denies.
	if err := fusetest.WriteCred(f.cred, time.Now().Add(8*time.Second)); err != nil {
		t.Fatal(err)
	}
	f.startServer(fusetest.Options{Credential: f.cred, Reload: true})
	cfg := f.mountCfg("agent")
	cfg.CredentialFile = f.cred
	cfg.RefreshAt = 0.5
	// The refresh command rewrites the file to expire 8 s ahead, as a credential helper would.
	cfg.RefreshCommand = fusetest.RefreshCommand(f.cred, 8*time.Second)
	w := f.run(f.opts(cfg))
	f.waitState("agent", api.MountHealthy)
	// Each refresh is counted a moment before its event is recorded: wait for both.
	f.waitFor("three refreshes, counted and their events recorded", func() bool {
		return w.Counters().Refreshes["agent"]["ok"] >= 3 && len(f.eventsWith(api.EventCredential, "credentials refreshed")) >= 3
	})
	if ev := f.eventsWith(api.EventMountProbe, "denied"); len(ev) > 0 {
		t.Fatalf("mount went denied despite the refresh: %v", ev[0].Message)
	}
	if m := f.mountState("agent"); m.State != api.MountHealthy || m.CredentialExpiresAt == nil {
		t.Fatalf("mount %+v", m)
	}
}

// A killed server leaves a dead mount (ENOTCONN): disconnected is detected and the
// remount brings it back.
func TestDisconnectedRemount(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	cfg := f.mountCfg("agent")
	cfg.RemountCommand = srv.StartCommand()
	w := f.run(f.opts(cfg))
	f.waitState("agent", api.MountHealthy)
	srv.Kill()
	f.waitFor("a disconnected event", func() bool { return len(f.eventsWith(api.EventMountProbe, "is disconnected: ENOTCONN")) > 0 })
	m := f.waitState("agent", api.MountHealthy)
	if m.RemountsTotal < 1 || w.Counters().Failures["agent"]["disconnected"] < 2 {
		t.Fatalf("mount %+v counters %+v", m, w.Counters().Failures)
	}
}

// A server that stops answering: the loop keeps running, the connection is aborted
// through fusectl and remounted, and no probe child is left outstanding.
func TestHungAbortRemount(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	cfg := f.mountCfg("agent")
	cfg.ProbeTimeout = 1500 * time.Millisecond // generous: a -race probe child takes ~1 s to start
	cfg.RemountCommand = srv.RemountCommand(0)
	var checkedWhileHung atomic.Int32 // 1: Check refused, 2: Check passed
	f.onEvent = func(e api.Event) {
		if e.Kind == api.EventMountProbe && strings.Contains(e.Message, "is hung") {
			if _, _, _, ok := f.w.Check(nil); ok {
				checkedWhileHung.Store(2)
			} else {
				checkedWhileHung.CompareAndSwap(0, 1)
			}
		}
	}
	w := f.run(f.opts(cfg))
	f.waitState("agent", api.MountHealthy)
	before := runtime.NumGoroutine()
	srv.Hang()
	f.waitFor("a hung event", func() bool { return len(f.eventsWith(api.EventMountProbe, "is hung")) > 0 })
	if checkedWhileHung.Load() != 1 {
		t.Fatal("Check did not refuse the hung mount")
	}
	f.waitFor("an abort event", func() bool { return len(f.eventsWith(api.EventMountAbort, "aborted hung connection")) > 0 })
	f.waitState("agent", api.MountHealthy)
	if w.Counters().Aborts["agent"] < 1 {
		t.Fatal("abort not counted")
	}
	f.waitFor("no outstanding probe", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.mounts[0].probe == nil
	})
	f.waitFor("goroutines back to normal", func() bool { return runtime.NumGoroutine() <= before+3 })
}

// A mount made without allow_other for uid 65534 denies root; the watcher probes it as
// its owner and reads it healthy.
func TestOtherOwnerProbedAsOwner(t *testing.T) {
	f := newFixture(t)
	f.startServer(fusetest.Options{UserID: 65534})
	var st syscall.Stat_t
	if err := syscall.Stat(f.mnt, &st); err != syscall.EACCES {
		t.Fatalf("root stat of a mount without allow_other: %v, want EACCES (test premise)", err)
	}
	w := f.run(f.opts(f.mountCfg("nobody")))
	m := f.waitState("nobody", api.MountHealthy)
	if m.LastProbeAt == nil {
		t.Fatal("no probe time")
	}
	if c := w.Counters(); c.Failures["nobody"]["denied"] != 0 {
		t.Fatalf("probed as the wrong user: %+v", c.Failures)
	}
}
