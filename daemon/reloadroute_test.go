package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestConfigReloadRoute: POST /v1/config/reload answers with the reload's verdict, so
// `systemctl reload` (ExecReload = `sandboxd config reload`) can fail on a rejected file:
// a valid file is taken; an invalid one is rejected with every problem named, the last
// good config stays in force, and the metric says so.
func TestConfigReloadRoute(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	os.Mkdir(site, 0o755)
	td := startDaemon(t, "[[site]]\nname = \"s\"\npath = \""+site+"\"\nmax_age = \"1h\"\n[[filesystem]]\npath = \""+dir+"\"\nreserve = \"0\"\n")
	cfgPath := filepath.Join(td.dir, "sandboxd.toml")
	reload := func() api.ConfigReload {
		t.Helper()
		status, _, body := td.do(t, "POST", "/v1/config/reload", "")
		var res api.ConfigReload
		if status != 200 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("POST /v1/config/reload: %d %s", status, body)
		}
		return res
	}
	text, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, []byte(strings.Replace(string(text), `max_age = "1h"`, `max_age = "2h"`, 1)), 0o644)
	if res := reload(); !res.Reloaded || len(res.Problems) != 0 || res.File != cfgPath {
		t.Fatalf("a valid file: %+v", res)
	}
	_, _, shown := td.do(t, "GET", "/v1/config", "")
	if !strings.Contains(shown, `max_age = \"2h0m0s\"`) && !strings.Contains(shown, `max_age = \"2h\"`) {
		t.Errorf("the reloaded value is not in force: %s", shown)
	}

	os.WriteFile(cfgPath, []byte(strings.Replace(string(text), `max_age = "1h"`, "max_age = \"1h\"\nno_such_key = 1", 1)), 0o644)
	res := reload()
	if res.Reloaded || len(res.Problems) == 0 || !strings.Contains(strings.Join(res.Problems, "\n"), "no_such_key") {
		t.Fatalf("an invalid file: %+v; want rejected with the unknown key named", res)
	}
	_, _, after := td.do(t, "GET", "/v1/config", "")
	if after != shown {
		t.Errorf("a rejected reload changed the config in force:\n%s\nwas\n%s", after, shown)
	}
	_, _, metrics := td.do(t, "GET", "/metrics", "")
	if !strings.Contains(metrics, "sandboxd_config_last_reload_successful 0") {
		t.Error("sandboxd_config_last_reload_successful is not 0 after the rejection")
	}
}
