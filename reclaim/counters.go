package reclaim

import (
	"maps"

	"github.com/sandboxd/sandboxd/api"
)

// RunKey labels sandboxd_reclaim_runs_total.
type RunKey struct{ Trigger, Verdict string }

// ActionKey labels sandboxd_reclaim_actions_total.
type ActionKey struct{ Kind, Status string }

// Counters are the reclaim package's monotonic counts, for the daemon's metrics.
type Counters struct {
	Runs       map[RunKey]int64
	FreedBytes map[string]int64 // by source
	FreedFiles map[string]int64 // by source
	Actions    map[ActionKey]int64
	// RefilledBytes is what came back after settled prunes, by cache name.
	RefilledBytes map[string]int64
	// Walks counts directory reads and size walks done by runs: a healthy run does none.
	Walks int64
}

// Triggers of a reclaim run.
const (
	TriggerLaunch   = "launch"
	TriggerResume   = "resume"
	TriggerStartup  = "startup"
	TriggerPressure = "pressure"
	TriggerManual   = "manual"
)

func newCounters() Counters {
	c := Counters{Runs: map[RunKey]int64{}, FreedBytes: map[string]int64{}, FreedFiles: map[string]int64{}, Actions: map[ActionKey]int64{}, RefilledBytes: map[string]int64{}}
	// Known series exist from start-up at zero.
	for _, t := range []string{TriggerLaunch, TriggerResume, TriggerStartup, TriggerPressure, TriggerManual} {
		for _, v := range []string{api.VerdictHealthy, api.VerdictReclaimed, api.VerdictLow, api.VerdictReplace} {
			c.Runs[RunKey{t, v}] = 0
		}
	}
	for _, k := range []string{api.ActionPruneSite, api.ActionCommand, api.ActionDelete, api.ActionReleaseReserve} {
		for _, s := range []string{api.ActionDone, api.ActionPlanned, api.ActionSkipped, api.ActionFailed, api.ActionObserved} {
			c.Actions[ActionKey{k, s}] = 0
		}
	}
	return c
}

// Counters returns a copy of the counters.
func (r *Reclaimer) Counters() Counters {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counters
	return Counters{Runs: maps.Clone(c.Runs), FreedBytes: maps.Clone(c.FreedBytes), FreedFiles: maps.Clone(c.FreedFiles), Actions: maps.Clone(c.Actions), RefilledBytes: maps.Clone(c.RefilledBytes), Walks: c.Walks}
}

// count adds a finished run to the counters. Freed figures count done actions only.
func (r *Reclaimer) count(run *api.ReclaimRun, walks int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counters.Runs[RunKey{run.Trigger, run.Verdict}]++
	r.counters.Walks += walks
	for _, a := range run.Actions {
		r.counters.Actions[ActionKey{a.Kind, a.Status}]++
		if a.Status == api.ActionDone && a.Source != "" {
			r.counters.FreedBytes[a.Source] += max(a.FreedBytes, 0)
			r.counters.FreedFiles[a.Source] += max(a.FreedFiles, 0)
		}
	}
}
