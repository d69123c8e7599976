package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// cliDaemon runs a daemon on a small tmpfs with one site, for the command-line tests.
func cliDaemon(t *testing.T) (sock, mnt string) {
	t.Helper()
	mnt = testenv.Tmpfs(t, 16<<20, 0)
	os.Mkdir(filepath.Join(mnt, "site"), 0o755)
	_, sock, _ = serveDaemon(t, t.TempDir(), fmt.Sprintf(`[[site]]
name = "aura-bg"
path = %q
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
`, filepath.Join(mnt, "site"), mnt))
	return sock, mnt
}

// TestGlobalFlagPositions: global flags stand before or after the command (and between a
// command and its subcommand), as --flag value or --flag=value, with the same result.
func TestGlobalFlagPositions(t *testing.T) {
	sock, mnt := cliDaemon(t)
	S := sock
	rows := []struct {
		args     []string
		wantJSON string // a key the JSON answer must have; "" = text output naming the tmpfs
	}{
		{[]string{"--socket", S, "status"}, ""},
		{[]string{"--socket=" + S, "status"}, ""},
		{[]string{"status", "--socket", S}, ""},
		{[]string{"status", "--socket=" + S}, ""},
		{[]string{"-socket", S, "status"}, ""},
		{[]string{"--json", "--socket", S, "status"}, "filesystems"},
		{[]string{"--socket", S, "--json", "status"}, "filesystems"},
		{[]string{"--socket", S, "status", "--json"}, "filesystems"},
		{[]string{"status", "--json=true", "--socket=" + S}, "filesystems"},
		{[]string{"--timeout", "5s", "status", "--socket", S}, ""},
		{[]string{"status", "--timeout=5s", "--socket", S}, ""},
		{[]string{"--json", "launch", "--socket=" + S, "--need-bytes=1KiB"}, "ok"},
		{[]string{"launch", "--need-bytes", "1KiB", "--socket", S, "--json"}, "ok"},
		{[]string{"--socket", S, "config", "show"}, ""},
		{[]string{"config", "--socket", S, "show"}, ""},
		{[]string{"config", "show", "--socket=" + S, "--json"}, "toml"},
		{[]string{"events", "--since=0", "--socket", S}, ""},
		{[]string{"--json", "reclaim", "--dry-run", "--socket", S}, "verdict"},
		{[]string{"--socket", S, "check", "--json"}, "line"},
	}
	for _, row := range rows {
		r := sandboxd(t, []string{"SANDBOXD_SOCKET=/nonexistent/sock"}, row.args...)
		if r.code != 0 {
			t.Errorf("sandboxd %s: exit %d\n%s", strings.Join(row.args, " "), r.code, r.stderr)
			continue
		}
		if row.wantJSON == "" {
			if strings.HasPrefix(strings.TrimSpace(r.stdout), "{") {
				t.Errorf("sandboxd %s: printed JSON without --json:\n%s", strings.Join(row.args, " "), r.stdout)
			}
			if row.args[len(row.args)-1] == "status" || strings.Contains(strings.Join(row.args, " "), "status --") {
				if !strings.Contains(r.stdout, mnt) {
					t.Errorf("sandboxd %s: status does not show %s:\n%s", strings.Join(row.args, " "), mnt, r.stdout)
				}
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Errorf("sandboxd %s: not JSON: %v\n%s", strings.Join(row.args, " "), err, r.stdout)
			continue
		}
		if _, ok := m[row.wantJSON]; !ok {
			t.Errorf("sandboxd %s: JSON lacks %q:\n%s", strings.Join(row.args, " "), row.wantJSON, r.stdout)
		}
	}
}

// TestUsageErrorsExit64: every usage error exits 64 with a message naming what is wrong
// and no daemon is needed to say so.
func TestUsageErrorsExit64(t *testing.T) {
	rows := []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, "sandboxd status"}, // did you mean
		{[]string{"lanch", "--json"}, "sandboxd launch"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"config", "chek", "x.toml"}, "sandboxd config check"},
		{[]string{"status", "--sokcet", "/x"}, "did you mean --socket"},
		{[]string{"status", "--bogus"}, "unknown flag --bogus"},
		{[]string{"--bogus", "status"}, "unknown flag --bogus"},
		{[]string{"--need-bytes", "1MiB", "launch"}, "it is a flag of sandboxd launch, sandboxd run; put it after the command"},
		{[]string{"status", "--socket"}, "--socket needs a value"},
		{[]string{"status", "--timeout", "-1s"}, "negative"},
		{[]string{"--timeout=-1s", "events"}, "negative"},
		{[]string{"status", "--timeout", "soon"}, "want a duration"},
		{[]string{"status", "extra"}, `unexpected argument "extra"`},
		{[]string{"config", "check", "a.toml", "b.toml"}, `unexpected argument "b.toml"`},
		{[]string{"launch", "--need-bytes", "lots"}, "--need-bytes"},
		{[]string{"launch", "--need-inodes", "-3"}, "want a whole number"},
		{[]string{"reclaim", "--target-free", "much"}, "--target-free"},
		{[]string{"version", "--socket", "/x"}, "unknown flag --socket"},
		{[]string{"help", "stauts"}, "sandboxd status"},
	}
	for _, row := range rows {
		r := sandboxd(t, nil, row.args...)
		if r.code != 64 || !strings.Contains(r.stderr, row.want) {
			t.Errorf("sandboxd %s: exit %d, stderr %q; want 64 and %q", strings.Join(row.args, " "), r.code, r.stderr, row.want)
		}
		if r.stdout != "" {
			t.Errorf("sandboxd %s: a usage error printed on stdout: %q", strings.Join(row.args, " "), r.stdout)
		}
	}
}

// TestHelpForEveryCommand: `help CMD...` and `CMD... --help` (and -h) print the same help
// on stdout and exit 0, for every command and subcommand of the table; bare `sandboxd`
// and `sandboxd --help` list every command and exit 0 without starting a daemon.
func TestHelpForEveryCommand(t *testing.T) {
	for _, args := range [][]string{{}, {"--help"}, {"-h"}, {"help"}} {
		r := sandboxd(t, []string{"SANDBOXD_SOCKET=/nonexistent/sock"}, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: sandboxd COMMAND") {
			t.Fatalf("sandboxd %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		for _, c := range commands() {
			if !c.hidden && !strings.Contains(r.stdout, "\n  "+c.name+" ") {
				t.Errorf("sandboxd %v: help does not list %s:\n%s", args, c.name, r.stdout)
			}
		}
		// A daemon would log its start on stderr (and not exit by itself): help says nothing there.
		if r.stderr != "" {
			t.Errorf("sandboxd %v wrote on stderr: is it running a daemon?\n%s", args, r.stderr)
		}
	}
	var walk func(path []string, c *command)
	walk = func(path []string, c *command) {
		want := "Usage: sandboxd " + strings.Join(path, " ")
		h := sandboxd(t, nil, append([]string{"help"}, path...)...)
		if h.code != 0 || !strings.HasPrefix(h.stdout, want) {
			t.Errorf("sandboxd help %s: exit %d\n%s%s", strings.Join(path, " "), h.code, h.stdout, h.stderr)
		}
		if r := sandboxd(t, nil, append([]string{"--help"}, path...)...); r.code != 0 || r.stdout != h.stdout {
			t.Errorf("sandboxd --help %s: exit %d, differs from help:\n%s", strings.Join(path, " "), r.code, r.stdout)
		}
		for _, flag := range []string{"--help", "-h", "-help"} {
			r := sandboxd(t, nil, append(append([]string{}, path...), flag)...)
			if r.code != 0 || r.stdout != h.stdout {
				t.Errorf("sandboxd %s %s: exit %d, differs from help:\n%s\n---\n%s", strings.Join(path, " "), flag, r.code, r.stdout, h.stdout)
			}
		}
		for _, s := range c.subs {
			walk(append(append([]string{}, path...), s.name), s)
		}
	}
	for _, c := range commands() {
		walk([]string{c.name}, c)
	}
}

// TestVersionForms: --version, -v and `version` print the version; version --json is JSON.
func TestVersionForms(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		r := sandboxd(t, nil, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "sandboxd ") || !strings.Contains(r.stdout, "go1.") {
			t.Errorf("sandboxd %v: exit %d %q", args, r.code, r.stdout)
		}
	}
	for _, args := range [][]string{{"version", "--json"}, {"--json", "version"}, {"--json", "--version"}} {
		r := sandboxd(t, nil, args...)
		var v map[string]string
		if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil || !strings.HasPrefix(v["go"], "go1.") || v["version"] == "" {
			t.Errorf("sandboxd %v: exit %d, %v: %q", args, r.code, err, r.stdout)
		}
	}
}

// TestConfigFlagPositions: --config, before or after serve or config check, as --config F
// or --config=F, names the file read (a missing one is exit 78 naming it; no daemon runs).
func TestConfigFlagPositions(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, args := range [][]string{
		{"--config", missing, "serve"},
		{"--config=" + missing, "serve"},
		{"serve", "--config", missing},
		{"serve", "--config=" + missing},
		{"--config", missing, "config", "check"},
		{"config", "--config=" + missing, "check"},
		{"config", "check", "--config", missing},
		{"config", "check", missing},
	} {
		r := sandboxd(t, nil, args...)
		if r.code != 78 || !strings.Contains(r.stderr, missing) {
			t.Errorf("sandboxd %s: exit %d, stderr %q; want 78 naming the file", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	good := filepath.Join(t.TempDir(), "good.toml")
	os.WriteFile(good, []byte(sandboxd(t, nil, "config", "default").stdout), 0o644)
	r := sandboxd(t, nil, "--json", "--config", good, "config", "check")
	var v struct {
		File     string
		OK       bool
		Problems []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil || !v.OK || v.File != good || v.Problems == nil {
		t.Errorf("config check --json of the default: exit %d %v %s", r.code, err, r.stdout)
	}
	if r := sandboxd(t, nil, "config", "check", "--config", good, missing); r.code != 64 {
		t.Errorf("config check with FILE and a different --config: exit %d, want 64", r.code)
	}
}
