package reclaim

import (
	"time"
)

// A load-bearing cache (issue 28) is one whose pruned content is downloaded again on its
// next use: pruning it only trades free space now for a slow re-fetch later, and the disk
// is back where it was within the hour. RefillHistory measures that per cache from size
// walks: its size right after each prune, and again (at most RefillWindow later) until
// half of what the prune freed is back or the window closes. A cache that got back at
// least half within the window after each of its last ThrashPrunes prunes is thrashing
// (condition CacheThrashing): the ladder then takes it last.
//
// The type is pure bookkeeping (no I/O), so the fleet simulator (cmd/sandboxd-sim) runs
// the same rule on its model of a disk as the daemon runs on real walks.

const (
	// RefillWindow is how long after a prune a refill counts.
	RefillWindow = time.Hour
	// ThrashPrunes is how many consecutive refilled prunes make a cache thrashing.
	ThrashPrunes = 3
	// refillKept bounds the prunes remembered per cache.
	refillKept = 8
)

// Prune is one prune of a cache and what came back after it.
type Prune struct {
	At         time.Time `json:"at"`
	FreedBytes int64     `json:"freed_bytes"`
	// SizeAfter is the cache's size walked right after the prune; -1 until walked (a
	// walk cut by the call's deadline is done at the next refill check).
	SizeAfter int64 `json:"size_after_bytes"`
	// Baseline is the cache's own growth before the prune (bytes per second, from the
	// background sizing): new content it would have taken in anyway is not a refill.
	Baseline float64 `json:"baseline_bytes_per_second,omitempty"`
	// Regained is the most the cache grew back above SizeAfter plus its baseline growth
	// within RefillWindow.
	Regained  int64     `json:"regained_bytes"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// Settled: the window closed, or half of FreedBytes is back (Refilled).
	Settled  bool `json:"settled"`
	Refilled bool `json:"refilled"`
}

// RefillHistory is the prunes of one cache, oldest first.
type RefillHistory struct {
	Name   string    `json:"name"`           // the cache's name: the condition's subject
	Since  time.Time `json:"since,omitzero"` // when Thrashing last changed
	Prunes []Prune   `json:"prunes"`
}

// Pruned records a prune at `at` that freed `freed` bytes, leaving the cache at sizeAfter
// bytes (-1: not walked yet), of a cache that grew by baseline bytes per second before
// it (GrowthBaseline; 0: unknown). An earlier prune still in its window is settled first
// with the size the cache had just before this one (sizeAfter + freed): a new prune cuts
// its window short. It returns what the prunes it settled got back (see settle).
func (h *RefillHistory) Pruned(at time.Time, freed, sizeAfter int64, baseline float64) (regained int64) {
	if freed <= 0 {
		return 0
	}
	if sizeAfter >= 0 {
		regained += h.Observe(at, sizeAfter+freed)
	}
	for i := range h.Prunes {
		if !h.Prunes[i].Settled {
			regained += h.settle(&h.Prunes[i])
		}
	}
	h.Prunes = append(h.Prunes, Prune{At: at, FreedBytes: freed, SizeAfter: sizeAfter, CheckedAt: at, Baseline: max(baseline, 0)})
	if len(h.Prunes) > refillKept {
		h.Prunes = append([]Prune(nil), h.Prunes[len(h.Prunes)-refillKept:]...)
	}
	return regained
}

// Observe feeds a size walk of the cache done at `at`. A prune not yet walked takes this
// size as its SizeAfter; open prunes within their window note what came back; those past
// it are settled by what they saw. It returns what the prunes it settled got back.
func (h *RefillHistory) Observe(at time.Time, size int64) (regained int64) {
	for i := range h.Prunes {
		p := &h.Prunes[i]
		if p.Settled {
			continue
		}
		if p.SizeAfter < 0 {
			p.SizeAfter, p.CheckedAt = size, at
			continue
		}
		if at.Sub(p.At) <= RefillWindow {
			p.Regained = max(p.Regained, size-p.SizeAfter-int64(p.Baseline*at.Sub(p.At).Seconds()))
			p.CheckedAt = at
			if 2*p.Regained >= p.FreedBytes {
				regained += h.settle(p)
			}
			continue
		}
		regained += h.settle(p)
	}
	return regained
}

// Expire settles the prunes whose window closed by `at` without a walk in it that saw
// them refill (a cache that is gone, or a daemon that was down).
func (h *RefillHistory) Expire(at time.Time) (regained int64) {
	for i := range h.Prunes {
		if p := &h.Prunes[i]; !p.Settled && at.Sub(p.At) > RefillWindow {
			regained += h.settle(p)
		}
	}
	return regained
}

// settle closes p's window and returns what came back after it, up to what it freed:
// the bytes downloaded again because of that prune (sandboxd_cache_refilled_bytes_total).
func (h *RefillHistory) settle(p *Prune) int64 {
	p.Settled = true
	p.Refilled = p.SizeAfter >= 0 && 2*p.Regained >= p.FreedBytes
	return min(max(p.Regained, 0), p.FreedBytes)
}

// Open reports whether a prune is still in its window (a walk is still wanted).
func (h *RefillHistory) Open() bool {
	for _, p := range h.Prunes {
		if !p.Settled {
			return true
		}
	}
	return false
}

// Thrashing reports whether each of the last ThrashPrunes settled prunes refilled.
func (h *RefillHistory) Thrashing() bool {
	n := 0
	for i := len(h.Prunes) - 1; i >= 0 && n < ThrashPrunes; i-- {
		p := h.Prunes[i]
		if !p.Settled {
			continue
		}
		if !p.Refilled {
			return false
		}
		n++
	}
	return n == ThrashPrunes
}

// baselineMax is how old a sizing may be to give a cache's growth before a prune.
const baselineMax = 2 * time.Hour

// GrowthBaseline is a cache's own growth rate before a prune at `at`, in bytes per second:
// from its last background sizing (sized bytes at sizedAt) to its size just before the
// prune. A cache that is simply growing (new packages arriving) grows back after a prune
// without anything being downloaded again; only growth beyond this rate is a refill.
// 0 when the sizing is missing, in the future or older than 2 hours.
func GrowthBaseline(sized int64, sizedAt time.Time, sizeBefore int64, at time.Time) float64 {
	d := at.Sub(sizedAt)
	if sizedAt.IsZero() || d <= 0 || d > baselineMax || sizeBefore <= sized {
		return 0
	}
	return float64(sizeBefore-sized) / d.Seconds()
}
