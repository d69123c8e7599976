package backtest

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func seriesOf(tr trace) Series {
	s := Series{Name: tr.name}
	for _, p := range tr.points {
		s.Points = append(s.Points, Point{Time: p.t, Sample: Sample{AvailBytes: p.avail, SizeBytes: p.size}})
	}
	return s
}

// A steady 2 MiB/s fill to the wall: one warning with its predicted and true time to full
// (within 30%), the wall warned with that lead, a reclaim the policy would start, and a
// summary line that says so; the CSV round trip gives the same report.
func TestRunReportsLeadTimes(t *testing.T) {
	tr := fillTrace(rand.New(rand.NewPCG(1, 1)), time.Second, 2*mib, 8*gib, 600*mib, 20)
	s := seriesOf(tr)
	var csv bytes.Buffer
	if err := WriteCSV(&csv, s); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSeries(&csv, "fill.csv", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Series{s, back} {
		rep := Run(corpusConfig(0), s)
		if len(rep.Warnings) != 1 || rep.Warnings[0].TrueFullSeconds == nil || rep.Warnings[0].Error == nil {
			t.Fatalf("warnings %+v", rep.Warnings)
		}
		w := rep.Warnings[0]
		if e := *w.Error; e < -0.3 || e > 0.3 {
			t.Fatalf("predicted %v s, truly %v s", *w.PredictedFullSeconds, *w.TrueFullSeconds)
		}
		if rep.Summary.Walls != 1 || rep.Summary.WallsWarned != 1 || *rep.Summary.MinLeadSeconds < 250 {
			t.Fatalf("walls %+v summary %+v", rep.Walls, rep.Summary)
		}
		if iv := rep.Interval.D(); rep.Summary.Reclaims == 0 || iv < time.Second || iv > 1100*time.Millisecond {
			t.Fatalf("summary %+v interval %v", rep.Summary, rep.Interval)
		}
		var out bytes.Buffer
		rep.Print(&out)
		for _, want := range []string{"raised   DiskFillingUp (PredictedFull)", "lead time 4m", "reclaim  would start (trigger pressure, rung ladder)",
			"summary: ", "full 1 times, 1 warned (shortest lead 4m", "verdict at the end: replace"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("report lacks %q:\n%s", want, out.String())
			}
		}
		b, _ := json.Marshal(rep)
		var again Report
		if err := json.Unmarshal(b, &again); err != nil || again.Summary.Raised[api.CondDiskFillingUp] != 1 {
			t.Fatalf("json: %v %s", err, b)
		}
	}
}
