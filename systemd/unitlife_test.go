package systemd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// buildSandboxd builds the real sandboxd binary for a test that runs it under systemd,
// once for the package's tests (a build takes seconds on a loaded machine); TestMain
// removes it.
func buildSandboxd(t *testing.T) string {
	t.Helper()
	goBin := testenv.RequireCommand(t, "go")
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "sandboxd-systemd-test-")
		if err != nil {
			built.err = err
			return
		}
		os.Chmod(dir, 0o755)
		built.dir, built.bin = dir, filepath.Join(dir, "sandboxd")
		if out, err := exec.Command(goBin, "build", "-o", built.bin, "../cmd/sandboxd").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// built is the binary buildSandboxd made.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// packagedUnits are the shipped sandboxd.socket and sandboxd.service with drop-ins that
// change only what a test must: no default dependencies (they would boot the host's
// sysinit.target in the namespace), the binary's path, the config at /run/sandboxd.toml
// and the log in /run/sandboxd.log; RestartSec=200ms, so the start limit (5 starts in
// 60s, which packaging/systemd's test holds against RestartSec=2s) is reached in a second.
func packagedUnits(t *testing.T, bin string) map[string]string {
	t.Helper()
	units := map[string]string{}
	for _, name := range []string{"sandboxd.service", "sandboxd.socket"} {
		b, err := os.ReadFile(filepath.Join("..", "packaging", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		units[name] = strings.ReplaceAll(string(b), "/usr/bin/sandboxd", bin)
	}
	units["sandboxd.socket.d/test.conf"] = "[Unit]\nDefaultDependencies=no\n"
	units["sandboxd.service.d/test.conf"] = fmt.Sprintf("[Unit]\nDefaultDependencies=no\n[Service]\nExecStart=\nExecStart=%s serve --config /run/sandboxd.toml\nRestartSec=200ms\n"+
		"StandardOutput=append:/run/sandboxd.log\nStandardError=append:/run/sandboxd.log\n", bin)
	return units
}

// unitConfig is a config safe to run here: observe mode, one tmpfs of the test watched
// with no reserve, no caches, no textfile.
func unitConfig(watched string, extra string) string {
	return fmt.Sprintf(`[server]
mode = "observe"
[reclaim]
auto_caches = []
[[filesystem]]
path = %q
reserve = "0"
[[site]]
name = "s"
path = %q
%s`, watched, filepath.Join(watched, "site"), extra)
}

// TestPackagedUnitLifecycle runs the real sandboxd under the shipped units with a
// config it rejects: the unit restarts a few times and ends failed (start-limit-hit),
// `systemctl is-failed` says so, the socket unit fails with it, and a client is refused
// at once (exit 69), not left waiting in the listen queue. The documented recovery
// (fix the config, reset-failed, start) brings it back. Then `systemctl reload` exits 0
// on a valid file and fails on one the daemon rejects.
func TestPackagedUnitLifecycle(t *testing.T) {
	bin := buildSandboxd(t)
	watched := testenv.Tmpfs(t, 8<<20, 0)
	os.Mkdir(filepath.Join(watched, "site"), 0o755)
	sd := startPrivateSystemd(t, packagedUnits(t, bin))
	os.WriteFile(filepath.Join(sd.run, "sandboxd.toml"), []byte(unitConfig(watched, "no_such_key = 1\n")), 0o644)

	if out, err := sd.systemctl("start", "sandboxd.socket"); err != nil {
		t.Fatalf("start the socket: %v\n%s", err, out)
	}
	sd.systemctl("start", "sandboxd.service") // fails: the config is rejected
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(sd.run, "sandboxd.log"))
			st, _ := sd.systemctl("status", "sandboxd.service", "sandboxd.socket")
			t.Logf("sandboxd.log:\n%s\nstatus:\n%s", tail(log, 30), st)
		}
	})
	// systemd 252 keeps the service's Result of its last run (exit-code) and gives the
	// socket the start limit's: service-start-limit-hit.
	testenv.Eventually(t, 60*time.Second, "sandboxd.service to end failed at its start limit", func() bool {
		return sd.show("sandboxd.service", "ActiveState")["ActiveState"] == "failed" &&
			sd.show("sandboxd.socket", "Result")["Result"] == "service-start-limit-hit"
	})
	t.Logf("sandboxd.service failed after %s restarts", sd.show("sandboxd.service", "NRestarts")["NRestarts"])
	if out, _ := sd.systemctl("is-failed", "sandboxd.service"); strings.TrimSpace(out) != "failed" {
		t.Errorf("systemctl is-failed sandboxd.service: %q", out)
	}
	if s := sd.show("sandboxd.socket", "ActiveState"); s["ActiveState"] != "failed" {
		t.Errorf("sandboxd.socket: %v; want failed with the service (its listener closed)", s)
	}
	if log, _ := os.ReadFile(filepath.Join(sd.run, "sandboxd.log")); !strings.Contains(string(log), "no_such_key") {
		t.Errorf("the service's log does not name the bad key:\n%s", log)
	}

	sock := filepath.Join(sd.run, "sandboxd", "sandboxd.sock")
	// The client learns at once that no daemon is there: the socket is gone or refuses
	// (its listener closed with the unit), an "unreachable" answer saying so — not a
	// wait for a daemon that could still answer. Its limit is long so that a client
	// that waited would end with "timeout" (failing here), whatever the machine's load.
	out, err := exec.Command(bin, "--timeout", "1m", "status", "--json", "--socket", sock).Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 69 {
		t.Errorf("sandboxd status against the failed unit: %v, want exit 69\n%s", err, out)
	}
	var ans struct{ Error, Reason string }
	if err := json.Unmarshal(out, &ans); err != nil {
		t.Errorf("sandboxd status --json against the failed unit: %v\n%s", err, out)
	}
	t.Logf("sandboxd status against the failed unit: exit 69, %s: %s", ans.Error, ans.Reason)
	if ans.Error != "unreachable" || !(strings.HasPrefix(ans.Reason, "connection refused") || strings.HasPrefix(ans.Reason, "no socket")) {
		t.Errorf("the client did not learn the daemon is not there: error %q, reason %q; want unreachable, refused or no socket\n%s",
			ans.Error, ans.Reason, out)
	}

	// Recovery as docs/operations.md says.
	os.WriteFile(filepath.Join(sd.run, "sandboxd.toml"), []byte(unitConfig(watched, "")), 0o644)
	if out, err := sd.systemctl("reset-failed", "sandboxd.service", "sandboxd.socket"); err != nil {
		t.Fatalf("reset-failed: %v\n%s", err, out)
	}
	if out, err := sd.systemctl("start", "sandboxd.socket", "sandboxd.service"); err != nil {
		t.Fatalf("start after the fix: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "status", "--socket", sock).CombinedOutput(); err != nil {
		t.Errorf("sandboxd status after the recovery: %v\n%s", err, out)
	}

	// systemctl reload tells the truth (issue 25 item 4): a valid change is taken and
	// reload exits 0; a rejected file makes it fail, the problem is in the service's log
	// (the journal on a real host), and the daemon runs on with the last good config.
	pid := sd.show("sandboxd.service", "MainPID")["MainPID"]
	os.WriteFile(filepath.Join(sd.run, "sandboxd.toml"), []byte(unitConfig(watched, "[log]\nlevel = \"debug\"\n")), 0o644)
	if out, err := sd.systemctl("reload", "sandboxd.service"); err != nil {
		t.Errorf("systemctl reload of a valid config: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(sd.run, "sandboxd.toml"), []byte(unitConfig(watched, "[log]\nlevel = \"loud\"\n")), 0o644)
	if out, err := sd.systemctl("reload", "sandboxd.service"); err == nil {
		t.Errorf("systemctl reload of a rejected config exited 0:\n%s", out)
	}
	if log, _ := os.ReadFile(filepath.Join(sd.run, "sandboxd.log")); !strings.Contains(string(log), "rejected; the last good config stays in force") || !strings.Contains(string(log), "loud") {
		t.Errorf("the service's log does not say the reload was rejected and why:\n%s", tail(log, 20))
	}
	if s := sd.show("sandboxd.service", "ActiveState", "MainPID"); s["ActiveState"] != "active" || s["MainPID"] != pid {
		t.Errorf("after a rejected reload: %v; want the same daemon active (pid %s)", s, pid)
	}
}

// TestClientsDuringRestarts: what a runner's launch meets while systemd restarts sandboxd
// (issue 25), under the shipped units (RestartSec=2s, 5 starts within 60s). The socket
// unit keeps listening while the service restarts, so a launch made right after the
// daemon died (SIGABRT, the watchdog's signal) waits in the socket's queue and is answered
// by the next daemon. When the next daemon cannot start either (a bad config), a launch
// bounded by --timeout exits 69 at its limit and says that sandboxd is restarting, with
// systemd's restart count and policy, not only "no answer".
func TestClientsDuringRestarts(t *testing.T) {
	bin := buildSandboxd(t)
	watched := testenv.Tmpfs(t, 8<<20, 0)
	os.Mkdir(filepath.Join(watched, "site"), 0o755)
	units := packagedUnits(t, bin)
	units["sandboxd.service.d/test.conf"] = strings.Replace(units["sandboxd.service.d/test.conf"], "RestartSec=200ms\n", "", 1)
	sd := startPrivateSystemd(t, units)
	os.WriteFile(filepath.Join(sd.run, "sandboxd.toml"), []byte(unitConfig(watched, "")), 0o644)
	if out, err := sd.systemctl("start", "sandboxd.socket", "sandboxd.service"); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(sd.run, "sandboxd.log"))
			st, _ := sd.systemctl("status", "sandboxd.service", "sandboxd.socket")
			t.Logf("sandboxd.log:\n%s\nstatus:\n%s", tail(log, 30), st)
		}
	})
	if rs := sd.show("sandboxd.service", "RestartUSec")["RestartUSec"]; rs != "2s" {
		t.Fatalf("RestartSec of the shipped unit: %s, want 2s", rs)
	}
	// The CLI runs inside the namespace, where the socket is at its packaged path and
	// systemd answers on /run/systemd/private.
	launch := func(args ...string) (int, string, time.Duration) {
		cmd := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(sd.pid), "-p", "-m", bin, "launch"}, args...)...)
		began := time.Now()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out), time.Since(began)
		}
		if err != nil {
			t.Fatalf("launch: %v\n%s", err, out)
		}
		return 0, string(out), time.Since(began)
	}
	if code, out, _ := launch(); code != 0 {
		t.Fatalf("launch against the running unit: exit %d\n%s", code, out)
	}

	// The daemon killed is gone once systemd says so: a Go program's SIGABRT first dumps
	// its goroutines, and until then it may still answer (on a loaded machine, a launch
	// made right after systemctl kill was answered by it).
	killed := func(pid string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, "the killed daemon (pid "+pid+") to be gone", func() bool {
			return sd.show("sandboxd.service", "MainPID")["MainPID"] != pid
		})
	}

	// The watchdog's kill: the next daemon answers the launch waiting in the queue.
	pid := sd.show("sandboxd.service", "MainPID")["MainPID"]
	if out, err := sd.systemctl("kill", "--kill-whom=main", "--signal=SIGABRT", "sandboxd.service"); err != nil {
		t.Fatalf("kill: %v\n%s", err, out)
	}
	killed(pid)
	code, out, took := launch("--timeout", "30s")
	t.Logf("a launch right after SIGABRT: exit %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	if code != 0 {
		t.Errorf("a launch made during the restart was not answered by the next daemon: exit %d\n%s", code, out)
	}
	if s := sd.show("sandboxd.service", "MainPID", "NRestarts"); s["MainPID"] == pid || s["NRestarts"] != "1" {
		t.Errorf("after the kill: %v; want a new daemon after one automatic restart", s)
	}

	// A restart that cannot succeed: the launch's bounded wait ends with exit 69 and says
	// that sandboxd is restarting.
	os.WriteFile(filepath.Join(sd.run, "sandboxd.toml"), []byte(unitConfig(watched, "no_such_key = 1\n")), 0o644)
	pid = sd.show("sandboxd.service", "MainPID")["MainPID"]
	if out, err := sd.systemctl("kill", "--kill-whom=main", "--signal=SIGABRT", "sandboxd.service"); err != nil {
		t.Fatalf("kill: %v\n%s", err, out)
	}
	killed(pid)
	code, out, took = launch("--timeout", "1s")
	t.Logf("a launch while the unit restarts in vain: exit %d after %v:\n%s", code, took.Round(time.Millisecond), out)
	if code != 69 || !strings.Contains(out, "no answer from sandboxd at /run/sandboxd/sandboxd.sock within --timeout 1s") ||
		!strings.Contains(out, "sandboxd is restarting (sandboxd.service: restarted ") ||
		!strings.Contains(out, "every 2s; it fails after 5 starts within 1m)") {
		t.Errorf("a launch while the unit restarts: exit %d, want 69 saying sandboxd is restarting\n%s", code, out)
	}

	// At its start limit the unit fails with its socket: refused at once, and told so.
	testenv.Eventually(t, 60*time.Second, "sandboxd.service to fail at its start limit", func() bool {
		return sd.show("sandboxd.service", "ActiveState")["ActiveState"] == "failed"
	})
	code, out, took = launch("--timeout", "1s")
	t.Logf("a launch against the failed unit: exit %d after %v:\n%s", code, took.Round(time.Millisecond), out)
	if code != 69 || !strings.Contains(out, "sandboxd.service has failed") || !strings.Contains(out, "systemctl reset-failed sandboxd.service") {
		t.Errorf("a launch against the failed unit: exit %d, want 69 saying the unit has failed\n%s", code, out)
	}
}
