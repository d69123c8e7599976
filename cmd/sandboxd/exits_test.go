package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// exitsDaemon runs a daemon with two sites, a declared cache and a required mount that
// is not mounted, on a 16 MiB tmpfs.
func exitsDaemon(t *testing.T) (sock, mnt string) {
	t.Helper()
	mnt = testenv.Tmpfs(t, 16<<20, 0)
	for _, d := range []string{"a", "b", "cache", "tool"} {
		os.Mkdir(filepath.Join(mnt, d), 0o755)
	}
	_, sock, _ = serveDaemon(t, openTempDir(t), fmt.Sprintf(`[[site]]
name = "a"
path = %q
[[site]]
name = "b"
path = %q
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
[[mount]]
name = "gone"
path = %q
required = false
[[reclaim.cache]]
name = "pkgs"
path = %q
[[reclaim.cache]]
name = "broken-tool"
path = %q
command = ["/bin/false"]
`, filepath.Join(mnt, "a"), filepath.Join(mnt, "b"), mnt, filepath.Join(mnt, "nomount"), filepath.Join(mnt, "cache"),
		filepath.Join(mnt, "tool")))
	return sock, mnt
}

// openTempDir is a temporary directory that other uids may traverse (t.TempDir's
// parent is 0700), removed at cleanup.
func openTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sandboxd-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// TestExitStatusPerRow runs the binary for each row of CONTRACT §3 the command line can
// reach and each row of §9, against a real daemon, and checks the exit status and what
// the command says.
func TestExitStatusPerRow(t *testing.T) {
	sock, mnt := exitsDaemon(t)
	env := []string{"SANDBOXD_SOCKET=" + sock}
	// Files the rows must leave alone: a site's fresh job file, and a cache entry old
	// enough to be reclaimed — a need no reclaim can meet deletes nothing (CONTRACT §6).
	kept := []string{filepath.Join(mnt, "b", "j1.out"), filepath.Join(mnt, "cache", "pkg.tgz")}
	for _, f := range kept {
		testenv.Fill(f, 64<<10)
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(kept[1], old, old)
	rows := []struct {
		name   string
		args   []string
		code   int
		stderr string // a substring of stderr ("" = anything)
	}{
		{"§9 status", []string{"status"}, 0, ""},
		{"§9 launch ok", []string{"launch", "--site", "a", "--need-bytes", "1KiB"}, 0, ""},
		{"§3 bad_request (two sites, none named)", []string{"launch"}, 64, "bad_request"},
		{"§3 not_found (unknown site)", []string{"launch", "--site", "nope"}, 78, "not_found"},
		{"§3 not_found (unknown mount)", []string{"launch", "--site", "a", "--mount", "nope"}, 78, "not_found"},
		{"§3 mount_unavailable", []string{"launch", "--site", "a", "--mount", "gone"}, 75, "mount_unavailable"},
		{"§3 disk_full (need above the disk; deletes nothing)", []string{"launch", "--site", "b", "--need-bytes", "1TiB"}, 73, "disk_full"},
		{"§3 inodes_exhausted", []string{"launch", "--site", "b", "--need-inodes", "99999999999"}, 73, "inodes_exhausted"},
		{"§9 resume healthy (the refusals above left nothing to heal)", []string{"resume"}, 0, ""},
		{"§9 reclaim dry run", []string{"reclaim", "--dry-run"}, 0, ""},
		{"§9 events", []string{"events"}, 0, ""},
		{"§9 events --follow ends at its --timeout", []string{"events", "--follow", "--timeout", "1s"}, 0, ""},
		{"§9 check WARNING (a mount that is not required is missing; no ReplaceRecommended from the refusals)", []string{"check"}, 1, ""},
		{"§9 config show", []string{"config", "show"}, 0, ""},
		{"§9 config default", []string{"config", "default"}, 0, ""},
		{"§9 config check of a missing file", []string{"config", "check", filepath.Join(mnt, "none.toml")}, 78, "no such file"},
		{"§9 version", []string{"version"}, 0, ""},
		{"§9 a usage error", []string{"launch", "--need-bytes"}, 64, "needs a value"},
	}
	for _, row := range rows {
		r := sandboxd(t, env, row.args...)
		if r.code != row.code || !strings.Contains(r.stderr, row.stderr) {
			t.Errorf("%s: sandboxd %s: exit %d (want %d), stderr %q (want %q)", row.name, strings.Join(row.args, " "),
				r.code, row.code, r.stderr, row.stderr)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s is gone after the rows (a refusal or a dry run deleted it): %v", f, err)
		}
	}

	// A disk full of user data: reclaim climbs the ladder, the broken tool's gc command
	// fails (exit 1), and resume answers replace (exit 10); check is CRITICAL (2).
	testenv.Fill(filepath.Join(mnt, "userdata"), 1<<30)
	for _, row := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"reclaim"}, 1, "failed    command"},
		{[]string{"resume"}, 10, "verdict: replace"},
		{[]string{"check"}, 2, "SANDBOXD CRITICAL"},
	} {
		r := sandboxd(t, env, row.args...)
		if r.code != row.code || !strings.Contains(r.stdout, row.out) {
			t.Errorf("full disk: sandboxd %s: exit %d (want %d)\n%s%s", strings.Join(row.args, " "), r.code, row.code, r.stdout, r.stderr)
		}
	}
}

// TestForbiddenAndReaderDryRun: a uid that is not a writer gets 77 for a real reclaim
// and a launch, and may run `reclaim --dry-run` (exit 0).
func TestForbiddenAndReaderDryRun(t *testing.T) {
	testenv.RequireRoot(t)
	sock, _ := exitsDaemon(t)
	os.Chmod(sock, 0o666)
	// The test binary's build dir is 0700: copy sandboxd where uid 65534 can run it.
	bin := filepath.Join(openTempDir(t), "sandboxd")
	if b, err := os.ReadFile(binary); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy sandboxd: %v", err)
	}
	as := func(args ...string) result {
		cmd := exec.Command(bin, append([]string{"--socket", sock}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{code, out.String(), errb.String()}
	}
	if r := as("reclaim"); r.code != 77 || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("reclaim as 65534: exit %d %q, want 77 forbidden", r.code, r.stderr)
	}
	if r := as("launch", "--site", "a"); r.code != 77 {
		t.Errorf("launch as 65534: exit %d %q, want 77", r.code, r.stderr)
	}
	if r := as("reclaim", "--dry-run"); r.code != 0 || !strings.Contains(r.stdout, "verdict") {
		t.Errorf("reclaim --dry-run as 65534: exit %d %q %q, want 0 and the plan", r.code, r.stdout, r.stderr)
	}
	os.Chmod(sock, 0o660)
	if r := as("status"); r.code != 69 || !strings.Contains(r.stderr, "permission denied on the socket") {
		t.Errorf("status as 65534 on a 0660 socket: exit %d %q, want 69 permission denied", r.code, r.stderr)
	}
}

// TestClientLimitsAreNotUnreachable: a daemon that takes the connection but does not
// answer within --timeout is "no answer within --timeout", not "not reachable"; a socket
// path that is a directory says so; check --json is JSON also when the daemon is down.
func TestClientLimitsAreNotUnreachable(t *testing.T) {
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow.sock")
	ln, err := net.Listen("unix", slow)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { close(release); srv.Close() })

	r := sandboxd(t, nil, "launch", "--socket", slow, "--timeout", "200ms")
	if r.code != 69 || !strings.Contains(r.stderr, "no answer from sandboxd at "+slow+" within --timeout 200ms") ||
		strings.Contains(r.stderr, "not reachable") || !strings.Contains(r.stderr, "measured by the client") {
		t.Errorf("launch --timeout 200ms on a daemon that does not answer: exit %d\n%s", r.code, r.stderr)
	}
	r = sandboxd(t, nil, "launch", "--socket", slow, "--timeout", "200ms", "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m["error"] != "timeout" || m["disk"] == nil {
		t.Errorf("launch --json on a timeout: %v %s", err, r.stdout)
	}
	// --follow ends at its --timeout with 0, even though the daemon never answers a poll.
	if r := sandboxd(t, nil, "events", "--follow", "--socket", slow, "--timeout", "300ms"); r.code != 0 {
		t.Errorf("events --follow --timeout 300ms: exit %d %s", r.code, r.stderr)
	}

	r = sandboxd(t, []string{"SANDBOXD_SOCKET=" + dir}, "status")
	if r.code != 69 || !strings.Contains(r.stderr, "is a directory, not a socket") || strings.Contains(r.stderr, "refused") {
		t.Errorf("SANDBOXD_SOCKET=<a directory>: exit %d %s", r.code, r.stderr)
	}

	r = sandboxd(t, nil, "check", "--json", "--socket", filepath.Join(dir, "none.sock"))
	var c struct {
		Status int
		State  string
		Line   string
		Disk   map[string]any
	}
	if err := json.Unmarshal([]byte(r.stdout), &c); r.code != 3 || err != nil || c.Status != 3 || c.State != "UNKNOWN" ||
		!strings.HasPrefix(c.Line, "SANDBOXD UNKNOWN") || c.Disk == nil {
		t.Errorf("check --json with the daemon down: exit %d, %v\n%s", r.code, err, r.stdout)
	}
}

// TestEventsJSONLines: `events --json` is one JSON object per line, as a pipe into
// python's json.loads line by line (the issue's own check) accepts.
func TestEventsJSONLines(t *testing.T) {
	testenv.RequireCommand(t, "python3")
	sock, _ := cliDaemon(t)
	cmd := exec.Command("bash", "-c", binary+` events --json | python3 -c 'import sys,json; n=[json.loads(l) for l in sys.stdin]; assert len(n) >= 1, n; print(len(n))'`)
	cmd.Env = append(os.Environ(), "SANDBOXD_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("events --json | python3 json.loads per line: %v\n%s", err, out)
	}
}

// TestStatusShowsCaches: the cache roots of /v1/status are in the person's view.
func TestStatusShowsCaches(t *testing.T) {
	sock, mnt := exitsDaemon(t)
	// The cache list is the reclaimer's first discovery, made in the background right
	// after start; a person running status a moment later sees it.
	var r result
	testenv.Eventually(t, time.Minute, "status to list the caches", func() bool {
		r = sandboxd(t, nil, "status", "--socket", sock)
		return strings.Contains(r.stdout, "CACHES")
	})
	if r.code != 0 || !strings.Contains(r.stdout, "CACHES") || !strings.Contains(r.stdout, "pkgs") ||
		!strings.Contains(r.stdout, filepath.Join(mnt, "cache")) || !strings.Contains(r.stdout, "declared") {
		t.Fatalf("status does not show the declared cache:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "oldest 0s") {
		t.Errorf("an empty site shows an age:\n%s", r.stdout)
	}
}
