package mountwatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// Observe mode reports and counts what it would do and changes nothing: a dead mount
// stays dead (no remount command runs), a due credential is not refreshed, a missing link
// is not created, a bare mountpoint is not made immutable.
func TestObserveChangesNothing(t *testing.T) {
	f := newFixture(t)
	srv := f.startServer(fusetest.Options{})
	marker := filepath.Join(f.base, "ran")
	link := filepath.Join(f.base, "link")
	if err := fusetest.WriteCred(f.cred, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	cfg := f.mountCfg("agent")
	cfg.RemountCommand = []string{"/bin/sh", "-c", "touch " + marker}
	cfg.CredentialFile = f.cred
	cfg.RefreshCommand = []string{"/bin/sh", "-c", "touch " + marker}
	cfg.Links = []LinkConfig{{Path: link, Target: f.mnt}}
	guarded := filepath.Join(f.base, "bare")
	os.Mkdir(guarded, 0o755)
	bare := MountConfig{Name: "bare", Path: guarded, Guard: true, RemountCommand: cfg.RemountCommand,
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second}
	o := f.opts(cfg, bare)
	o.Observe = true
	w := f.run(o)
	f.waitFor("a probe", func() bool { return f.mountState("agent").LastProbeAt != nil })
	srv.Kill()
	f.waitState("agent", api.MountDisconnected)
	f.waitFor("observed remounts and refreshes", func() bool {
		c := w.Counters()
		return c.Remounts["agent"]["observed"] >= 1 && c.Refreshes["agent"]["observed"] >= 1 && c.Remounts["bare"]["observed"] >= 1
	})
	for _, want := range []string{"would remount agent", "would run refresh_command", "would rebuild link", "would make the bare mountpoint"} {
		if len(f.eventsWith("", want)) == 0 {
			t.Errorf("no event saying %q", want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command ran in observe mode")
	}
	if _, err := os.Lstat(link); err == nil {
		t.Fatal("a link was created in observe mode")
	}
	if err := os.WriteFile(filepath.Join(guarded, "x"), nil, 0o644); err != nil {
		t.Fatalf("the bare mountpoint was guarded in observe mode: %v", err)
	}
	c := w.Counters()
	if c.Remounts["agent"]["ok"] != 0 || c.Refreshes["agent"]["ok"] != 0 || c.Guards["bare"] != 0 || c.LinkRepairs["agent"] != 0 {
		t.Fatalf("something was done: %+v", c)
	}
	// The probe in flight when the server died may answer ECONNABORTED or EIO; the rounds
	// after it see the dead mount's ENOTCONN. It stays dead: nothing remounted it.
	f.waitFor("the dead mount's ENOTCONN", func() bool {
		m := f.mountState("agent")
		return m.State == api.MountDisconnected && strings.Contains(m.Errno, "ENOTCONN")
	})
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command ran in observe mode")
	}
}
