package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestHungMountSeenDespiteNonRootRegistrant (issue 21 item 5): with uid 65534's mount
// registered (its credential file read as 65534 at every step, so runas.AsFS ends OS
// threads all the time), a configured mount that hangs is still seen hung within its
// probe_timeout plus one probe_interval (here with 15 s of slack for a loaded machine; the
// bug took 26–51 s), and no probe gives "no result" because its server was killed.
func TestHungMountSeenDespiteNonRootRegistrant(t *testing.T) {
	testenv.RequireRoot(t)
	const interval, timeout = 200 * time.Millisecond, time.Second
	base, err := os.MkdirTemp("", "sandboxd-probes-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	probe := filepath.Join(base, "probe.test")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(probe, b, 0o755) != nil {
		t.Fatalf("copy test binary: %v", err)
	}
	mnt := mountDir(t, "cfg-agent")
	srv := fusetest.Start(t, mnt, fusetest.Options{})
	logs := &testenv.SyncBuffer{}
	body := noSites(t.TempDir()) + mountSpec{name: "cfg-agent", path: mnt, interval: interval, timeout: timeout, canary: true}.toml()
	td := startDaemon(t, body, func(o *Options) {
		o.ProbeCommand = []string{probe, "mount-probe"}
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	td.d.cfgMu.Lock()
	td.d.writersV = Writers{UIDs: []uint32{attacker}}
	td.d.cfgMu.Unlock()

	own := filepath.Join(base, "own")
	os.Mkdir(own, 0o755)
	os.Chown(own, attacker, attacker)
	cred := filepath.Join(own, "cred.json")
	fusetest.WriteCred(cred, time.Now().Add(time.Hour))
	os.Chown(cred, attacker, attacker)
	req := fastReg("nobody-agent", own)
	req.CredentialFile = cred
	b, _ := jsonString(req)
	if code, answer := requestAs(t, td, attacker, attacker, nil, "POST", "/v1/mounts", b); code != 201 {
		t.Fatalf("65534 registers: %d %s", code, answer)
	}
	first := td.waitMountState(t, "cfg-agent", api.MountHealthy).LastProbeAt
	poll(t, time.Minute, "ten more probe rounds of both mounts", func() bool {
		m, n := td.mount(t, "cfg-agent"), td.mount(t, "nobody-agent")
		return m.LastProbeAt.Sub(*first) > 10*interval && n.LastProbeAt != nil
	})
	srv.Hang()
	hungAt := time.Now()
	var hung []api.Event
	poll(t, 60*time.Second, "the hung event", func() bool {
		hung = td.eventsWith(t, api.EventMountProbe, "is hung")
		return len(hung) > 0
	})
	// The bound tells the fix from the bug (26-51 s), not a fast machine from a slow one:
	// its slack is what a loaded 2-core CI machine may add to a probe round.
	if took, limit := hung[0].Time.Sub(hungAt), timeout+interval+15*time.Second; took > limit {
		t.Errorf("the hang was seen after %s, want within probe_timeout %s + probe_interval %s (+15s slack; the bug took 26-51 s)", took, timeout, interval)
	} else {
		t.Logf("hang seen after %s (probe_timeout %s, probe_interval %s)", took, timeout, interval)
	}
	if n := strings.Count(logs.String(), "gave no result"); n > 0 {
		t.Errorf("%d probes gave no result (their probe server was killed):\n%s", n, logs.String())
	}
}
