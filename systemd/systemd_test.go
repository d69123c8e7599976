package systemd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

const helperUnit = "sandboxd-notify-helper.service"

// TestUnderRealSystemd runs the notify helper as a Type=notify service of a real systemd
// and reads back what systemd understood: READY (start returns, unit active), STATUS
// (StatusText), RELOADING+READY (reload), the watchdog kept fed while fresh, and a
// restart by the watchdog once the helper's supervisor loop stalls.
func TestUnderRealSystemd(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctl := t.TempDir()
	sd := startPrivateSystemd(t, map[string]string{
		helperUnit: fmt.Sprintf(`[Unit]
Description=sandboxd notify helper
DefaultDependencies=no
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
ExecStart=%s
ExecReload=/bin/kill -HUP $MAINPID
Environment=%s=notify SANDBOXD_TEST_CTL=%s
WatchdogSec=3s
Restart=on-failure
RestartSec=100ms
StandardOutput=append:/run/helper.log
StandardError=append:/run/helper.log
`, exe, helperEnv, ctl),
		"sandboxd-fails.service": "[Unit]\nDefaultDependencies=no\n[Service]\nType=oneshot\nExecStart=/bin/false\n",
	})

	// Type=notify: start returns only once systemd received READY=1.
	if out, err := sd.systemctl("start", helperUnit); err != nil {
		t.Fatalf("systemctl start: %v\n%s", err, out)
	}
	props := []string{"ActiveState", "SubState", "StatusText", "MainPID", "NRestarts", "Result"}
	first := sd.show(helperUnit, props...)
	if first["ActiveState"] != "active" || first["SubState"] != "running" || !strings.HasPrefix(first["StatusText"], "pings=") {
		t.Fatalf("after start: %v; want active/running with a STATUS line", first)
	}

	// Fed while fresh: the pings keep it running well past WatchdogSec.
	waitFor(t, "four watchdog pings in StatusText", func() bool { return statusCount(sd.show(helperUnit, "StatusText")["StatusText"], "pings") >= 4 })
	if s := sd.show(helperUnit, props...); s["ActiveState"] != "active" || s["NRestarts"] != "0" || s["MainPID"] != first["MainPID"] {
		t.Fatalf("while pinging: %v; want the same process, active, never restarted", s)
	}

	// RELOADING=1 then READY=1 on SIGHUP.
	if out, err := sd.systemctl("reload", helperUnit); err != nil {
		t.Fatalf("systemctl reload: %v\n%s", err, out)
	}
	waitFor(t, "the reload in StatusText", func() bool {
		s := sd.show(helperUnit, "StatusText", "ActiveState")
		return statusCount(s["StatusText"], "reloads") == 1 && s["ActiveState"] == "active"
	})

	// Stalled supervisor loop: the pings stop and systemd's watchdog restarts the unit.
	stall := filepath.Join(ctl, "stall")
	if err := os.WriteFile(stall, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart by the watchdog", func() bool { return sd.show(helperUnit, "NRestarts")["NRestarts"] != "0" })
	if err := os.Remove(stall); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted helper to be fed again", func() bool {
		s := sd.show(helperUnit, props...)
		return s["ActiveState"] == "active" && s["MainPID"] != first["MainPID"] && statusCount(s["StatusText"], "pings") >= 2
	})
	// systemd's watchdog kills with WatchdogSignal= (SIGABRT), which the Go runtime reports.
	log, _ := os.ReadFile(filepath.Join(sd.run, "helper.log"))
	if !strings.Contains(string(log), "SIGABRT: abort") {
		t.Errorf("the helper's log shows no SIGABRT from the watchdog:\n%s", tail(log, 20))
	}

	t.Run("UnitRestarter", func(t *testing.T) { testUnitRestarter(t, sd) })

	// STOPPING=1 and a clean exit on SIGTERM.
	if out, err := sd.systemctl("stop", helperUnit); err != nil {
		t.Fatalf("systemctl stop: %v\n%s", err, out)
	}
	if s := sd.show(helperUnit, "ActiveState", "Result"); s["ActiveState"] != "inactive" || s["Result"] != "success" {
		t.Fatalf("after stop: %v; want inactive, success", s)
	}
}

// testUnitRestarter drives UnitRestarter from inside the namespace: systemd refuses a
// private-bus peer whose pid it cannot see (getpeercred answers ENODATA for a peer in a
// parent PID namespace), so the restarter runs as a helper entered with nsenter.
func testUnitRestarter(t *testing.T, sd *privateSystemd) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before := sd.show(helperUnit, "MainPID")["MainPID"]
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(sd.pid), "-p", "-m", "env",
		helperEnv+"=restart", "SANDBOXD_TEST_UNIT="+helperUnit, exe)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("restart helper: %v\n%s", err, out)
	}
	got := map[string]restartStep{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var st restartStep
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			t.Fatalf("restart helper said %q: %v", line, err)
		}
		got[st.Step] = st
	}
	if st := got["restart"]; st.Result != JobDone || st.Err != "" {
		t.Errorf("RestartUnit(%s) = %+v; want done", helperUnit, st)
	}
	if st := got["failing"]; st.Result != JobFailed || !strings.Contains(st.Err, "sandboxd-fails.service") || !strings.Contains(st.Err, "failed") {
		t.Errorf("RestartUnit of a failing unit = %+v; want failed and an error naming the unit", st)
	}
	if st := got["missing"]; !strings.Contains(st.Err, "sandboxd-no-such.service") {
		t.Errorf("RestartUnit of a missing unit = %+v; want an error naming it", st)
	}
	if st := got["after-drop"]; st.Result != JobDone || st.Err != "" || st.Reused {
		t.Errorf("RestartUnit after the bus dropped = %+v; want done on a new connection", st)
	}
	if s := sd.show(helperUnit, "MainPID", "ActiveState"); s["MainPID"] == before || s["ActiveState"] != "active" {
		t.Errorf("after RestartUnit: %v; want a new active main process (was %s)", s, before)
	}
}

// restartStep is one line of the restart helper's report.
type restartStep struct {
	Step   string `json:"step"`
	Result string `json:"result"`
	Err    string `json:"err"`
	Reused bool   `json:"reused"`
}

// restartHelper runs inside the private systemd's namespaces and reports each call.
func restartHelper() error {
	unit := os.Getenv("SANDBOXD_TEST_UNIT")
	r := &UnitRestarter{Dial: sddbus.NewSystemdConnectionContext}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enc := json.NewEncoder(os.Stdout)
	step := func(name, unit string) {
		res, err := r.RestartUnit(ctx, unit)
		st := restartStep{Step: name, Result: res}
		if err != nil {
			st.Err = err.Error()
		}
		enc.Encode(st)
	}
	step("restart", unit)
	step("failing", "sandboxd-fails.service")
	step("missing", "sandboxd-no-such.service")

	r.mu.Lock()
	old := r.conn
	old.Close() // as if the bus went away under us
	r.mu.Unlock()
	res, err := r.RestartUnit(ctx, unit)
	st := restartStep{Step: "after-drop", Result: res, Reused: r.conn == old}
	if err != nil {
		st.Err = err.Error()
	}
	return enc.Encode(st)
}

// statusCount reads key=N from the helper's STATUS line, -1 when absent.
func statusCount(status, key string) int {
	for _, f := range strings.Fields(status) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			n, err := strconv.Atoi(v)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
