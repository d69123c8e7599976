package reclaim

import (
	"time"
)

// stateDoc is the name of the reclaim package's document in the state dir.
const stateDoc = "reclaim.json"

// rateState is what CONTRACT §6.4 needs to survive a restart.
type rateState struct {
	// LastRun is when the ladder last ran on each filesystem (any trigger: a purge is a
	// purge, and the disk filling again after one is the sign to replace, not to repeat).
	LastRun map[string]time.Time `json:"last_run"`
	// Runs are the start times of ladder runs in the last hour, per trigger.
	Runs map[string][]time.Time `json:"runs"`
	// Reserves are the reserve files' states, per filesystem.
	Reserves map[string]reserveDoc `json:"reserves,omitempty"`
	// Refills are the caches' prunes and what came back after them, by cache path
	// (CacheThrashing survives a restart).
	Refills map[string]*RefillHistory `json:"refills,omitempty"`
}

func (r *Reclaimer) loadRate() {
	var s rateState
	if err := r.opts.State.Load(stateDoc, &s); err != nil {
		r.opts.Logger.Warn("reclaim state unreadable, starting afresh", "err", err)
	}
	if s.LastRun == nil {
		s.LastRun = map[string]time.Time{}
	}
	if s.Runs == nil {
		s.Runs = map[string][]time.Time{}
	}
	if s.Reserves == nil {
		s.Reserves = map[string]reserveDoc{}
	}
	if s.Refills == nil {
		s.Refills = map[string]*RefillHistory{}
	}
	r.rate = s
}

// saveLocked writes the state document; r.mu is held. A state dir that refuses the write
// (full disk) keeps the state in memory: the store says so in status.
func (r *Reclaimer) saveLocked() {
	if err := r.opts.State.Save(stateDoc, r.rate); err != nil {
		r.opts.Logger.Debug("reclaim state kept in memory", "err", err)
	}
}

// automatic reports whether a trigger is subject to the cooldown.
func automatic(trigger string) bool { return trigger == TriggerPressure || trigger == TriggerLaunch }

// blockedBy says why the ladder must not run on fs for this trigger ("" when it may).
func (r *Reclaimer) blockedBy(trigger, fs string) string {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.rate.LastRun[fs]
	return blockedReason(now, last, ok, r.rate.Runs[trigger], trigger, r.opts.Cooldown, r.opts.MaxRunsPerHour)
}

// recordRun notes a ladder run on the filesystems in ran and persists it.
func (r *Reclaimer) recordRun(trigger string, ran []string) {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, fs := range ran {
		r.rate.LastRun[fs] = now
	}
	kept := r.rate.Runs[trigger][:0]
	for _, t := range r.rate.Runs[trigger] {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	r.rate.Runs[trigger] = append(kept, now)
	r.saveLocked()
}
