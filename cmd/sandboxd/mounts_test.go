package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestMountsCommands: a shell runner registers a session's mount, sees it in `mounts list`
// and `status` with its job-less origin and credential expiry, pushes a renewed expiry,
// and releases it; a name in use exits 65, an unknown mount 78.
func TestMountsCommands(t *testing.T) {
	testenv.RequireRoot(t)
	sock, _ := cliDaemon(t)
	dir := filepath.Join(t.TempDir(), "s17-agent")
	os.Mkdir(dir, 0o755)
	link := filepath.Join(t.TempDir(), "agent-files")
	r := sandboxd(t, nil, "mounts", "add", "agent-s17", dir, "--socket", sock, "--optional", "--expires-at", "2099-01-01T00:00:00Z",
		"--refresh-command", "echo '{\"Expiration\":\"2099-01-01T00:00:00Z\"}'", "--link", link+"="+dir)
	if r.code != 0 || !strings.Contains(r.stdout, "agent-s17") || !strings.Contains(r.stdout, "registered") {
		t.Fatalf("mounts add: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, nil, "mounts", "add", "agent-s17", dir, "--socket", sock); r.code != 65 {
		t.Errorf("a second add of the name: %d %s, want 65 (conflict)", r.code, r.stderr)
	}
	r = sandboxd(t, nil, "mounts", "--socket", sock, "--json")
	var l api.MountList
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || l.Registered != 1 || len(l.Mounts) != 1 ||
		l.Mounts[0].CredentialExpiresAt == nil || l.Mounts[0].Required {
		t.Fatalf("mounts list --json: %d %s", r.code, r.stdout)
	}
	// Without --optional a registered mount is still not required (docs/api.md §12); --required asks.
	for _, c := range []struct {
		name string
		args []string
		want bool
	}{{"agent-s18", nil, false}, {"agent-s19", []string{"--required"}, true}} {
		d := filepath.Join(t.TempDir(), c.name)
		os.Mkdir(d, 0o755)
		r := sandboxd(t, nil, append([]string{"mounts", "add", c.name, d, "--socket", sock, "--json"}, c.args...)...)
		var m api.Mount
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil || m.Required != c.want {
			t.Errorf("mounts add %s %v: %d %s %s, want required %v", c.name, c.args, r.code, r.stdout, r.stderr, c.want)
		}
		if r := sandboxd(t, nil, "mounts", "rm", c.name, "--socket", sock); r.code != 0 {
			t.Errorf("mounts rm %s: %d %s", c.name, r.code, r.stderr)
		}
	}
	if r := sandboxd(t, nil, "mounts", "add", "both", dir, "--socket", sock, "--required", "--optional"); r.code != 64 {
		t.Errorf("--required --optional: %d %s, want 64", r.code, r.stderr)
	}
	if r := sandboxd(t, nil, "status", "--socket", sock); !strings.Contains(r.stdout, "agent-s17") || !strings.Contains(r.stdout, "credential expires") {
		t.Errorf("status does not list the registered mount with its expiry:\n%s", r.stdout)
	}
	r = sandboxd(t, nil, "mounts", "push", "agent-s17", "--expires-at", "2099-06-01T00:00:00Z", "--socket", sock, "--json")
	var m api.Mount
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil || m.CredentialExpiresAt == nil ||
		m.CredentialExpiresAt.UTC().Format(time.RFC3339) != "2099-06-01T00:00:00Z" {
		t.Errorf("mounts push: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, nil, "mounts", "push", "nope", "--expires-in", "1h", "--socket", sock); r.code != 78 {
		t.Errorf("push to an unknown mount: %d, want 78", r.code)
	}
	if r := sandboxd(t, nil, "launch", "--mount", "nope", "--socket", sock); r.code != 78 || !strings.Contains(r.stderr, "nope") {
		t.Errorf("launch naming an unknown mount: %d %s, want 78 naming it", r.code, r.stderr)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	// run's own refusals exit 125 since issue 20 item 5 (launch keeps 78), the code on stderr.
	if r := sandboxd(t, nil, "run", "--mount", "nope", "--socket", sock, "--", "touch", marker); r.code != 125 || !strings.Contains(r.stderr, "nope") || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("run --mount naming an unknown mount: %d %s, want 125 naming it", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("run started the command although its mount is unknown")
	}
	r = sandboxd(t, nil, "mounts", "rm", "agent-s17", "--socket", sock)
	// dir is a bare directory (state missing): the release says so, not "left mounted".
	if r.code != 0 || !strings.Contains(r.stdout, "released agent-s17; nothing was mounted there") {
		t.Errorf("mounts rm: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, nil, "mounts", "rm", "agent-s17", "--socket", sock); r.code != 78 {
		t.Errorf("rm of a released mount: %d, want 78", r.code)
	}
	if r := sandboxd(t, nil, "mounts", "add", "x", "relative", "--socket", sock); r.code != 64 {
		t.Errorf("add with a relative path: %d %s, want 64", r.code, r.stderr)
	}
}

// `mounts add` takes the API's knobs (issue 23 item 5): each reaches the daemon, which
// checks it and names the field of a bad value; a good set registers, and status names
// the mount's recovery.
func TestMountsAddTakesTheAPIKnobs(t *testing.T) {
	testenv.RequireRoot(t)
	sock, _ := cliDaemon(t)
	dir := filepath.Join(t.TempDir(), "knobs")
	os.Mkdir(dir, 0o755)
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"--probe-timeout", "0s"}, "probe_timeout"},
		{[]string{"--refresh-at", "1.5"}, "refresh_at"},
		{[]string{"--max-remounts-per-hour", "-1"}, "max_remounts_per_hour"},
		{[]string{"--remount-timeout", "0s"}, "remount_timeout"},
		{[]string{"--canary", "--no-canary"}, "--canary or --no-canary"},
	} {
		r := sandboxd(t, nil, append([]string{"mounts", "add", "knobs", dir, "--socket", sock}, c.args...)...)
		if r.code != 64 || !strings.Contains(r.stderr, c.field) {
			t.Errorf("mounts add %v: %d %s, want 64 naming %s", c.args, r.code, r.stderr, c.field)
		}
	}
	r := sandboxd(t, nil, "mounts", "add", "knobs", dir, "--socket", sock, "--probe-timeout", "3s", "--refresh-at", "0.5",
		"--max-remounts-per-hour", "2", "--remount-timeout", "90s", "--canary", "--remount-command", "true")
	if r.code != 0 {
		t.Fatalf("mounts add with every knob: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, nil, "mounts", "--socket", sock); !strings.Contains(r.stdout, "recovery: remount_command") {
		t.Errorf("mounts list does not name the recovery:\n%s", r.stdout)
	}
	sandboxd(t, nil, "mounts", "rm", "knobs", "--socket", sock)
}
