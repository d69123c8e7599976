package prometheus

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// scale divides every duration of the shipped rules for the live test: the live
// Prometheus scrapes every 750ms standing for 15s, and each `for:`, `keep_firing_for:`,
// range and constant shrinks with it. The exact durations are promtool's (alerts_test.yml);
// the live test shows the expressions work on what real components produce: node_exporter's
// mtime and uname series, timestamp() of real scrapes, staleness markers of a failed scrape.
const scale = 20

// scaledRules is the shipped rules file with its durations divided by scale.
func scaledRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("sandboxd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	dur := func(s string) string {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return strconv.FormatInt((d/scale).Milliseconds(), 10) + "ms"
	}
	text := regexp.MustCompile(`(?m)^\s+(?:for|keep_firing_for): \w+$`).ReplaceAllStringFunc(string(b), func(m string) string {
		k, v, _ := strings.Cut(m, ": ")
		return k + ": " + dur(strings.TrimSpace(v))
	})
	text = regexp.MustCompile(`\[(\d+[smh])\]`).ReplaceAllStringFunc(text, func(m string) string {
		return "[" + dur(strings.Trim(m, "[]")) + "]"
	})
	// The textfile rule's slack, in seconds.
	text = strings.Replace(text, "textfile_interval_seconds + 15)", fmt.Sprintf("textfile_interval_seconds + %g)", 15.0/scale), 1)
	if strings.Contains(text, "+ 15)") {
		t.Fatal("a constant of the rules was not scaled")
	}
	return text
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs a command for the test's life and returns it; its output goes to log.
func start(t *testing.T, log *testenv.SyncBuffer, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

func alerts(t *testing.T, prom string) []alert {
	t.Helper()
	resp, err := http.Get(prom + "/api/v1/alerts")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	return body.Data.Alerts
}

func firing(t *testing.T, prom, name, instance string) bool {
	for _, a := range alerts(t, prom) {
		if a.Labels["alertname"] == name && a.Labels["instance"] == instance && a.State == "firing" {
			return true
		}
	}
	return false
}

// TestAlertsLive runs the real thing, time-scaled: three nodes, each Debian's
// prometheus-node-exporter reading a textfile directory; the real sandboxd writing
// into two of them; Debian's Prometheus evaluating the shipped rules. Node "gone" has no
// sandboxd (SandboxdAbsent for it alone). Node "a" watches a full tmpfs: DiskPressure
// fires within 2 (scaled) minutes and stays firing through a gap in node_exporter's
// scrapes longer than the rule's lookback (keep_firing_for). Then sandboxd of "a" is
// SIGKILLed and that of "b" SIGSTOPped: SandboxdTextfileStale fires for both.
func TestAlertsLive(t *testing.T) {
	testenv.RequireRoot(t)
	promBin := testenv.RequireCommand(t, "prometheus")
	ne := testenv.RequireCommand(t, "prometheus-node-exporter")
	goBin := testenv.RequireCommand(t, "go")
	work := t.TempDir()
	t0 := time.Now()
	sandboxd := filepath.Join(work, "sandboxd")
	if out, err := exec.Command(goBin, "build", "-o", sandboxd, "../../cmd/sandboxd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("go build: %v", time.Since(t0).Round(time.Millisecond))
	rules := filepath.Join(work, "rules.yml")
	os.WriteFile(rules, []byte(scaledRules(t)), 0o644)

	var log testenv.SyncBuffer
	nodes := map[string]string{} // name -> node_exporter address
	neCmds := map[string]*exec.Cmd{}
	dirs := map[string]string{}
	runNE := func(name string) {
		neCmds[name] = start(t, &log, ne, "--web.listen-address="+nodes[name], "--collector.disable-defaults",
			"--collector.textfile", "--collector.uname", "--collector.textfile.directory="+dirs[name])
	}
	for _, name := range []string{"a", "b", "gone"} {
		dirs[name] = filepath.Join(work, "textfile-"+name)
		os.MkdirAll(dirs[name], 0o755)
		nodes[name] = freePort(t)
		runNE(name)
	}
	daemons := map[string]*exec.Cmd{}
	for _, name := range []string{"a", "b"} {
		watched := testenv.Tmpfs(t, 4<<20, 0)
		reclaimBelow := "1KiB"
		if name == "a" {
			reclaimBelow = "64MiB" // more than the tmpfs holds: DiskPressure from the first sample
		}
		site := filepath.Join(work, "site-"+name)
		os.Mkdir(site, 0o755)
		cfg := filepath.Join(work, name+".toml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`[server]
mode = "observe"
[health]
sample_interval = "200ms"
transition_period = "0s"
[metrics]
textfile = %q
textfile_interval = "750ms"
[reclaim]
auto_caches = []
[[filesystem]]
path = %q
reserve = "0"
reclaim_below = %q
replace_below = "0"
[[site]]
name = "s"
path = %q
`, filepath.Join(dirs[name], "sandboxd.prom"), watched, reclaimBelow, site)), 0o644)
		daemons[name] = start(t, &log, sandboxd, "serve", "--config", cfg,
			"--socket", filepath.Join(work, name+".sock"), "--state-dir", filepath.Join(work, "state-"+name),
			"--registry-dir", filepath.Join(work, "registry-"+name)) // never the machine's /run/sandboxd
	}

	promAddr := freePort(t)
	var targets []string
	for _, name := range []string{"a", "b", "gone"} {
		targets = append(targets, fmt.Sprintf(`{targets: [%q], labels: {instance: %q}}`, nodes[name], name))
	}
	promCfg := filepath.Join(work, "prometheus.yml")
	os.WriteFile(promCfg, []byte(fmt.Sprintf(`global: {scrape_interval: 750ms, scrape_timeout: 700ms, evaluation_interval: 500ms}
rule_files: [%q]
scrape_configs:
  - job_name: node
    static_configs: [%s]
`, rules, strings.Join(targets, ", "))), 0o644)
	start(t, &log, promBin, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(work, "tsdb"),
		"--web.listen-address="+promAddr)
	prom := "http://" + promAddr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("alerts: %+v\nlogs:\n%s", alerts(t, prom), log.String())
		}
	})

	// Scaled: 2 minutes are 6s; each wait allows three times that on a loaded machine.
	const twoMinutes = 2 * time.Minute / scale
	testenv.Eventually(t, time.Minute, "Prometheus to be ready", func() bool {
		resp, err := http.Get(prom + "/-/ready")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	// Prometheus applies its targets a few seconds after start (discovery is throttled):
	// the clock starts at its first sample of node a's condition at 1.
	testenv.Eventually(t, time.Minute, "Prometheus to have node a's DiskPressure at 1", func() bool {
		resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(`sandboxd_condition{instance="a",type="DiskPressure"} == 1`))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		return len(body.Data.Result) == 1
	})
	began := time.Now()
	testenv.Eventually(t, 3*twoMinutes+20*time.Second, "SandboxdDiskPressure for node a", func() bool {
		return firing(t, prom, "SandboxdDiskPressure", "a")
	})
	t.Logf("SandboxdDiskPressure fired %v after Prometheus' first sample of the condition (scaled by %d: %v)", time.Since(began).Round(time.Millisecond), scale, time.Since(began)*scale)
	testenv.Eventually(t, 3*twoMinutes, "SandboxdAbsent for node gone", func() bool {
		return firing(t, prom, "SandboxdAbsent", "gone")
	})
	for _, name := range []string{"a", "b"} {
		if firing(t, prom, "SandboxdAbsent", name) || firing(t, prom, "SandboxdTextfileStale", name) {
			t.Errorf("node %s, whose sandboxd runs, has an absence or staleness alert", name)
		}
	}

	// A gap in the scrapes of node a longer than the rule's 1m (scaled 3s) lookback, within
	// its keep_firing_for of 2m (scaled 6s): the alert stays firing throughout.
	neCmds["a"].Process.Kill()
	neCmds["a"].Wait()
	gapEnd := time.Now().Add(4500 * time.Millisecond)
	for time.Now().Before(gapEnd) {
		if !firing(t, prom, "SandboxdDiskPressure", "a") {
			t.Fatal("SandboxdDiskPressure resolved during a scrape gap")
		}
		time.Sleep(500 * time.Millisecond)
	}
	runNE("a")

	killed := time.Now()
	daemons["a"].Process.Kill()
	daemons["b"].Process.Signal(syscall.SIGSTOP)
	for _, name := range []string{"a", "b"} {
		testenv.Eventually(t, 3*twoMinutes, "SandboxdTextfileStale for node "+name, func() bool {
			return firing(t, prom, "SandboxdTextfileStale", name)
		})
		t.Logf("SandboxdTextfileStale for %s fired %v after SIGKILL/SIGSTOP (scaled by %d: %v)", name,
			time.Since(killed).Round(time.Millisecond), scale, time.Since(killed)*scale)
	}
}
