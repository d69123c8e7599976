// Package prometheus holds sandboxd's Prometheus alert rules; its test checks them with
// promtool and holds every rule to the house rules: a `for:` and the reason for it, a severity, a runbook_url
// that names a section of docs/operations.md, and a promtool test in which it fires.
package prometheus

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestAlertRules(t *testing.T) {
	promtool := testenv.RequireCommand(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "sandboxd-alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// rule is what TestEveryRule needs of one alerting rule of sandboxd-alerts.yml.
type rule struct {
	name, expr, forDur, severity, runbook, forReason string
}

// rules reads the rules file line by line: it is ours, one key per line.
func rules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile("sandboxd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "- alert: "); ok {
			out = append(out, rule{name: v})
			continue
		}
		if len(out) == 0 {
			continue
		}
		r := &out[len(out)-1]
		switch {
		case strings.HasPrefix(l, "expr: "):
			r.expr = strings.TrimPrefix(l, "expr: ")
		case strings.HasPrefix(l, "for: "):
			r.forDur = strings.TrimPrefix(l, "for: ")
		case strings.HasPrefix(l, "labels: "):
			if m := regexp.MustCompile(`severity: (\w+)`).FindStringSubmatch(l); m != nil {
				r.severity = m[1]
			}
		case strings.HasPrefix(l, "for_reason: "):
			r.forReason = strings.TrimPrefix(l, "for_reason: ")
		case strings.HasPrefix(l, "runbook_url: "):
			r.runbook = strings.TrimPrefix(l, "runbook_url: ")
		}
	}
	return out
}

// anchors are the GitHub anchors of docs/operations.md's headings.
func anchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, l := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(l, "#"); ok {
			h = strings.TrimLeft(h, "#")
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")] = true
		}
	}
	return out
}

func TestEveryRule(t *testing.T) {
	rs := rules(t)
	if len(rs) < 18 {
		t.Fatalf("read %d rules", len(rs))
	}
	tests, err := os.ReadFile("alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	// alertname: X followed by exp_alerts: with at least one entry.
	fires := map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels`).FindAllStringSubmatch(string(tests), -1) {
		fires[m[1]] = true
	}
	docs := anchors(t)
	const base = "https://github.com/sandboxd/sandboxd/blob/main/docs/operations.md#"
	for _, r := range rs {
		if r.forDur == "" {
			t.Errorf("%s has no for:", r.name)
		}
		// Each for: is chosen, and the rule says why (issue 25; DiskFillingUp's by issue 24).
		if r.forReason == "" {
			t.Errorf("%s has no for_reason annotation saying why its for: is %s", r.name, r.forDur)
		}
		if r.severity != "warning" && r.severity != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.name, r.severity)
		}
		anchor, ok := strings.CutPrefix(r.runbook, base)
		if !ok || !docs[anchor] {
			t.Errorf("%s: runbook_url %q does not name a section of docs/operations.md", r.name, r.runbook)
		}
		if !fires[r.name] {
			t.Errorf("%s has no promtool test in which it fires", r.name)
		}
	}
}
