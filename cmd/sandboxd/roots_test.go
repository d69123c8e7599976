package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `sandboxd config check` refuses a root inside a system directory with exit 78, naming
// the key, the line and the rule; /usr/local/cache and a user's scratch dir are fine.
func TestConfigCheckRefusesRootsInsideSystemDirs(t *testing.T) {
	bad := `version = 1
[reclaim]
protect = []
[[site]]
name = "bin"
path = "/usr/bin"
[[site]]
name = "home"
path = "/home/ci"
[[reclaim.cache]]
name = "log"
path = "/var/log/journal"
[[reclaim.cache]]
name = "shm"
path = "/dev/shm/.."
`
	f := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(f, []byte(bad), 0o644)
	r := sandboxd(t, nil, "config", "check", f)
	if r.code != 78 {
		t.Fatalf("exit %d, want 78; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		`:6: site[0].path: site root "/usr/bin" lies inside /usr: a system directory`,
		`:9: site[1].path: site root "/home/ci" is a user's home directory: only a directory beneath it may be a root`,
		`:12: reclaim.cache[0].path: cache root "/var/log/journal" lies inside /var/log: a system directory`,
		`:15: reclaim.cache[1].path: cache root "/dev" is /dev: a system directory`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check output lacks %q:\n%s", want, r.stderr)
		}
	}

	good := `version = 1
[[site]]
name = "ci"
path = "/run/user/1000/ci"
[[reclaim.cache]]
name = "local"
path = "/usr/local/cache"
[[reclaim.cache]]
name = "shm"
path = "/dev/shm/ci-cache"
`
	os.WriteFile(f, []byte(good), 0o644)
	if r := sandboxd(t, nil, "config", "check", f); r.code != 0 {
		t.Fatalf("exit %d for allowed roots, want 0; stderr:\n%s", r.code, r.stderr)
	}
}
