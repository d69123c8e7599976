package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

var metricName = regexp.MustCompile(`\b(sandboxd|node|go|process)_[a-zA-Z0-9_]+`)

// checkNames fails for every sandboxd_* name in expr that sandboxd does not export
// (histogram series count by their family) and, unless others lists it, for any
// name of another exporter.
func checkNames(t *testing.T, where, expr string, others map[string]bool) {
	t.Helper()
	for _, name := range metricName.FindAllString(expr, -1) {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := strings.CutSuffix(name, suffix); ok && exported[f] {
				family = f
			}
		}
		switch {
		case exported[family]:
		case others[name]:
		default:
			t.Errorf("%s: %s is not a metric sandboxd exports: %s", where, name, expr)
		}
	}
}

// TestDashboardNamesOnlyExportedMetrics walks every expression of the Grafana
// dashboard, checks its metric names, and has promtool parse it (as a recording rule,
// with the Grafana variables filled in).
func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../packaging/grafana/sandboxd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(dash)
	if len(exprs) < 20 {
		t.Fatalf("found %d expressions in the dashboard", len(exprs))
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		checkNames(t, "dashboard", e, nil)
		if strings.HasPrefix(e, "label_values(") {
			continue // a Grafana query, not PromQL
		}
		e = strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(e)
		q, _ := json.Marshal(e)
		fmt.Fprintf(&rules, "      - record: dashboard:expr%d\n        expr: %s\n", i, q)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		f := filepath.Join(t.TempDir(), "dashboard.yml")
		os.WriteFile(f, []byte(rules.String()), 0o644)
		if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
			t.Errorf("promtool does not parse the dashboard's expressions: %v\n%s", err, out)
		}
	} else if os.Getenv("CI") == "true" {
		testenv.RequireCommand(t, "promtool")
	}
}

// TestAlertRulesNameOnlyExportedMetrics: the rules name sandboxd's metrics and, for
// reachability, node_exporter's textfile mtime, uname (the per-instance absence) and
// systemd unit state (a unit that hit its start limit), and Prometheus' own up.
func TestAlertRulesNameOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../packaging/prometheus/sandboxd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(l), "expr: "); ok {
			n++
			checkNames(t, "alert rules", e, map[string]bool{"node_textfile_mtime_seconds": true,
				"node_uname_info": true, "node_systemd_unit_state": true})
		}
	}
	if n < 18 {
		t.Fatalf("found %d expressions in the alert rules", n)
	}
}
