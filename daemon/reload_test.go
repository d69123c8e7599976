package daemon

import (
	"context"
	"github.com/sandboxd/sandboxd/api"
	"os"
	"strings"
	"testing"
)

// TestReload: a broken file is rejected with its reasons and the last good config stays;
// a good one is applied.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	td := startDaemon(t, noSites(dir))
	cfgPath := td.d.opts.ConfigPath
	good, _ := os.ReadFile(cfgPath)

	broken := strings.Replace(string(good), "[server]", "[server]\nbogus_key = 1", 1)
	broken = strings.Replace(broken, `sample_interval = "100ms"`, `sample_interval = "-1s"`, 1)
	os.WriteFile(cfgPath, []byte(broken), 0o644)
	err := td.d.Reload()
	if err == nil || !strings.Contains(err.Error(), "bogus_key") || !strings.Contains(err.Error(), "sample_interval") {
		t.Fatalf("broken reload: err = %v, want both problems named", err)
	}
	if ok, _ := td.d.reloads.get(); ok {
		t.Error("config_last_reload_successful still 1 after a rejected reload")
	}
	if td.d.config().Health.SampleInterval.String() != "100ms" {
		t.Error("the last good config did not stay")
	}
	page, _ := td.client.Events(context.Background(), 0)
	if !hasEvent(page.Events, "config", "rejected") {
		t.Error("no config event says the reload was rejected")
	}

	next := strings.Replace(string(good), `mode = "enforce"`, "", 1)
	next = strings.Replace(next, "[server]", "[server]\nmode = \"observe\"\nwriters = [\"gid:4242\"]", 1)
	os.WriteFile(cfgPath, []byte(next), 0o644)
	if err := td.d.Reload(); err != nil {
		t.Fatalf("good reload: %v", err)
	}
	if !td.d.observe() || len(td.d.writers().GIDs) != 1 {
		t.Fatalf("good reload not applied: mode %s writers %+v", td.d.config().Server.Mode, td.d.writers())
	}
	td.waitReady(t)
	st, err := td.client.Status(context.Background())
	if err != nil || st.Mode != "observe" || len(st.Filesystems) != 1 {
		t.Fatalf("status after reload: %+v %v", st, err)
	}
}

func hasEvent(events []api.Event, kind, substr string) bool {
	for _, e := range events {
		if e.Kind == kind && strings.Contains(e.Message, substr) {
			return true
		}
	}
	return false
}
