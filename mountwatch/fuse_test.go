package mountwatch

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// A healthy mount reads healthy; once its static credential expires it answers EACCES
// on lookup/readdir/create (root getattr still fine), the watcher sees denied, and the
// remount_command (a restart with fresh keys) brings it back.
func TestExpiredStaticCredentialsRemount(t *testing.T) {
	f := newFixture(t)
	if err := writeCred(f.cred, time.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	f.startServer("--cred", f.cred)
	cfg := f.mountCfg("agent")
	cfg.CredentialFile = f.cred
	cfg.RemountCommand = f.serverArgs("--cred", f.cred, "--kill", "--renew", "1h")
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
	if len(f.eventsWith(api.EventRemount, "remounted agent")) == 0 {
		t.Fatal("no remount event")
	}
	if c := w.Counters(); c.Remounts["agent"]["ok"] < 1 || c.Failures["agent"]["denied"] < 1 {
		t.Fatalf("counters: %+v %+v", c.Remounts, c.Failures)
	}
	if m.CredentialExpiresAt == nil || time.Until(*m.CredentialExpiresAt) < 30*time.Minute {
		t.Fatalf("credential_expires_at = %v, want the renewed expiry", m.CredentialExpiresAt)
	}
}
