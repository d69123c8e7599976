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
	fs.applyMark(&f, now, conds.transition)
	unchanged := fs.figures && !fs.retuned && sameLevels(fs.fig, f) && fs.fig.ReplaceMark == f.ReplaceMark
	fs.fig, fs.figures, fs.sampled, fs.retuned, fs.res = f, true, true, false, r
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
	return fs.evaluate(conds, now, false, events)
}

// evaluate observes fs's conditions from its last figures; answered says a reclaim that
// changed the disk has just answered them (Watcher.Answered).
func (fs *fsState) evaluate(conds *condSet, now time.Time, answered bool, events []api.Event) []api.Event {
	for _, s := range evaluate(fs.fig, fs.res, fs.cfg.WarnTimeToFull) {
		if answered {
			s.answered, s.raisedAfter = true, fs.answered
		}
		if fs.lapsed && s.typ == api.CondReplaceRecommended {
			s.now = true // a mark is reclaim's word, held for its own period already
		}
		if ev, ok := conds.observe(now, s); ok {
			events = append(events, ev)
		}
	}
	return events
}

// applyMark carries reclaim's replace mark into a sample's figures while it holds, and
// fills in the sample's verdict. A mark lapses once the figures are back at or above every
// reclaim threshold (the disk says otherwise: conditions follow the disk) or when it has
// not been renewed for the transition period.
func (fs *fsState) applyMark(f *api.Filesystem, now time.Time, transition time.Duration) {
	fs.lapsed = false
	if fs.mark != "" && (!f.BelowReclaim() || now.Sub(fs.markAt) >= transition) {
		fs.mark, fs.lapsed = "", true
	}
	f.ReplaceMark = fs.mark
	f.Verdict = f.Judge()
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
	return [4]bool{ // the predicates of the one verdict (api.Filesystem.Judge); f carries r
		f.BytesBelowReclaim(),
		f.InodesBelowReclaim(),
		warn > 0 && pred != nil && *pred < warn.Seconds(),
		f.BelowReplace() || f.ReplaceMark != "",
	}
}
