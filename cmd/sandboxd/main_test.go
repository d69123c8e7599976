package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

var binary string

// TestMain builds the real sandboxd binary once; the tests run it as a user would.
func TestMain(m *testing.M) {
	if os.Getenv(spawnAttackEnv) != "" {
		os.Exit(spawnAttack())
	}
	dir, err := os.MkdirTemp("", "sandboxd-cmd-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sandboxd")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build sandboxd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func sandboxd(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run sandboxd %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

func TestConfigDefaultPassesCheck(t *testing.T) {
	r := sandboxd(t, nil, "config", "default")
	if r.code != 0 || !strings.Contains(r.stdout, "[[filesystem]]") {
		t.Fatalf("config default: %d %s", r.code, r.stderr)
	}
	f := filepath.Join(t.TempDir(), "d.toml")
	os.WriteFile(f, []byte(r.stdout), 0o644)
	if r := sandboxd(t, nil, "config", "check", f); r.code != 0 {
		t.Fatalf("config check of the default: %d %s", r.code, r.stderr)
	}
}

// TestConfigCheckNamesEveryProblem: a file with an unknown key, a bad size,
// replace_below above reclaim_below, a relative path, a non-loopback http and duplicate
// names prints every problem with its key and line and exits 78.
func TestConfigCheckNamesEveryProblem(t *testing.T) {
	bad := `version = 1
[server]
http = "0.0.0.0:9477"
colour = "blue"
[[filesystem]]
path = "/"
reclaim_below = "1GiB"
replace_below = "2GiB"
reserve = "lots"
[[site]]
name = "a"
path = "relative/dir"
[[site]]
name = "a"
path = "/tmp/x"
`
	f := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(f, []byte(bad), 0o644)
	r := sandboxd(t, nil, "config", "check", f)
	if r.code != 78 {
		t.Fatalf("exit %d, want 78; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{":3:", "server.http", ":4:", "colour", ":8:", "replace_below", ":9:", "reserve",
		":12:", "site[0].path", ":14:", "site[1].name"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check output lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	r := sandboxd(t, nil, "version")
	if r.code != 0 || !strings.Contains(r.stdout, "go1.") {
		t.Fatalf("version: %d %q", r.code, r.stdout)
	}
}

// TestUnreachableDaemonExits69WithOwnMeasurement: every client command without a daemon
// exits 69, says why plainly, and still prints the disk state it measured itself.
func TestUnreachableDaemonExits69WithOwnMeasurement(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"status"}, {"launch"}, {"resume"}, {"reclaim", "--dry-run"}, {"events"}} {
		r := sandboxd(t, []string{"SANDBOXD_SOCKET=" + sock}, args...)
		if r.code != 69 || !strings.Contains(r.stderr, "no socket") || !strings.Contains(r.stderr, "measured by the client") ||
			!strings.Contains(r.stderr, "free of") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	r := sandboxd(t, nil, "check", "--socket", sock)
	if r.code != 3 || !strings.HasPrefix(r.stdout, "SANDBOXD UNKNOWN") || !strings.Contains(r.stdout, "free of") {
		t.Errorf("check: exit %d %q, want 3 UNKNOWN with the disk state", r.code, r.stdout)
	}
}

// serveDaemon runs `sandboxd serve` with config text and waits for its socket; health
// lines go into its [health] table.
func serveDaemon(t *testing.T, dir, cfg string, health ...string) (*exec.Cmd, string, *testenv.SyncBuffer) {
	t.Helper()
	return serveDaemonIn(t, dir, cfg, "", nil, health...)
}

// serveDaemonIn is serveDaemon with more [server] lines and the daemon started through
// prefix (such as testenv.MemoryLimited's), exec'd so the pid stays the daemon's.
func serveDaemonIn(t *testing.T, dir, cfg, server string, prefix []string, health ...string) (*exec.Cmd, string, *testenv.SyncBuffer) {
	t.Helper()
	sock := filepath.Join(dir, "s.sock")
	full := cfg + fmt.Sprintf("\n[server]\n"+server+"\nsocket = %q\nstate_dir = %q\n[health]\nsample_interval = \"100ms\"\n%s\n[reclaim]\nauto_caches = []\n",
		sock, filepath.Join(dir, "state"), strings.Join(health, "\n"))
	path := filepath.Join(dir, "sandboxd.toml")
	os.WriteFile(path, []byte(full), 0o644)
	// Each daemon its own job registry, never the machine's /run/sandboxd.
	argv := append(append([]string{}, prefix...), binary, "serve", "--config", path, "--registry-dir", filepath.Join(dir, "registry"))
	cmd := exec.Command(argv[0], argv[1:]...)
	logs := &testenv.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	// Ready is what a runner waits for: /readyz answers 200 once the config is loaded
	// and every watched filesystem has its first sample. A test that asked before then
	// would see figures of nothing.
	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialUnix(sock)}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := hc.Get("http://sandboxd/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon was not ready within a minute; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cmd, sock, logs
}

// TestServeLaunchCheckAndSignals runs the daemon binary: status shows the figures, a
// refused launch exits with §3's status and prints the detail, check follows Nagios,
// a second serve on the live socket fails plainly, SIGHUP reloads, SIGTERM stops with 0.
func TestServeLaunchCheckAndSignals(t *testing.T) {
	mnt := testenv.Tmpfs(t, 8<<20, 0)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(mnt, "site"), 0o755)
	cfg := fmt.Sprintf(`[[site]]
name = "aura-bg"
path = %q
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "1MiB"
reserve = "0"
`, filepath.Join(mnt, "site"), mnt)
	cmd, sock, logs := serveDaemon(t, dir, cfg)
	s := "--socket=" + sock

	r := sandboxd(t, nil, "status", s)
	if r.code != 0 || !strings.Contains(r.stdout, mnt) || !strings.Contains(r.stdout, "8.0 MiB free") {
		t.Fatalf("status: %d\n%s", r.code, r.stdout)
	}
	if r := sandboxd(t, nil, "launch", s, "--need-bytes", "1KiB"); r.code != 0 || !strings.HasPrefix(r.stdout, "ok:") {
		t.Fatalf("launch: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := sandboxd(t, nil, "check", s); r.code != 0 || !strings.HasPrefix(r.stdout, "SANDBOXD OK") || !strings.Contains(r.stdout, "|") {
		t.Fatalf("check: %d %s", r.code, r.stdout)
	}
	// A launch that needs more than the disk holds, above replace_below: disk_full, 73.
	r = sandboxd(t, nil, "launch", s, "--need-bytes", "100MiB")
	if r.code != 73 || !strings.Contains(r.stderr, "disk_full") || !strings.Contains(r.stderr, "free of 8.0 MiB") {
		t.Fatalf("launch 100MiB: exit %d, stderr %q", r.code, r.stderr)
	}
	// Full: replace_sandbox, 10; check goes CRITICAL.
	testenv.Fill(filepath.Join(mnt, "userdata"), 1<<30)
	r = sandboxd(t, nil, "launch", s, "--json")
	if r.code != 10 || !strings.Contains(r.stdout, `"code": "replace_sandbox"`) {
		t.Fatalf("launch on a full disk: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		r = sandboxd(t, nil, "check", s)
		if r.code == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.code != 2 || !strings.HasPrefix(r.stdout, "SANDBOXD CRITICAL") {
		t.Fatalf("check on a full disk: %d %s", r.code, r.stdout)
	}

	// A second daemon on the same socket is refused, plainly.
	second := exec.Command(binary, "serve", "--config", filepath.Join(dir, "sandboxd.toml"), "--registry-dir", filepath.Join(dir, "registry-second"))
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another sandboxd is answering") {
		t.Fatalf("second serve: %v\n%s", err, out)
	}

	// SIGHUP with the same file reloads: one log line, the config event (issue 14 item 7).
	cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), "config reloaded") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}

	// SIGHUP with a broken file keeps the old config; SIGTERM stops cleanly.
	os.WriteFile(filepath.Join(dir, "sandboxd.toml"), []byte("version = 1\nnope = 2\n"), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), "config reload rejected") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "nope") {
		t.Fatalf("reload rejection does not name the key; logs:\n%s", logs.String())
	}
	// Each reload one line: the applied one (logged before the rejected one) and the rejected one.
	if n, m := strings.Count(logs.String(), "reloaded"), strings.Count(logs.String(), "reload rejected"); n != 1 || m != 1 {
		t.Fatalf("an applied and a rejected reload logged %d and %d lines, want 1 each; logs:\n%s", n, m, logs.String())
	}
	if r := sandboxd(t, nil, "status", s); r.code != 0 {
		t.Fatal("daemon gone after a rejected reload")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Error("socket file left after a clean stop")
	}
}

// Exit 69 reports the disk the call is about (issue 23 item 4): with the daemon down, a
// launch measures its site's filesystem from the config (--config or $SANDBOXD_CONFIG),
// status and check the config's watched filesystems, never the client's own /tmp; and
// `jobs leaks`, which is not about a disk, prints none.
func TestUnreachableDaemonMeasuresTheCallsDisk(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 8<<20, 0)
	site := filepath.Join(mnt, "site")
	os.Mkdir(site, 0o755)
	cfg := filepath.Join(t.TempDir(), "sandboxd.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[[site]]\nname = \"s\"\npath = %q\n[[filesystem]]\npath = %q\n", site, mnt)), 0o644)
	sock := filepath.Join(t.TempDir(), "none.sock")
	want := "(on " + mnt + ", tmpfs)"
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"launch", "--config", cfg}},
		{[]string{"SANDBOXD_CONFIG=" + cfg}, []string{"launch", "--site", "s"}},
		{[]string{"SANDBOXD_CONFIG=" + cfg}, []string{"run", "--", "true"}},
		{nil, []string{"status", "--config", cfg}},
		{nil, []string{"resume", "--config", cfg}},
	} {
		r := sandboxd(t, append([]string{"SANDBOXD_SOCKET=" + sock}, c.env...), c.args...)
		if !strings.Contains(r.stderr, "measured by the client: ") || !strings.Contains(r.stderr, mnt) || strings.Contains(r.stderr, "/tmp (on /") {
			t.Errorf("%v %v: exit %d, stderr %q, want the disk %s", c.env, c.args, r.code, r.stderr, want)
		}
	}
	r := sandboxd(t, []string{"SANDBOXD_SOCKET=" + sock, "SANDBOXD_CONFIG=" + cfg}, "check")
	if r.code != 3 || !strings.Contains(r.stdout, mnt+" has ") {
		t.Errorf("check: exit %d %q, want UNKNOWN with %s's state", r.code, r.stdout, mnt)
	}
	r = sandboxd(t, []string{"SANDBOXD_SOCKET=" + sock, "SANDBOXD_CONFIG=" + cfg}, "jobs", "leaks")
	if r.code != 69 || strings.Contains(r.stderr, "measured by the client") {
		t.Errorf("jobs leaks: exit %d, stderr %q: want 69 and no disk report", r.code, r.stderr)
	}
}

// serveWaiting starts a second `sandboxd serve --wait-for-socket` on dir's config, socket
// and job registry (those of serveDaemon(In) on dir) while the first still serves, stops
// it at the test's end, and returns once it says it waits for the socket: its stderr and
// its exit.
func serveWaiting(t *testing.T, dir string, flags ...string) (*testenv.SyncBuffer, <-chan error) {
	t.Helper()
	log := &testenv.SyncBuffer{}
	args := append([]string{"serve", "--config", filepath.Join(dir, "sandboxd.toml"), "--registry-dir", filepath.Join(dir, "registry"),
		"--wait-for-socket"}, flags...)
	next := exec.Command(binary, args...)
	next.Stderr = log
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- next.Wait() }()
	t.Cleanup(func() {
		next.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			next.Process.Kill()
		}
	})
	testenv.Eventually(t, time.Minute, "the new daemon to wait for the socket", func() bool {
		return strings.Contains(log.String(), "waiting for it to stop")
	})
	return log, exited
}
