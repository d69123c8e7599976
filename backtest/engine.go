package backtest

import (
	"maps"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
	"github.com/sandboxd/sandboxd/pressure"
	"github.com/sandboxd/sandboxd/reclaim"
)

// Sample is one reading of the filesystem, as statfs would give it.
type Sample struct {
	AvailBytes, SizeBytes uint64
	// FilesFree and Files are the inode figures; Files 0 means none (no inode limit, or
	// not in the series): inode thresholds do not apply.
	FilesFree, Files uint64
}

// Config is the policy a backtest runs: one [[filesystem]] entry and the [health] and
// [reclaim] settings that bear on it. FromConfig fills it from a sandboxd.toml.
type Config struct {
	// Filesystem is the [[filesystem]] entry; its Path names the filesystem in events
	// (default "/").
	Filesystem pressure.FSConfig
	// Pressure gives SampleInterval (the series' own spacing, default 1s: it sizes the
	// estimator's levels), TransitionPeriod, LeadTime and GrowthWindow; other fields are
	// not used.
	Pressure pressure.Options
	// Headroom and HeadroomInodes are [reclaim] headroom*: where a reclaim stops above
	// the threshold.
	Headroom       int64
	HeadroomInodes units.Threshold
	// Cooldown and MaxRunsPerHour pace automatic reclaims ([reclaim] cooldown,
	// max_runs_per_hour; 0 runs per hour: the default 6).
	Cooldown       time.Duration
	MaxRunsPerHour int
	// PollInterval is how often the reclaim component checks for pressure (default 10s,
	// the daemon's).
	PollInterval time.Duration
	// Ladder, when set, models what a reclaim run started at t with deficit bytes to free
	// would reach and free; nil: the rung is "ladder" and nothing is freed.
	Ladder func(t time.Time, deficitBytes uint64) (rung string, freedBytes uint64)
}

// Kind is what an Event is about.
type Kind uint8

// Kinds of events.
const (
	// ConditionRaised: a condition turned true (Condition, Reason, Message).
	ConditionRaised Kind = iota + 1
	// ConditionCleared: a condition turned false after its transition period.
	ConditionCleared
	// ReclaimStarted: the policy would start a pressure reclaim (Trigger, Rung,
	// TargetBytes/TargetFiles, DeficitBytes).
	ReclaimStarted
	// ReclaimRefused: below the threshold again while the cooldown or the hourly cap
	// holds (Blocked); the daemon raises ReplaceRecommended instead.
	ReclaimRefused
)

func (k Kind) String() string {
	switch k {
	case ConditionRaised:
		return "raised"
	case ConditionCleared:
		return "cleared"
	case ReclaimStarted:
		return "reclaim"
	case ReclaimRefused:
		return "reclaim-refused"
	}
	return "unknown"
}

// Event is one decision of the policy at Time, with the figures it was taken on.
type Event struct {
	Time      time.Time
	Kind      Kind
	Condition string // api.Cond* of a raised or cleared condition
	Reason    string // the condition's reason ("PredictedFull", "AvailBelowReclaimThreshold")
	Message   string // the condition's message, as /v1/status would show it

	AvailBytes, SizeBytes uint64
	GrowthBytesPerSecond  float64
	GrowthWindow          time.Duration
	// PredictedFullSeconds is the predicted time to full; negative: no prediction.
	PredictedFullSeconds  float64
	ReclaimThresholdBytes uint64

	Trigger                  string // reclaim.TriggerPressure
	Rung                     string // the rung the run would reach (Config.Ladder), else "ladder"
	TargetBytes, TargetFiles uint64 // where the ladder would stop
	DeficitBytes             uint64 // target − avail
	FreedBytes               uint64 // what Config.Ladder said the run frees
	Blocked                  string // why a run was refused
}

// State is the engine's view after the last Step.
type State struct {
	Time    time.Time
	Figures api.Filesystem // as /v1/status would show the filesystem
	// StaticThresholdBytes is reclaim_below resolved against the size; Figures'
	// ReclaimThresholdBytes above it is the adaptive threshold risen with growth.
	StaticThresholdBytes uint64
	Verdict              string // api.VerdictHealthy, api.VerdictLow (below the reclaim threshold), api.VerdictReplace
	FillingUp, Pressure  bool   // DiskFillingUp, DiskPressure or InodePressure true
	Replace              bool   // ReplaceRecommended true
}

// ThresholdRaised reports whether the adaptive threshold stands above the static one.
func (s State) ThresholdRaised() bool {
	return s.Figures.ReclaimThresholdBytes > s.StaticThresholdBytes
}

// Summary counts what a run of the engine did.
type Summary struct {
	Samples    int
	Start, End time.Time
	// Raised counts raises per condition type.
	Raised map[string]int
	// FirstFillingUp is when DiskFillingUp was first raised (zero: never).
	FirstFillingUp time.Time
	Reclaims       int // ReclaimStarted
	Refused        int // ReclaimRefused
	// ThresholdRaisedSamples counts samples whose adaptive threshold stood above the
	// static one; MaxThresholdBytes is the highest threshold seen.
	ThresholdRaisedSamples int
	MaxThresholdBytes      uint64
	Verdict                string // at the last sample
}

// Engine is one filesystem's pressure and reclaim policy on a simulated clock.
type Engine struct {
	cfg      Config
	tr       *pressure.Tracker
	pace     reclaim.Pacing
	nextPoll time.Time
	lowSeen  bool
	events   []Event
	state    State
	sum      Summary
}

// New returns an engine for cfg.
func New(cfg Config) *Engine {
	if cfg.Filesystem.Path == "" {
		cfg.Filesystem.Path = "/"
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 10 * time.Second
	}
	e := &Engine{cfg: cfg, tr: pressure.NewTracker(cfg.Filesystem, cfg.Pressure)}
	e.pace = reclaim.Pacing{Cooldown: cfg.Cooldown, MaxRunsPerHour: cfg.MaxRunsPerHour}
	e.sum.Raised = map[string]int{}
	return e
}

// Step applies the sample taken at t (after the previous one) and returns the policy's
// decisions at t. The slice is reused by the next Step.
func (e *Engine) Step(t time.Time, s Sample) []Event {
	e.events = e.events[:0]
	fig, flips := e.tr.Sample(api.Filesystem{
		SizeBytes: s.SizeBytes, AvailBytes: s.AvailBytes,
		Files: s.Files, FilesFree: s.FilesFree, SampledAt: t,
	})
	for i := range flips {
		e.conditionEvent(t, fig, &flips[i])
	}
	e.state.Time, e.state.Figures = t, fig
	e.state.StaticThresholdBytes = e.cfg.Filesystem.ReclaimBelow.Resolve(fig.SizeBytes)
	if !t.Before(e.nextPoll) {
		e.nextPoll = t.Add(e.cfg.PollInterval)
		e.reclaimTick(t, fig)
	}
	e.state.FillingUp = e.tr.True(api.CondDiskFillingUp)
	e.state.Pressure = e.tr.True(api.CondDiskPressure) || e.tr.True(api.CondInodePressure)
	e.state.Replace = e.tr.True(api.CondReplaceRecommended)
	switch {
	case e.state.Replace || fig.BelowReplace():
		e.state.Verdict = api.VerdictReplace
	case fig.AvailBytes < fig.ReclaimThresholdBytes || (fig.Files > 0 && fig.FilesFree < fig.ReclaimThresholdFiles):
		e.state.Verdict = api.VerdictLow
	default:
		e.state.Verdict = api.VerdictHealthy
	}
	e.count(fig)
	return e.events
}

// conditionEvent turns a condition flip of the tracker into an Event.
func (e *Engine) conditionEvent(t time.Time, fig api.Filesystem, ev *api.Event) {
	typ, _ := ev.Fields["type"].(string)
	status, _ := ev.Fields["status"].(bool)
	reason, _ := ev.Fields["reason"].(string)
	out := e.figuresEvent(t, fig, ConditionCleared)
	if status {
		out.Kind = ConditionRaised
		e.sum.Raised[typ]++
		if typ == api.CondDiskFillingUp && e.sum.FirstFillingUp.IsZero() {
			e.sum.FirstFillingUp = t
		}
	}
	out.Condition, out.Reason, out.Message = typ, reason, e.tr.Condition(typ).Message
	e.events = append(e.events, out)
}

func (e *Engine) figuresEvent(t time.Time, fig api.Filesystem, k Kind) Event {
	ev := Event{Time: t, Kind: k, AvailBytes: fig.AvailBytes, SizeBytes: fig.SizeBytes,
		GrowthBytesPerSecond: fig.GrowthBytesPerSecond, GrowthWindow: fig.GrowthWindow.D(),
		PredictedFullSeconds: -1, ReclaimThresholdBytes: fig.ReclaimThresholdBytes}
	if fig.PredictedFullSeconds != nil {
		ev.PredictedFullSeconds = *fig.PredictedFullSeconds
	}
	return ev
}

// reclaimTick is the reclaim component's pressure check (reclaim.Reclaimer.tick) on the
// simulated clock: the first check of a low episode runs (or is refused once), later
// checks within the cooldown only renew ReplaceRecommended.
func (e *Engine) reclaimTick(t time.Time, fig api.Filesystem) {
	need, targetBytes, targetFiles := reclaim.PressureNeed(fig, e.cfg.Headroom, e.cfg.HeadroomInodes)
	if !need {
		e.lowSeen = false
		return
	}
	why := e.pace.Blocked(t)
	if why != "" && e.lowSeen {
		e.markReplace(t, fig, why)
		return
	}
	first := !e.lowSeen
	e.lowSeen = true
	ev := e.figuresEvent(t, fig, ReclaimStarted)
	ev.Trigger, ev.TargetBytes, ev.TargetFiles = reclaim.TriggerPressure, targetBytes, targetFiles
	if targetBytes > fig.AvailBytes {
		ev.DeficitBytes = targetBytes - fig.AvailBytes
	}
	if why != "" {
		if first {
			ev.Kind, ev.Blocked = ReclaimRefused, why
			e.sum.Refused++
			e.events = append(e.events, ev)
		}
		e.markReplace(t, fig, why)
		return
	}
	e.pace.Record(t)
	ev.Rung = "ladder"
	if e.cfg.Ladder != nil {
		ev.Rung, ev.FreedBytes = e.cfg.Ladder(t, ev.DeficitBytes)
		e.tr.OwnFree(int64(min(ev.FreedBytes, 1<<62)))
	}
	e.sum.Reclaims++
	e.events = append(e.events, ev)
}

func (e *Engine) markReplace(t time.Time, fig api.Filesystem, why string) {
	if flip, ok := e.tr.MarkReplace(t, why); ok {
		e.conditionEvent(t, fig, &flip)
	}
}

func (e *Engine) count(fig api.Filesystem) {
	if e.sum.Samples == 0 {
		e.sum.Start = e.state.Time
	}
	e.sum.Samples++
	e.sum.End = e.state.Time
	e.sum.Verdict = e.state.Verdict
	if e.state.ThresholdRaised() {
		e.sum.ThresholdRaisedSamples++
	}
	e.sum.MaxThresholdBytes = max(e.sum.MaxThresholdBytes, fig.ReclaimThresholdBytes)
}

// OwnWrite accounts bytes sandboxd itself wrote on the filesystem (its reserve file;
// negative: freed): they never count as growth.
func (e *Engine) OwnWrite(bytes int64) { e.tr.OwnWrite(bytes) }

// OwnFree accounts bytes sandboxd itself freed (a reclaim a driver modelled itself, a
// site prune).
func (e *Engine) OwnFree(bytes int64) { e.tr.OwnFree(bytes) }

// State returns the engine's view after the last Step.
func (e *Engine) State() State { return e.state }

// Conditions returns every condition, true or false, as /v1/status would list them.
func (e *Engine) Conditions() []api.Condition { return e.tr.Conditions() }

// Summary returns what the engine did so far.
func (e *Engine) Summary() Summary {
	s := e.sum
	s.Raised = maps.Clone(s.Raised)
	return s
}
