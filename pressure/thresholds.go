package pressure

import (
	"fmt"
	"math"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// adaptiveCap bounds the growth-scaled reclaim threshold in bytes, as BuildKit bounds its
// reserved space by min(10%, 10 GB): a burst of writes must not declare a large disk full.
const adaptiveCap = 10 << 30

// resolved holds the thresholds of one filesystem for one sample.
type resolved struct {
	reclaim, replace             uint64
	reclaimInodes, replaceInodes uint64
	why                          string // short, for reclaim_threshold_reason
	desc                         string // for messages: "filesystem.reclaim_below 1.5 GiB"
}

// resolveThresholds turns the configured thresholds into amounts for a filesystem of
// size bytes and files inodes. The reclaim threshold is adaptive: max(reclaim_below,
// growth × lead_time), the growth part capped at min(25% of size, 10 GiB) but never below
// the configured value. A configured reclaim_below of 0 means "never" and stays 0.
// Inode thresholds are 0 (never) when the filesystem has no inode limit (files == 0).
func resolveThresholds(cfg FSConfig, size, files uint64, rate float64, lead time.Duration) resolved {
	r := resolved{
		reclaim: cfg.ReclaimBelow.Resolve(size),
		replace: cfg.ReplaceBelow.Resolve(size),
	}
	if files > 0 {
		r.reclaimInodes = cfg.ReclaimBelowInodes.Resolve(files)
		r.replaceInodes = cfg.ReplaceBelowInodes.Resolve(files)
	}
	r.why = "reclaim_below " + thresholdText(cfg.ReclaimBelow.BytesString(), cfg.ReclaimBelow.Percent, r.reclaim)
	r.desc = "filesystem." + r.why
	if r.reclaim == 0 || rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return r
	}
	limit := min(size/4, adaptiveCap)
	adaptive := rate * lead.Seconds()
	capped := adaptive >= float64(limit)
	if capped {
		adaptive = float64(limit)
	}
	if uint64(adaptive) <= r.reclaim {
		return r
	}
	r.reclaim = uint64(adaptive)
	r.why = fmt.Sprintf("growth %s/s × lead_time %s", api.FormatSize(uint64(rate)), shortDuration(lead))
	if capped {
		r.why += fmt.Sprintf(", capped at %s", api.FormatSize(limit))
	}
	r.desc = fmt.Sprintf("the adaptive reclaim threshold %s (%s)", api.FormatSize(r.reclaim), r.why)
	return r
}

// thresholdText shows a percent threshold with the amount it resolved to.
func thresholdText(written string, percent bool, amount uint64) string {
	if percent {
		return fmt.Sprintf("%s (%s)", written, api.FormatSize(amount))
	}
	return written
}

// shortDuration renders 10m0s as "10m" and 1h30m0s as "1h30m": the one duration style
// of every message and the CLI (api.FormatDuration).
func shortDuration(d time.Duration) string { return api.FormatDuration(d) }
