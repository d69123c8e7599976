package retention

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
	"github.com/sandboxd/sandboxd/internal/state"
)

// SiteConfig is one [[site]] of the config.
type SiteConfig struct {
	Name      string
	Path      string
	OwnerUIDs []uint32      // uids besides root that may own the site root
	MaxAge    time.Duration // jobs whose newest entry is older are pruned (reason age); 0 = never
	MinAge    time.Duration // jobs younger are never pruned for count or size
	MaxFiles  int64         // 0 = no count limit
	MaxBytes  int64         // 0 = no size limit
	// DrainRate is how many files per second the background drain deletes; 0 = no limit.
	// While Options.FullSpeed says the site's filesystem is under pressure: no limit.
	DrainRate int
	// Guards are directories the root must not be, contain or lie inside (protected
	// paths) or be or contain (the state dir), compared by device and inode.
	Guards []safefs.Guarded
}

// Options configure a Manager.
type Options struct {
	Sites []SiteConfig
	// State keeps first-seen pids across restarts; nil = memory only.
	State *state.Store
	// Observe computes and reports what would be pruned and deletes nothing.
	Observe bool
	// Now is the wall clock, injected by tests. Ages are computed with it; liveness never is.
	Now    func() time.Time
	Events func(api.Event)
	Logger *slog.Logger
	// ProcRoot is where procfs is mounted ("/proc").
	ProcRoot string
	// ReconcileInterval is the period of the full rescan and root re-check (default 5m).
	ReconcileInterval time.Duration
	// LivenessInterval is the period of the background liveness refresh (default 1s).
	LivenessInterval time.Duration
	// Jobs, when set, is the job registry (CONTRACT §11): a site job it holds counts as
	// running, whatever its pid file and locks say — a stronger signal than a pid file.
	Jobs JobHolder
	// FullSpeed reports whether the filesystem that holds a site's path has DiskPressure
	// or InodePressure: the drain then ignores its rate (nil: never).
	FullSpeed func(sitePath string) bool
	// CmdlineTimeout bounds a read of /proc/PID/cmdline, which can block behind a FUSE page
	// fault of that process (default 200ms).
	CmdlineTimeout time.Duration
	// OwnFree accounts bytes a prune or drain freed at a site's path as sandboxd's own
	// free, so that the filesystem's growth rate stays the net rate of others' writes
	// (nil: not accounted).
	OwnFree func(path string, bytes int64)

	// afterMute, when set (tests only), runs in the drain right after it muted the site's
	// IN_DELETE events (drainLoop).
	afterMute func(*rawWatch)
}

// JobHolder is what retention needs of the job registry; declared here so that retention
// does not import jobs (the daemon wires one to the other).
type JobHolder interface {
	// Holds says whether the registered job id of site still has processes.
	Holds(site, id string) bool
}

// Defaults for zero Options fields.
const (
	DefaultReconcileInterval = 5 * time.Minute
	DefaultLivenessInterval  = time.Second
	DefaultCmdlineTimeout    = 200 * time.Millisecond
)

// ErrUnknownSite is returned (wrapped with the name) for a site that is not configured.
var ErrUnknownSite = errors.New("unknown site")

// Prune reasons, the reason label of sandboxd_site_pruned_files_total.
const (
	ReasonAge   = "age"
	ReasonCount = "count"
	ReasonBytes = "bytes"
)

func (o *Options) setDefaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.ReconcileInterval <= 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	if o.LivenessInterval <= 0 {
		o.LivenessInterval = DefaultLivenessInterval
	}
	if o.CmdlineTimeout <= 0 {
		o.CmdlineTimeout = DefaultCmdlineTimeout
	}
}

func validateSites(sites []SiteConfig) error {
	var errs []error
	seen := map[string]bool{}
	for i, s := range sites {
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("site %d: name is empty", i))
		case seen[s.Name]:
			errs = append(errs, fmt.Errorf("site %q: configured twice", s.Name))
		}
		seen[s.Name] = true
		if !filepath.IsAbs(s.Path) {
			errs = append(errs, fmt.Errorf("site %q: path %q is not absolute", s.Name, s.Path))
		}
		if s.MaxAge < 0 || s.MinAge < 0 || s.MaxFiles < 0 || s.MaxBytes < 0 || s.DrainRate < 0 {
			errs = append(errs, fmt.Errorf("site %q: negative limit", s.Name))
		}
	}
	return errors.Join(errs...)
}
