package pressure

import (
	"math"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// step is all the pressure logic of one answered sample: f's bare figures (f.SampledAt is
// the sample's time) become fs's figures, growth, prediction, thresholds and conditions,
// and every condition flip is appended to events. The Watcher runs it on what statfs
// answers; a Tracker runs it on a series (sandboxd backtest, the fleet simulator), so
// both run the same code.
func (fs *fsState) step(f api.Filesystem, conds *condSet, lead time.Duration, events []api.Event) []api.Event {
	now := f.SampledAt
	fs.growth.add(now, f.AvailBytes)
	est := fs.growth.estimate(now)
	if finite(est.rate) && est.rate > 0 {
		f.GrowthBytesPerSecond = est.rate
		f.GrowthWindow = api.Duration(est.window)
		secs := float64(f.AvailBytes) / est.rate
		if finite(secs) {
			f.PredictedFullSeconds = &secs
		}
	}
	r := resolveThresholds(fs.cfg, f.SizeBytes, f.Files, est.slow, lead)
	f.ReclaimThresholdBytes, f.ReclaimThresholdWhy = r.reclaim, r.why
	f.ReplaceThresholdBytes = r.replace
	f.ReclaimThresholdFiles, f.ReplaceThresholdFiles = r.reclaimInodes, r.replaceInodes
	unchanged := fs.figures && !fs.retuned && sameLevels(fs.fig, f)
	fs.fig, fs.figures, fs.sampled, fs.retuned = f, true, true, false
	if ev, ok := measuredAgain(conds, f); ok {
		events = append(events, ev)
	}
	if unchanged && !conds.anyTrue(f.Path) {
		// Rendering the messages is most of a sample's cost (Measure is on the launch hot
		// path). With the levels unchanged and nothing true, nothing can turn true: the
		// growth rate can only fall, which only lowers the adaptive threshold and lengthens
		// the prediction.
		return events
	}
	for _, s := range evaluate(f, r, fs.cfg.WarnTimeToFull) {
		if ev, ok := conds.observe(now, s); ok {
			events = append(events, ev)
		}
	}
	return events
}

// finite reports whether v is a finite number.
func finite(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }
