package mountwatch

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// Resume (no loop running, as right after a VM wakes) refreshes a credential past its
// refresh point and probes every mount at once.
func TestResumeRefreshesAndProbes(t *testing.T) {
	f := newFixture(t)
	// The credential expired "during the pause".
	if err := fusetest.WriteCred(f.cred, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.startServer(fusetest.Options{Credential: f.cred, Reload: true})
	cfg := f.mountCfg("agent")
	cfg.CredentialFile = f.cred
	cfg.RefreshCommand = []string{"/bin/sh", "-c", `printf '{"Expiration":"%s"}' "$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)" > ` + f.cred}
	w, err := New(f.opts(cfg))
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	t.Cleanup(w.servers.closeAll) // no Run here, whose end closes the probe servers Resume starts
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acts := w.Resume(ctx)
	if len(acts) != 1 || acts[0].Status != api.ActionDone || acts[0].Path != f.cred {
		t.Fatalf("actions %+v", acts)
	}
	m := f.mountState("agent")
	if m.State != api.MountHealthy || m.LastProbeAt == nil || m.CredentialExpiresAt == nil || time.Until(*m.CredentialExpiresAt) < 30*time.Minute {
		t.Fatalf("after resume: %+v", m)
	}
}

// restarterFunc adapts a function to UnitRestarter (systemd's D-Bus restarter in the daemon).
type restarterFunc func(ctx context.Context, name string) (string, error)

func (r restarterFunc) RestartUnit(ctx context.Context, name string) (string, error) {
	return r(ctx, name)
}

// remount_unit goes through the Restarter; max_remounts_per_hour stops a remount loop.
func TestRemountUnitAndHourlyLimit(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	var calls atomic.Int32
	var fail atomic.Bool
	cfg := f.mountCfg("agent")
	cfg.RemountUnit = "agent-fuse.service"
	cfg.MaxRemountsPerHour = 2
	o := f.opts(cfg)
	o.Restarter = restarterFunc(func(ctx context.Context, name string) (string, error) {
		calls.Add(1)
		if name != "agent-fuse.service" {
			t.Errorf("restarted %q", name)
		}
		if fail.Load() {
			return "failed", nil
		}
		args := srv.StartCommand()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Logf("restart: %v %s", err, out)
			return "failed", nil
		}
		return "done", nil
	})
	w := f.run(o)
	f.waitState("agent", api.MountHealthy)
	srv.Kill()
	f.waitFor("a remount through the unit", func() bool { return w.Counters().Remounts["agent"]["ok"] == 1 })
	f.waitState("agent", api.MountHealthy)
	fail.Store(true)
	srv.Kill()
	// The skip is counted a moment before its event is recorded: wait for both.
	f.waitFor("the hourly limit, counted and its event recorded", func() bool {
		return w.Counters().Remounts["agent"]["skipped"] >= 1 && len(f.eventsWith(api.EventRemount, "max_remounts_per_hour (2) reached")) > 0
	})
	if n := calls.Load(); n != 2 {
		t.Fatalf("restarter called %d times, want 2 (one ok, one failed, then the limit)", n)
	}
	if _, _, detail, ok := w.Check(nil); ok || detail == "" {
		t.Fatal("Check passed while the mount is down")
	}
}

// A resume that finds the loop's probe still running within its probe_timeout (a slow
// probe child, as under load) waits for it instead of calling the mount hung: before
// this was fixed, the daemon's start-up resume aborted and remounted healthy mounts.
func TestResumeWaitsForASlowProbe(t *testing.T) {
	f := newFixture(t)
	f.startServer(fusetest.Options{})
	cfg := f.mountCfg("agent")
	cfg.ProbeInterval, cfg.ProbeTimeout = time.Second, 10*time.Second
	o := f.opts(cfg)
	// Every probe child takes a second before it probes.
	o.ProbeCommand = []string{"/bin/sh", "-c", `sleep 1; exec "$0" "$@"`, testBin, "mount-probe"}
	w := f.run(o)
	f.waitFor("the loop's first probe", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.mounts[0].probe != nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w.Resume(ctx)
	if m := f.mountState("agent"); m.State != api.MountHealthy {
		t.Fatalf("after resume: %+v", m)
	}
	if ev := f.eventsWith(api.EventMountProbe, "hung"); len(ev) > 0 || w.Counters().Aborts["agent"] != 0 {
		t.Fatalf("a slow probe was taken for a hung mount: %v", ev)
	}
}
