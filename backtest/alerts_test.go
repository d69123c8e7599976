package backtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The shipped SandboxdDiskFillingUp rule, evaluated by a real promtool on what a
// Prometheus scraping every 15 s would have seen of sandboxd_condition during the corpus'
// steady fills, fires before the wall for every fill raised 90 s or more before it
// (issue 24, item 4): a for: of 5m, or a gate that raises the condition late, fails it.
// The rule's annotations are read from the file, so the test follows its text.
func TestAlertFiresBeforeTheWall(t *testing.T) {
	promtool := testenv.RequireCommand(t, "promtool")
	rulesFile, err := filepath.Abs("../packaging/prometheus/sandboxd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	rule := alertRule(t, rulesFile, "SandboxdDiskFillingUp")
	// A fill whose DiskFillingUp reaches Prometheus this long before the wall must page
	// before it, whatever the rule's for: says: six scrapes at 15 s, time for the rule to
	// see a single scrape and one evaluation and still wait a minute.
	const scrape, leastLead = 15 * time.Second, 90 * time.Second
	rng := rand.New(rand.NewPCG(7, 7))
	var fills []trace
	for _, rate := range []float64{64 * kib, 2 * mib, 64 * mib, 1 * gib} {
		for _, ttf := range []float64{120, 300} {
			fills = append(fills, fillTrace(rng, time.Second, rate, 8*gib+uint64(rate*ttf), uint64(rate*ttf)&^4095, 30))
		}
	}
	fills = append(fills, fillTrace(rng, 10*time.Second, 1*mib, 8*gib+600*mib, 600*mib, 30))
	for _, rc := range recordedCorpus(t) {
		if rc.want.fill {
			fills = append(fills, rc)
		}
	}
	var yml strings.Builder
	fmt.Fprintf(&yml, "rule_files: [%s]\nevaluation_interval: %s\ntests:\n", rulesFile, scrape)
	checked := 0
	for i, tr := range fills {
		values, raised, wall := scrapes(tr, scrape)
		if raised < 0 || wall < 0 {
			t.Errorf("%s: DiskFillingUp raised at scrape %d, wall at %d", tr.name, raised, wall)
			continue
		}
		if time.Duration(wall-raised)*scrape < leastLead {
			t.Logf("%s: raised %v before the wall, under %v: not held to an alert in time", tr.name, time.Duration(wall-raised)*scrape, leastLead)
			continue
		}
		checked++
		inst := fmt.Sprintf("n%d", i)
		fmt.Fprintf(&yml, "  - name: %q\n    interval: %s\n    input_series:\n", tr.name, scrape)
		fmt.Fprintf(&yml, "      - series: 'sandboxd_condition{type=\"DiskFillingUp\",subject=\"/sandbox\",instance=\"%s\"}'\n        values: '%s'\n", inst, values)
		fmt.Fprintf(&yml, "    alert_rule_test:\n      - eval_time: %s\n        alertname: SandboxdDiskFillingUp\n        exp_alerts:\n", time.Duration(wall-1)*scrape)
		fmt.Fprintf(&yml, "          - exp_labels: {severity: %s, type: DiskFillingUp, subject: /sandbox, instance: %s}\n            exp_annotations:\n", rule.severity, inst)
		for _, a := range rule.annotations {
			v := strings.NewReplacer("{{ $labels.subject }}", "/sandbox", "{{ $labels.instance }}", inst).Replace(a[1])
			fmt.Fprintf(&yml, "              %s: %s\n", a[0], v)
		}
	}
	if checked < 6 {
		t.Fatalf("only %d fills leave room for an alert: the corpus or the rule's for: changed", checked)
	}
	f := filepath.Join(t.TempDir(), "corpus_alerts_test.yml")
	if err := os.WriteFile(f, []byte(yml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules (the rule does not fire before the wall): %v\n%s\n--- %s:\n%s", err, out, f, yml.String())
	}
}

// scrapes renders the DiskFillingUp status the engine gives a trace as promtool values
// every scrape from the first sample, and the scrapes of the first raise and of the wall.
func scrapes(tr trace, scrape time.Duration) (values string, raised, wall int) {
	e := New(corpusConfig(tr.interval))
	raised, wall = -1, -1
	var vals []string
	t0 := tr.points[0].t
	up, full := false, false
	next := 0
	flush := func(until time.Time) {
		for ; !t0.Add(time.Duration(next) * scrape).After(until); next++ {
			v := "0"
			if up {
				v = "1"
				if raised < 0 {
					raised = next
				}
			}
			if full && wall < 0 {
				wall = next
			}
			vals = append(vals, v)
		}
	}
	for _, p := range tr.points {
		flush(p.t.Add(-time.Nanosecond))
		e.Step(p.t, Sample{AvailBytes: p.avail, SizeBytes: p.size})
		up, full = e.State().FillingUp, full || p.avail == 0
	}
	flush(tr.points[len(tr.points)-1].t)
	return strings.Join(vals, " "), raised, wall
}

// promRule is what the test needs of an alerting rule.
type promRule struct {
	forDur      time.Duration
	severity    string
	annotations [][2]string // in file order
}

// alertRule reads one rule of the rules file, one key per line as the file is written.
func alertRule(t *testing.T, file, name string) promRule {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r promRule
	in, ann := false, false
	for _, l := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(s, "- alert: "); ok {
			in, ann = v == name, false
			continue
		}
		if !in {
			continue
		}
		switch {
		case strings.HasPrefix(s, "for: "):
			r.forDur, _ = time.ParseDuration(strings.TrimPrefix(s, "for: "))
		case strings.HasPrefix(s, "labels: "):
			if _, v, ok := strings.Cut(s, "severity: "); ok {
				r.severity = strings.TrimRight(v, "} ")
			}
		case s == "annotations:":
			ann = true
		case ann && strings.Contains(s, ": "):
			k, v, _ := strings.Cut(s, ": ")
			r.annotations = append(r.annotations, [2]string{k, v})
		}
	}
	if r.forDur == 0 || r.severity == "" || len(r.annotations) == 0 {
		t.Fatalf("%s: no rule %s with for:, severity and annotations", file, name)
	}
	return r
}
