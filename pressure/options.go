package pressure

import (
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// FSConfig is one [[filesystem]] entry: a path whose filesystem is watched and its policy.
type FSConfig struct {
	Path string
	// ReclaimBelow and ReplaceBelow are byte thresholds (size or percent of the size).
	// Zero never triggers.
	ReclaimBelow, ReplaceBelow units.Threshold
	// ReclaimBelowInodes and ReplaceBelowInodes are inode thresholds (count or percent of
	// f_files). They do not apply to a filesystem with no inode limit (f_files == 0).
	ReclaimBelowInodes, ReplaceBelowInodes units.Threshold
	// SizeSetting names what sizes this disk (free text, "" = none); every message about
	// the filesystem ends with it, so a full disk says where to grow it.
	SizeSetting string
	// WarnTimeToFull raises DiskFillingUp when the predicted time to full is shorter.
	// Zero disables the prediction condition.
	WarnTimeToFull time.Duration
}

// Options configure a Watcher. Zero values take the defaults named on each field, except
// TransitionPeriod and LeadTime, whose zero means what the config documents for "0s"
// (clear at once; static thresholds only), so the daemon's "0s" is never replaced by a
// default (issue 10).
type Options struct {
	Filesystems []FSConfig
	// SampleInterval is how often every filesystem is sampled (default 1s).
	SampleInterval time.Duration
	// TransitionPeriod is how long a condition must stay false before it clears; 0 clears
	// it at the first sample that shows the signal false ([health] transition_period).
	TransitionPeriod time.Duration
	// LeadTime scales the adaptive reclaim threshold: growth rate × LeadTime; 0 keeps the
	// static thresholds only ([reclaim] lead_time).
	LeadTime time.Duration
	// StatfsTimeout is how long a statfs may stay unanswered before its filesystem is
	// marked stale (default max(2 × SampleInterval, 1s); an explicit value is used as is).
	StatfsTimeout time.Duration
	// GrowthWindow is the sliding window of the growth rate (default 10m).
	GrowthWindow time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Events receives every condition flip (nil: dropped).
	Events func(api.Event)
	// Logger (nil: discard).
	Logger *slog.Logger
	// ProcRoot is where /proc is mounted, for self/mountinfo (default "/proc").
	ProcRoot string
	// ReserveBytes is what the reserve file of a watched filesystem (by its configured
	// path) holds on disk now; nil reports 0. The reclaim component owns the file, so the
	// figure is asked of it rather than taken from the config (issue 10).
	ReserveBytes func(fsPath string) uint64
	// ReserveReleasedBytes is the room of a released reserve not re-armed yet: free space
	// that is not the workload's (api.Filesystem.WorkloadAvail). nil: none.
	ReserveReleasedBytes func(fsPath string) uint64
}

func (o Options) withDefaults() Options {
	if o.SampleInterval <= 0 {
		o.SampleInterval = time.Second
	}
	o.TransitionPeriod = max(o.TransitionPeriod, 0)
	o.LeadTime = max(o.LeadTime, 0)
	if o.StatfsTimeout <= 0 {
		o.StatfsTimeout = max(2*o.SampleInterval, time.Second)
	}
	if o.GrowthWindow <= 0 {
		o.GrowthWindow = 10 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	return o
}
