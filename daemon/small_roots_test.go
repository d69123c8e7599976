package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestNoPathOracleAndCleanCommands (issue 21 item 7): uid 65534 learns nothing of a
// directory it cannot search (a symlink inside it and a missing path answer alike, and
// the symlink's target is never named); the refresh_command of its mount runs with a
// clean environment (no variable of the daemon's beyond the allow-list) and the default
// oom_score_adj, not the daemon's.
func TestNoPathOracleAndCleanCommands(t *testing.T) {
	f := newRegistrantFixture(t)
	secret := filepath.Join(f.base, "secret")
	os.Mkdir(secret, 0o700)
	os.Symlink("/etc/hidden-target", filepath.Join(secret, "lnk"))
	link := fmt.Sprintf(`{"name": "o1", "path": %q}`, filepath.Join(secret, "lnk"))
	missing := fmt.Sprintf(`{"name": "o2", "path": %q}`, filepath.Join(secret, "missing"))
	c1, a1 := requestAs(t, f.td, attacker, attacker, nil, "POST", "/v1/mounts", link)
	c2, a2 := requestAs(t, f.td, attacker, attacker, nil, "POST", "/v1/mounts", missing)
	if c1 != c2 || strings.Contains(a1, "hidden-target") || strings.Contains(a1, "symlink") {
		t.Errorf("a symlink and a missing path in a directory 65534 cannot search answer differently:\n%d %s\n%d %s", c1, a1, c2, a2)
	}

	// The daemon's environment and oom_score_adj (raised here: lowering it needs
	// CAP_SYS_RESOURCE, which a container may lack), which a caller's command must not get.
	t.Setenv("SANDBOXD_DAEMON_ONLY", "do-not-pass")
	old, _ := os.ReadFile("/proc/self/oom_score_adj")
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("300"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile("/proc/self/oom_score_adj", old, 0) })
	out := filepath.Join(f.own, "out")
	os.Mkdir(out, 0o755)
	os.Chown(out, attacker, attacker)
	soon := time.Now().Add(time.Second)
	req := fastReg("clean-env", dirOf(t, filepath.Join(f.own, "clean-env"), attacker))
	req.CredentialExpiresAt = &soon
	req.RefreshCommand = []string{"/bin/sh", "-c", fmt.Sprintf(`env > %s/env; cat /proc/self/oom_score_adj > %s/oom; echo '{"Expiration": "2099-01-01T00:00:00Z"}'`, out, out)}
	if code, body := f.registerAs(t, attacker, req); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	poll(t, time.Minute, "the refresh", func() bool {
		return len(f.td.eventsWith(t, api.EventCredential, "credentials refreshed")) > 0
	})
	env, _ := os.ReadFile(filepath.Join(out, "env"))
	oom, _ := os.ReadFile(filepath.Join(out, "oom"))
	if strings.Contains(string(env), "SANDBOXD_DAEMON_ONLY") || !strings.Contains(string(env), "PATH=/usr/local/sbin:") ||
		!strings.Contains(string(env), "LOGNAME=") {
		t.Errorf("the refresh_command's environment:\n%s", env)
	}
	if strings.TrimSpace(string(oom)) != "0" {
		t.Errorf("the refresh_command's oom_score_adj is %q, want 0 (the daemon's is 300)", oom)
	}
}
