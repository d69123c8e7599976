package reclaim

import (
	"fmt"
	"time"
)

// stateDoc is the name of the reclaim package's document in the state dir.
const stateDoc = "reclaim.json"

// rateState is what CONTRACT §6.4 needs to survive a restart.
type rateState struct {
	// LastRun is when the ladder last ran on each filesystem (any trigger: a purge is a
	// purge, and the disk filling again after one is the sign to replace, not to repeat).
	LastRun map[string]time.Time `json:"last_run"`
	// LastFreed is what that run freed on each filesystem, in bytes: a disk below its
	// threshold again within the cooldown after a purge that freed space is the sign to
	// replace; after one that freed nothing it is not ("filled again after a purge"
	// paged a host where nothing had been purged, issue 23).
	LastFreed map[string]int64 `json:"last_freed,omitempty"`
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
	if s.LastFreed == nil {
		s.LastFreed = map[string]int64{}
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

// cooldown is what the reclaim cooldown says of one automatic climb: until when it holds
// (zero: it does not), and what the run that started it freed and when.
type cooldown struct {
	until, last time.Time
	freed       int64
}

// cooldownFor is the cooldown in force on fs for trigger. The cooldown limits only the
// expensive rungs (the tools' commands and whole-cache deletions, which the tools refill):
// the cheap and certain ones (leftover trash, expired site entries, cache entries past
// min_age) run inside it, so it never hides space (issue 23).
func (r *Reclaimer) cooldownFor(trigger, fs string) cooldown {
	if !automatic(trigger) {
		return cooldown{}
	}
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.rate.LastRun[fs]
	if !ok || now.Sub(last) >= r.opts.Cooldown || now.Sub(last) <= -r.opts.Cooldown {
		return cooldown{}
	}
	return cooldown{until: last.Add(r.opts.Cooldown), last: last, freed: r.rate.LastFreed[fs]}
}

// rateLimited says why trigger must not climb the expensive rungs again this hour ("" when
// it may): reclaim.max_runs_per_hour counts the runs that climbed them.
func (r *Reclaimer) rateLimited(trigger string) string {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.rate.Runs[trigger] {
		if now.Sub(t) < time.Hour {
			n++
		}
	}
	if n >= r.opts.MaxRunsPerHour {
		return fmt.Sprintf("trigger %s ran the ladder %d times in the last hour, reclaim.max_runs_per_hour is %d", trigger, n, r.opts.MaxRunsPerHour)
	}
	return ""
}

// blockedBy says why an automatic reclaim would be held on fs ("" when it would not): the
// pressure loop's episode bookkeeping asks it.
func (r *Reclaimer) blockedBy(trigger, fs string) string {
	if c := r.cooldownFor(trigger, fs); !c.until.IsZero() {
		return "reclaim.cooldown holds until " + c.until.UTC().Format("15:04:05")
	}
	return r.rateLimited(trigger)
}

// recordRun notes a climb of the expensive rungs on the filesystems in ran (with what each
// freed) and persists it: only such a climb starts the cooldown and counts against
// max_runs_per_hour, whatever its trigger, so a writer's resume that only pruned expired
// entries neither waits for nor starts the automatic cooldown.
func (r *Reclaimer) recordRun(trigger string, ran map[string]int64) {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rate.LastFreed == nil {
		r.rate.LastFreed = map[string]int64{}
	}
	for fs, freed := range ran {
		r.rate.LastRun[fs] = now
		r.rate.LastFreed[fs] = freed
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
