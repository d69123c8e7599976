package reclaim

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// PressureNeed is the background tick's test of one measured filesystem, without a
// Reclaimer or a disk: whether a pressure reclaim is needed (below the reclaim threshold
// in bytes or inodes) and where the ladder would stop (threshold + headroom). The tick
// and sandboxd backtest both decide with it.
func PressureNeed(m api.Filesystem, headroom int64, headroomInodes units.Threshold) (need bool, targetBytes, targetFiles uint64) {
	f := newFSRun(m.Path, m, Request{}, headroom, headroomInodes.Resolve(m.Files), 0) // no reserve file here: none to re-arm
	return f.needed(0), f.targetBytes, f.targetFiles
}

// Pacing is the cooldown and the hourly cap of automatic runs (CONTRACT §6.4) of one
// filesystem and trigger, as a value a simulation keeps: the Reclaimer keeps the same
// figures in its state document and asks the same question (blockedReason).
type Pacing struct {
	Cooldown       time.Duration
	MaxRunsPerHour int // 0: the default, 6
	last           time.Time
	runs           []time.Time
}

// Blocked says why an automatic run must not start at now ("" when it may).
func (p *Pacing) Blocked(now time.Time) string {
	maxRuns := p.MaxRunsPerHour
	if maxRuns <= 0 {
		maxRuns = 6
	}
	return blockedReason(now, p.last, !p.last.IsZero(), p.runs, TriggerPressure, p.Cooldown, maxRuns)
}

// Record notes a run started at now.
func (p *Pacing) Record(now time.Time) {
	p.last = now
	kept := p.runs[:0]
	for _, t := range p.runs {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	p.runs = append(kept, now)
}

// blockedReason is the cooldown and hourly-cap rule: last is the filesystem's last run
// (ok false: none), runs the trigger's run starts.
func blockedReason(now, last time.Time, ok bool, runs []time.Time, trigger string, cooldown time.Duration, maxRuns int) string {
	if automatic(trigger) && ok && now.Sub(last) < cooldown && now.Sub(last) > -cooldown {
		return fmt.Sprintf("reclaim ran %s ago, within reclaim.cooldown %s: its expensive rungs wait",
			api.FormatDuration(now.Sub(last)), api.FormatDuration(cooldown))
	}
	n := 0
	for _, t := range runs {
		if now.Sub(t) < time.Hour {
			n++
		}
	}
	if n >= maxRuns {
		return fmt.Sprintf("trigger %s ran the ladder %d times in the last hour, reclaim.max_runs_per_hour is %d", trigger, n, maxRuns)
	}
	return ""
}
