package backtest

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Report is what the policy did on a series, with each warning's lead time against the
// series' true time to full: `sandboxd backtest` prints it.
type Report struct {
	Series   string       `json:"series"`
	Samples  int          `json:"samples"`
	Start    time.Time    `json:"start"`
	End      time.Time    `json:"end"`
	Interval api.Duration `json:"interval"` // the series' median spacing, taken as sample_interval
	Events   []Entry      `json:"events"`   // the timeline: conditions raised and cleared, reclaims
	Warnings []Warning    `json:"warnings"` // each DiskFillingUp raised
	Walls    []Wall       `json:"walls"`    // each time the filesystem became full
	Summary  Totals       `json:"summary"`
}

// Entry is one event of the timeline.
type Entry struct {
	Time                  time.Time     `json:"time"`
	Kind                  string        `json:"kind"` // raised, cleared, reclaim, reclaim-refused
	Condition             string        `json:"condition,omitempty"`
	Reason                string        `json:"reason,omitempty"`
	Message               string        `json:"message,omitempty"`
	AvailBytes            uint64        `json:"avail_bytes"`
	GrowthBytesPerSecond  float64       `json:"growth_bytes_per_second"`
	GrowthWindow          api.Duration  `json:"growth_window"`
	PredictedFullSeconds  *float64      `json:"predicted_full_seconds"`
	ReclaimThresholdBytes uint64        `json:"reclaim_threshold_bytes"`
	Trigger               string        `json:"trigger,omitempty"`
	Rung                  string        `json:"rung,omitempty"`
	TargetBytes           uint64        `json:"target_bytes,omitempty"`
	DeficitBytes          uint64        `json:"deficit_bytes,omitempty"`
	Blocked               string        `json:"blocked,omitempty"`
	lead                  time.Duration // for the text line
}

// Warning is one DiskFillingUp: predicted against true time to full. TrueFullSeconds is
// nil when the series never became full after it (LeadSeconds too).
type Warning struct {
	RaisedAt             time.Time  `json:"raised_at"`
	ClearedAt            *time.Time `json:"cleared_at"`
	PredictedFullSeconds *float64   `json:"predicted_full_seconds"`
	TrueFullSeconds      *float64   `json:"true_full_seconds"`
	// Error is predicted / true − 1 (0.25: predicted 25% too late); nil without a true one.
	Error *float64 `json:"error"`
}

// Wall is a moment the filesystem became full (0 bytes available), and the warning
// that came before it, if any: LeadSeconds from the DiskFillingUp true at the wall.
type Wall struct {
	At          time.Time `json:"at"`
	Warned      bool      `json:"warned"`
	LeadSeconds *float64  `json:"lead_seconds"`
}

// Totals is the summary line's figures.
type Totals struct {
	Raised            map[string]int `json:"raised"` // by condition type
	Reclaims          int            `json:"reclaims"`
	Refused           int            `json:"reclaims_refused"`
	Walls             int            `json:"walls"`
	WallsWarned       int            `json:"walls_warned"`
	MinLeadSeconds    *float64       `json:"min_lead_seconds"` // the shortest warning before a wall
	MaxThresholdBytes uint64         `json:"max_reclaim_threshold_bytes"`
	ThresholdRaised   bool           `json:"adaptive_threshold_raised"`
	Verdict           string         `json:"verdict"` // at the last sample
}

// Run drives an engine of cfg through s and reports. The series' median spacing stands
// for cfg.Pressure.SampleInterval: the estimator's windows are sized by what it sees.
func Run(cfg Config, s Series) Report {
	if iv := s.Interval(); iv > 0 {
		cfg.Pressure.SampleInterval = iv
	}
	e := New(cfg)
	rep := Report{Series: s.Name, Samples: len(s.Points), Interval: api.Duration(cfg.Pressure.SampleInterval)}
	if len(s.Points) > 0 {
		rep.Start, rep.End = s.Points[0].Time, s.Points[len(s.Points)-1].Time
	}
	walls := fullTimes(s)
	open := -1 // the warning whose DiskFillingUp is true
	for _, p := range s.Points {
		for _, ev := range e.Step(p.Time, p.Sample) {
			rep.Events = append(rep.Events, entry(ev))
			if ev.Condition != api.CondDiskFillingUp {
				continue
			}
			if ev.Kind == ConditionRaised {
				w := Warning{RaisedAt: ev.Time}
				if ev.PredictedFullSeconds >= 0 {
					w.PredictedFullSeconds = ptr(ev.PredictedFullSeconds)
				}
				if wall, ok := nextAfter(walls, ev.Time); ok {
					tr := wall.Sub(ev.Time).Seconds()
					w.TrueFullSeconds = &tr
					rep.Events[len(rep.Events)-1].lead = wall.Sub(ev.Time)
					if w.PredictedFullSeconds != nil && tr > 0 {
						w.Error = ptr(*w.PredictedFullSeconds/tr - 1)
					}
				}
				rep.Warnings = append(rep.Warnings, w)
				open = len(rep.Warnings) - 1
			} else if open >= 0 {
				rep.Warnings[open].ClearedAt = ptr(ev.Time)
				open = -1
			}
		}
	}
	sum := e.Summary()
	rep.Summary = Totals{Raised: sum.Raised, Reclaims: sum.Reclaims, Refused: sum.Refused,
		MaxThresholdBytes: sum.MaxThresholdBytes, ThresholdRaised: sum.ThresholdRaisedSamples > 0, Verdict: sum.Verdict}
	for _, at := range walls {
		w := Wall{At: at}
		for i := len(rep.Warnings) - 1; i >= 0; i-- {
			wr := rep.Warnings[i]
			if !wr.RaisedAt.After(at) && (wr.ClearedAt == nil || wr.ClearedAt.After(at)) {
				w.Warned, w.LeadSeconds = true, ptr(at.Sub(wr.RaisedAt).Seconds())
				break
			}
		}
		rep.Walls = append(rep.Walls, w)
		rep.Summary.Walls++
		if w.Warned {
			rep.Summary.WallsWarned++
			if rep.Summary.MinLeadSeconds == nil || *w.LeadSeconds < *rep.Summary.MinLeadSeconds {
				rep.Summary.MinLeadSeconds = ptr(*w.LeadSeconds)
			}
		}
	}
	return rep
}

func ptr[T any](v T) *T { return &v }

// fullTimes are the moments the series became full: a sample at 0 bytes available after
// one above it (or the first sample).
func fullTimes(s Series) []time.Time {
	var out []time.Time
	full := false
	for _, p := range s.Points {
		if p.AvailBytes == 0 && !full {
			out = append(out, p.Time)
		}
		full = p.AvailBytes == 0
	}
	return out
}

func nextAfter(ts []time.Time, t time.Time) (time.Time, bool) {
	for _, x := range ts {
		if !x.Before(t) {
			return x, true
		}
	}
	return time.Time{}, false
}

func entry(ev Event) Entry {
	e := Entry{Time: ev.Time, Kind: ev.Kind.String(), Condition: ev.Condition, Reason: ev.Reason, Message: ev.Message,
		AvailBytes: ev.AvailBytes, GrowthBytesPerSecond: ev.GrowthBytesPerSecond, GrowthWindow: api.Duration(ev.GrowthWindow),
		ReclaimThresholdBytes: ev.ReclaimThresholdBytes, Trigger: ev.Trigger, Rung: ev.Rung,
		TargetBytes: ev.TargetBytes, DeficitBytes: ev.DeficitBytes, Blocked: ev.Blocked}
	if ev.PredictedFullSeconds >= 0 {
		e.PredictedFullSeconds = ptr(ev.PredictedFullSeconds)
	}
	return e
}

// Print writes the report for a person: the timeline, one line an event, then the summary.
func (r Report) Print(w io.Writer) {
	for _, e := range r.Events {
		ts := e.Time.UTC().Format("2006-01-02T15:04:05Z")
		switch e.Kind {
		case "raised", "cleared":
			line := fmt.Sprintf("%s  %-8s %s (%s): %s", ts, e.Kind, e.Condition, e.Reason, e.Message)
			if e.Kind == "raised" && e.Condition == api.CondDiskFillingUp {
				if e.lead > 0 {
					line += fmt.Sprintf("; the series was full %s later (lead time %s)", api.FormatSeconds(e.lead.Seconds()), api.FormatSeconds(e.lead.Seconds()))
				} else {
					line += "; the series never became full after it"
				}
			}
			fmt.Fprintln(w, line)
		case "reclaim":
			fmt.Fprintf(w, "%s  %-8s would start (trigger %s, rung %s): %s free, target %s (short %s; reclaim threshold %s)\n",
				ts, "reclaim", e.Trigger, e.Rung, api.FormatSize(e.AvailBytes), api.FormatSize(e.TargetBytes), api.FormatSize(e.DeficitBytes), api.FormatSize(e.ReclaimThresholdBytes))
		case "reclaim-refused":
			fmt.Fprintf(w, "%s  %-8s refused (trigger %s): %s\n", ts, "reclaim", e.Trigger, e.Blocked)
		}
	}
	fmt.Fprintln(w, r.SummaryLine())
}

// SummaryLine is the one-line verdict of the backtest.
func (r Report) SummaryLine() string {
	s := r.Summary
	var b strings.Builder
	fmt.Fprintf(&b, "summary: %d samples over %s (every %s); DiskFillingUp raised %d",
		r.Samples, api.FormatSeconds(r.End.Sub(r.Start).Seconds()), api.FormatDuration(r.Interval.D()), s.Raised[api.CondDiskFillingUp])
	fmt.Fprintf(&b, ", DiskPressure %d, ReplaceRecommended %d", s.Raised[api.CondDiskPressure], s.Raised[api.CondReplaceRecommended])
	fmt.Fprintf(&b, "; full %d times, %d warned", s.Walls, s.WallsWarned)
	if s.MinLeadSeconds != nil {
		fmt.Fprintf(&b, " (shortest lead %s)", api.FormatSeconds(*s.MinLeadSeconds))
	}
	fmt.Fprintf(&b, "; %d reclaims would start, %d refused", s.Reclaims, s.Refused)
	if s.ThresholdRaised {
		fmt.Fprintf(&b, "; adaptive threshold rose to %s", api.FormatSize(s.MaxThresholdBytes))
	} else {
		fmt.Fprintf(&b, "; adaptive threshold never rose")
	}
	fmt.Fprintf(&b, "; verdict at the end: %s", s.Verdict)
	return b.String()
}
