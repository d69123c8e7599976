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
//
// A lazy step (a Tracker's, lazy not nil) renders the conditions' messages only when one
// flips: between flips a true condition keeps the message and severity of its last flip,
// so a sample that changes no condition allocates nothing. The Watcher is not lazy:
// status shows every message as of the last sample.
func (fs *fsState) step(f api.Filesystem, conds *condSet, lead time.Duration, lazy *lazyStates, events []api.Event) []api.Event {
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
	r := fs.thresholds(f.SizeBytes, f.Files, est.slow, lead)
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
	if lazy != nil && !lazy.ok {
		lazy.sts, lazy.ok = conds.pressureStates(f.Path)
	}
	if lazy != nil && lazy.ok {
		raws := rawSignals(f, r, fs.cfg.WarnTimeToFull)
		if !conds.wouldFlip(now, &lazy.sts, raws) {
			touch(now, &lazy.sts, raws)
			return events
		}
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

// lazyStates are the states of a filesystem's pressure conditions (pressureTypes) once
// they all exist (ok), for a lazy step; valid while the condSet does not forget them.
type lazyStates struct {
	sts [4]*condState
	ok  bool
}

// thrKey is what resolved thresholds depend on besides the filesystem's config.
type thrKey struct {
	size, files uint64
	slow        float64
	lead        time.Duration
}

// thresholds resolves fs's thresholds, reusing the last answer (and its strings) while
// nothing they depend on changed: the growth rate moves only when a bucket completes.
func (fs *fsState) thresholds(size, files uint64, slow float64, lead time.Duration) resolved {
	k := thrKey{size, files, slow, lead}
	if fs.thrOK && fs.thrKey == k {
		return fs.thr
	}
	fs.thr, fs.thrKey, fs.thrOK = resolveThresholds(fs.cfg, size, files, slow, lead), k, true
	return fs.thr
}

// pressureTypes are the condition types of evaluate, in its order.
var pressureTypes = [4]string{api.CondDiskPressure, api.CondInodePressure, api.CondDiskFillingUp, api.CondReplaceRecommended}

// rawSignals is evaluate's raw signals alone, in pressureTypes' order, without a
// message: TestRawSignalsAgreeWithEvaluate keeps the two the same.
func rawSignals(f api.Filesystem, r resolved, warn time.Duration) [4]bool {
	pred := f.PredictedFullSeconds
	return [4]bool{
		f.SizeBytes > 0 && f.AvailBytes < r.reclaim,
		f.Files > 0 && f.FilesFree < r.reclaimInodes,
		warn > 0 && pred != nil && *pred < warn.Seconds(),
		(f.SizeBytes > 0 && f.AvailBytes < r.replace) || (f.Files > 0 && f.FilesFree < r.replaceInodes),
	}
}
