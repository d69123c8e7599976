package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/safefs"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/units"
)

// Ladder limits of a cache: how far reclaim may go with it.
const (
	LadderGC      = "gc"      // only the tool's own garbage collection
	LadderEntries = "entries" // also single entries, oldest first
	LadderAll     = "all"     // also the whole cache and the tool's wipe command
)

// CacheConfig is one [[reclaim.cache]] entry (or a discovered cache).
type CacheConfig struct {
	Name    string
	Path    string
	Command []string // the cache's garbage collection (ladder rung 2), run as the root's owner
	Order   int      // position in the ladder, lower first
	Ladder  string   // gc | entries | all (default all)
	// Kind, when it names an auto kind ("pnpm", "go-build", ...), gives a declared root
	// that kind's entry layout and commands; empty means "top-level entries".
	Kind string
}

// ReserveConfig is the reserve file of one [[filesystem]].
type ReserveConfig struct {
	Filesystem string // the [[filesystem]] path
	Path       string // resolved reserve file
	Bytes      int64
}

// Options configure a Reclaimer. Zero values take the defaults named on each field; a zero
// Cooldown, MinAge or Headroom means zero.
type Options struct {
	Caches     []CacheConfig
	AutoCaches []string // kinds to discover (see kinds.go)
	Protect    []string
	// Guards are directories a cache root must not be or contain (protected paths, the
	// state dir), compared by device and inode each time a root is opened.
	Guards   []safefs.Guarded
	MinAge   time.Duration // entries younger than this are never deleted by rung 3
	Headroom int64         // bytes above the reclaim threshold to reclaim to
	// HeadroomInodes is resolved against the filesystem's f_files.
	HeadroomInodes units.Threshold
	// Cooldown spaces automatic runs per filesystem; 0 means no cooldown, as [reclaim]
	// cooldown = "0s" says (a default in its place made a launch at 0 B free answer
	// "reclaim freed 0 B" beside an hour of reclaimable cache, issue 10).
	Cooldown       time.Duration
	MaxRunsPerHour int // per trigger (default 6)
	Reserves       []ReserveConfig
	Filesystems    []string // watched paths
	HomeRoots      []string // globs where auto caches are found (default /root, /home/*)
	AptArchives    string   // default /var/cache/apt/archives
	DpkgLock       string   // default /var/lib/dpkg/lock-frontend
	// Measure is a fresh statfs of path with the effective thresholds filled in.
	Measure func(ctx context.Context, path string) (api.Filesystem, error)
	// PruneSites is ladder rung 1 (expired site entries), provided by the daemon.
	PruneSites func(ctx context.Context, dryRun bool) []api.Action
	// SiteUsage is the bytes and files all sites hold (an upper bound of rung 1, for
	// Meetable); nil counts none.
	SiteUsage func() (bytes, files int64)
	// MarkReplace holds a filesystem's verdict at replace (ReplaceRecommended).
	MarkReplace func(fsPath, reason string)
	// Answered tells the watcher that a reclaim which freed space answered a filesystem,
	// so the conditions it fixed clear at once (pressure.Watcher.Answered).
	Answered func(fsPath string)
	State    *state.Store
	Observe  bool
	// Offline ([reclaim] offline): the sandbox cannot download, so caches that only a
	// download refills stop at rung 2 (their own gc); build outputs and site entries are
	// still reclaimed.
	Offline bool
	Now     func() time.Time
	Events  func(api.Event)
	Logger  *slog.Logger
	// CommandTimeout bounds each gc or wipe command (default 2m); its process group is
	// killed at the timeout.
	CommandTimeout time.Duration

	// ProcRoot is where /proc is mounted (default /proc): mountinfo, locks, cmdlines.
	ProcRoot string
	// LookPath finds a tool (default exec.LookPath); tests restrict which tools exist.
	LookPath func(name string) (string, error)
	// PollInterval is how often Run measures for the pressure trigger (default 10s);
	// ReserveInterval how often it re-arms reserves where there is room (default 1s);
	// SizeInterval how often it re-sizes caches for status (default 10m).
	PollInterval, ReserveInterval, SizeInterval time.Duration
	// OwnWrite declares a write sandboxd itself is about to make at path (negative: fewer
	// bytes were written), so that it is not read as growth (nil: not declared).
	OwnWrite func(path string, bytes int64)
	// OwnFree accounts bytes sandboxd itself freed at path (a deletion, a gc or wipe
	// command, the reserve released), so that the growth rate stays the net rate of
	// others' writes (nil: not accounted). Site prunes are accounted by retention.
	OwnFree func(path string, bytes int64)
	// RefillInterval is how often Run walks the caches pruned within the last hour to
	// see what came back (default 5m; CacheThrashing).
	RefillInterval time.Duration
	// SizeBudget caps the entries one Size walk visits (default 200,000).
	SizeBudget int64
	// UsageBudget bounds the largest-directories walk of a replace verdict (default 2s).
	UsageBudget time.Duration
	// PlanBudget bounds the sizing of a dry-run plan (default 1.5s), so a plan answers
	// within 2 s whatever the size of the caches.
	PlanBudget time.Duration
}

func (o Options) withDefaults() Options {
	o.Cooldown = max(o.Cooldown, 0)
	if o.MaxRunsPerHour <= 0 {
		o.MaxRunsPerHour = 6
	}
	if o.HomeRoots == nil {
		o.HomeRoots = []string{"/root", "/home/*"}
	}
	if o.AptArchives == "" {
		o.AptArchives = "/var/cache/apt/archives"
	}
	if o.DpkgLock == "" {
		o.DpkgLock = "/var/lib/dpkg/lock-frontend"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 2 * time.Minute
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 10 * time.Second
	}
	if o.ReserveInterval <= 0 {
		o.ReserveInterval = time.Second
	}
	if o.SizeInterval <= 0 {
		o.SizeInterval = 10 * time.Minute
	}
	if o.RefillInterval <= 0 {
		o.RefillInterval = 5 * time.Minute
	}
	if o.SizeBudget <= 0 {
		o.SizeBudget = 200_000
	}
	if o.PlanBudget <= 0 {
		o.PlanBudget = 1500 * time.Millisecond
	}
	if o.UsageBudget <= 0 {
		o.UsageBudget = 2 * time.Second
	}
	if o.State == nil {
		o.State = state.Open("")
	}
	return o
}

// ErrBusy says another reclaim held the lock past the caller's deadline.
var ErrBusy = errors.New("another reclaim is running")

// Reclaimer runs the ladder. Its methods are safe for concurrent use; one reclaim runs at
// a time.
type Reclaimer struct {
	opts Options
	lock chan struct{} // one reclaim at a time: holding the token is holding the lock
	// loop is held by Run's goroutine while it polls or sizes: Reconfigure takes lock, then
	// loop, then mu, so every reader of the reloadable settings holds one of the three.
	loop chan struct{}
	// settings is held for writing by Reconfigure while it rewrites the reloadable options,
	// and for reading by callers outside lock and loop that read them (Meetable).
	settings sync.RWMutex

	lowSeen map[string]bool // filesystems low at the last poll; owned by Run's goroutine

	// reserves are the reserve states by filesystem, replaced whole (see reserveMap).
	reserves atomic.Pointer[map[string]*reserveState]

	mu         sync.Mutex // guards the fields below
	last       *api.ReclaimRun
	lastResume *api.ReclaimRun
	caches     []CacheInfo          // last discovery, with sizes from the background sizing or a prune's walk
	sized      map[string]CacheInfo // by path: the background sizing's last figures
	orphans    []string             // reserve files of an earlier config, removed at the next reserve tick
	counters   Counters
	rate       rateState
}

// New checks opts and returns a Reclaimer. It touches nothing on disk.
func New(opts Options) (*Reclaimer, error) {
	if opts.Measure == nil {
		return nil, errors.New("reclaim: Options.Measure is required")
	}
	if err := validate(opts); err != nil {
		return nil, err
	}
	r := &Reclaimer{
		opts:     opts.withDefaults(),
		lock:     make(chan struct{}, 1),
		loop:     make(chan struct{}, 1),
		counters: newCounters(),
		sized:    map[string]CacheInfo{},
	}
	r.loadRate()
	r.loadReserves(nil)
	return r, nil
}

// validate checks the settings a config file gives: ladders, kinds, cache roots.
func validate(opts Options) error {
	var errs []error
	for i, c := range opts.Caches {
		if c.Ladder != "" && c.Ladder != LadderGC && c.Ladder != LadderEntries && c.Ladder != LadderAll {
			errs = append(errs, fmt.Errorf("reclaim.cache[%d] (%s): ladder %q: want gc, entries or all", i, c.Name, c.Ladder))
		}
		if c.Kind != "" && kindByName(c.Kind) == nil {
			errs = append(errs, fmt.Errorf("reclaim.cache[%d] (%s): unknown kind %q", i, c.Name, c.Kind))
		}
	}
	for _, k := range opts.AutoCaches {
		if kindByName(k) == nil {
			errs = append(errs, fmt.Errorf("reclaim.auto_caches: unknown kind %q", k))
		}
	}
	errs = append(errs, ValidateCacheRoots(opts.Caches, opts.Protect)...)
	return errors.Join(errs...)
}

// emit records an event; the event log writes its one log line (with seq, and the
// component among the fields). Logging here as well wrote every reclaim event twice.
func (r *Reclaimer) emit(kind, subject, msg string, fields map[string]any) {
	if r.opts.Events == nil {
		r.opts.Logger.Info(msg, "kind", kind, "subject", subject)
		return
	}
	f := make(map[string]any, len(fields)+1)
	maps.Copy(f, fields)
	f["component"] = "reclaim"
	r.opts.Events(api.Event{Time: r.opts.Now(), Kind: kind, Subject: subject, Message: msg, Fields: f})
}
