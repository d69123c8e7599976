package pressure

import (
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Tracker is the pressure logic of one filesystem without statfs: the growth estimator,
// the prediction, the adaptive thresholds and the conditions with their hysteresis, fed
// samples (and sandboxd's own writes and frees) by its caller on the caller's clock. It
// runs the very code a Watcher runs on each answered statfs (fsState.step); sandboxd
// backtest and the fleet simulator drive it from a recorded or simulated series.
//
// A Tracker is not safe for concurrent use. It renders the conditions' messages only when
// one flips (a true condition keeps the message and severity of its last flip), so a
// sample that changes no condition allocates nothing.
type Tracker struct {
	fs     *fsState
	conds  *condSet
	lead   time.Duration
	lazy   lazyStates // a Tracker's condSet never forgets
	events []api.Event
}

// NewTracker returns a Tracker of cfg under opts' SampleInterval, TransitionPeriod,
// LeadTime and GrowthWindow (defaults as for New); opts' Filesystems, clock, events,
// logger and proc root are not used. cfg.Path names the filesystem in figures, conditions
// and messages; nothing is read from it.
func NewTracker(cfg FSConfig, opts Options) *Tracker {
	opts = opts.withDefaults()
	fs := &fsState{cfg: cfg, growth: newGrowth(opts.GrowthWindow, opts.SampleInterval)}
	fs.fig = api.Filesystem{Path: cfg.Path, SizeSetting: cfg.SizeSetting}
	return &Tracker{fs: fs, conds: newCondSet(opts.TransitionPeriod), lead: opts.LeadTime}
}

// Sample applies one sample taken at f.SampledAt: its SizeBytes, AvailBytes, FreeBytes
// (0: taken as AvailBytes), Files and FilesFree; the rest is filled in. Samples must come
// in time order (an older or equal time is ignored by the growth estimator, as a
// Watcher's are). It returns the resulting figures and the condition flips of this sample;
// the events' slice is reused by the next call.
func (t *Tracker) Sample(f api.Filesystem) (api.Filesystem, []api.Event) {
	f.Path, f.SizeSetting = t.fs.cfg.Path, t.fs.cfg.SizeSetting
	if f.FreeBytes == 0 {
		f.FreeBytes = f.AvailBytes
	}
	if f.UsedRatio == 0 {
		f.UsedRatio = api.UsedRatioOf(f.SizeBytes, f.FreeBytes, f.AvailBytes)
	}
	t.events = t.fs.step(f, t.conds, t.lead, &t.lazy, t.events[:0])
	return t.fs.fig, t.events
}

// OwnWrite accounts bytes sandboxd itself wrote on the filesystem (negative: freed), as
// Watcher.OwnWrite does: they never count as growth.
func (t *Tracker) OwnWrite(bytes int64) { t.fs.growth.ownWrite(bytes) }

// OwnFree accounts bytes sandboxd itself freed (a reclaim, a site prune), as
// Watcher.OwnFree does.
func (t *Tracker) OwnFree(bytes int64) {
	if bytes > 0 {
		t.fs.growth.ownWrite(-bytes)
	}
}

// Figures returns the figures of the last sample.
func (t *Tracker) Figures() api.Filesystem { return copyFig(t.fs.fig) }

// Condition returns the condition typ of the filesystem (false, zero Since, until the
// first sample evaluates it).
func (t *Tracker) Condition(typ string) api.Condition {
	if st, ok := t.conds.m[condKey{typ, t.fs.cfg.Path}]; ok {
		return st.c
	}
	return api.Condition{Type: typ, Subject: t.fs.cfg.Path}
}

// True reports whether the condition typ of the filesystem is true, without the lookup
// of Condition for the four pressure types.
func (t *Tracker) True(typ string) bool {
	if t.lazy.ok {
		for i, p := range pressureTypes {
			if p == typ {
				return t.lazy.sts[i].c.Status
			}
		}
	}
	return t.Condition(typ).Status
}

// Conditions returns every condition seen, true or false, in first-seen order.
func (t *Tracker) Conditions() []api.Condition { return t.conds.list() }

// MarkReplace raises ReplaceRecommended at now on the reclaim component's word, as
// Watcher.MarkReplace does; it returns the flip, if any.
func (t *Tracker) MarkReplace(now time.Time, reason string) (api.Event, bool) {
	f := t.fs.fig
	msg := f.Path + ": reclaim cannot keep it healthy: " + reason + ": replace the sandbox"
	return t.conds.observe(now, signal{
		typ: api.CondReplaceRecommended, subject: f.Path, raw: true,
		reason: "MarkedByReclaim", message: msg, severity: sevCritical,
		fields: map[string]any{"mark": reason},
	})
}
