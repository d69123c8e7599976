package backtest

import (
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
	"github.com/sandboxd/sandboxd/pressure"
)

// corpusConfig is the policy the corpus is scored under: the shipped defaults of the
// growth-related keys (warn_time_to_full 1h, lead_time 10m, transition_period 1m, the
// 10m growth window) at the trace's sample interval, reclaim_below 64 MiB.
func corpusConfig(interval time.Duration) Config {
	return Config{
		Filesystem: pressure.FSConfig{Path: "/sandbox", ReclaimBelow: units.Threshold{Amount: 64 << 20},
			ReplaceBelow: units.Threshold{Amount: 16 << 20}, WarnTimeToFull: time.Hour},
		Pressure: pressure.Options{SampleInterval: interval, TransitionPeriod: time.Minute, LeadTime: 10 * time.Minute},
		Headroom: 256 << 20, Cooldown: 10 * time.Minute,
	}
}

// score is how the policy did on a trace.
type score struct {
	detectDelay   time.Duration // first DiskFillingUp after the fill's start (or the first sample); -1: never
	deadline      time.Duration // max(10 s, 20 samples)
	maxTTFError   float64       // the worst |predicted/true − 1| while DiskFillingUp was true before the wall
	medTTFError   float64       // ... and the median
	ttfSamples    int
	fillingUps    int // DiskFillingUp raises
	raisedSamples int // samples with the adaptive threshold above the static one
	wall          time.Time
	window        time.Duration // growth_window at the first raise
	endFillingUp  bool          // at the last sample
	endRaised     bool
}

func runTrace(tr trace) (sc score) {
	e := New(corpusConfig(tr.interval))
	sc = score{detectDelay: -1, deadline: max(10*time.Second, 20*tr.interval)}
	for _, p := range tr.points {
		if p.avail == 0 && sc.wall.IsZero() {
			sc.wall = p.t
		}
	}
	start := tr.want.fillStart
	if len(tr.points) > 0 && start.Before(tr.points[0].t) {
		start = tr.points[0].t
	}
	var own int64
	var errs []float64
	defer func() {
		if len(errs) > 0 {
			slices.Sort(errs)
			sc.medTTFError = errs[len(errs)/2]
		}
	}()
	for _, p := range tr.points {
		if p.own != own {
			e.OwnWrite(p.own - own)
			own = p.own
		}
		quietNow := tr.want.quiet && !p.t.Before(tr.want.quietAfter)
		for _, ev := range e.Step(p.t, Sample{AvailBytes: p.avail, SizeBytes: p.size}) {
			if ev.Kind == ConditionRaised && ev.Condition == api.CondDiskFillingUp && (!tr.want.quiet || quietNow) {
				sc.fillingUps++
				if sc.detectDelay < 0 && tr.want.fill {
					sc.detectDelay = max(p.t.Sub(start), 0)
					sc.window = ev.GrowthWindow
				}
			}
		}
		st := e.State()
		sc.endFillingUp, sc.endRaised = st.FillingUp, st.ThresholdRaised()
		if st.ThresholdRaised() && (!tr.want.quiet || quietNow) {
			sc.raisedSamples++
		}
		if tr.want.fill && st.FillingUp && !sc.wall.IsZero() && p.t.After(start) {
			truth := sc.wall.Sub(p.t).Seconds()
			if pred := st.Figures.PredictedFullSeconds; pred != nil && truth >= 2*tr.interval.Seconds() && truth >= 5 {
				sc.ttfSamples++
				sc.maxTTFError = max(sc.maxTTFError, abs(*pred/truth-1))
				errs = append(errs, abs(*pred/truth-1))
			}
		}
	}
	return sc
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
