package pressure

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Watcher samples the watched filesystems and keeps their figures and conditions.
// Its methods are safe for concurrent use.
type Watcher struct {
	opts   Options
	mounts *mountTable

	// interval and statfsTimeout are SampleInterval and StatfsTimeout as Reconfigure last
	// set them (nanoseconds); reconf tells Run to reset its ticker.
	interval, statfsTimeout atomic.Int64
	reconf                  chan struct{}

	probersMu sync.Mutex         // guards probers
	probers   map[string]*prober // by the lexical mountpoint of the measured path

	mu       sync.Mutex // guards fss' fields, conds and lastLoop
	fss      []*fsState
	conds    *condSet
	lastLoop time.Time

	// changes moves after every sample, staleness check, mark and reconfiguration, under
	// mu once its figures and conditions are in place: GET /v1/status keeps its document
	// until it moves (Changes).
	changes atomic.Uint64
}

// Changes is a counter that moves after every step that may change what Snapshot and
// Conditions show: each answered statfs, each loop tick (staleness, expiring marks), a
// replace mark, a reclaim's answer and a reconfiguration. It moves under the lock that
// publishes the new figures, so whoever can read them can read the moved counter.
func (w *Watcher) Changes() uint64 { return w.changes.Load() }

// fsState is one watched filesystem; its fields are guarded by Watcher.mu.
type fsState struct {
	cfg     FSConfig
	fig     api.Filesystem
	dev     uint64
	figures bool // fig holds figures from at least one answered statfs
	sampled bool // a first sample was taken (figures or an error)
	growth  *growth
	retuned bool // thresholds changed by Reconfigure: evaluate the next sample in full
	// thr is the last resolved thresholds, for thrKey (thrOK: there is one).
	thr    resolved
	thrKey thrKey
	thrOK  bool
	res    resolved // the last sample's thresholds, for a re-evaluation (Answered, MarkReplace)
	// mark is reclaim's word that the filesystem is to be replaced although its figures
	// are above replace_below* (MarkReplace), given at markAt; it holds while renewed
	// within the transition period and the figures stay below a reclaim threshold.
	mark     string
	markAt   time.Time
	answered time.Time // the last time a reclaim that changed the disk answered it
	lapsed   bool      // the mark lapsed at the last sample: its condition clears at once
}

// New returns a Watcher for opts (defaults applied). Paths are cleaned and made absolute.
func New(opts Options) *Watcher {
	opts = opts.withDefaults()
	w := &Watcher{
		opts:    opts,
		mounts:  newMountTable(opts.ProcRoot),
		probers: map[string]*prober{},
		conds:   newCondSet(opts.TransitionPeriod),
		reconf:  make(chan struct{}, 1),
	}
	w.interval.Store(int64(opts.SampleInterval))
	w.statfsTimeout.Store(int64(opts.StatfsTimeout))
	for _, c := range opts.Filesystems {
		c.Path = cleanPath(c.Path)
		fs := &fsState{cfg: c, growth: newGrowth(opts.GrowthWindow, opts.SampleInterval)}
		fs.fig = api.Filesystem{Path: c.Path, SizeSetting: c.SizeSetting}
		w.fss = append(w.fss, fs)
	}
	return w
}

func cleanPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// Run samples every filesystem each SampleInterval until ctx ends. The loop never waits
// for a statfs: each one runs on its own goroutine and records its result when it
// answers, so a hung filesystem goes stale while the loop (LastLoop) stays fresh.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(time.Duration(w.interval.Load()))
	defer t.Stop()
	defer w.mounts.close()
	for {
		w.tick(ctx, false)
		select {
		case <-ctx.Done():
			return nil
		case <-w.reconf:
			t.Reset(time.Duration(w.interval.Load()))
		case <-t.C:
		}
	}
}

// sampleOnce is one loop step that also waits (until ctx ends) for the statfs calls it
// started or found outstanding, so tests drive sampling deterministically.
func (w *Watcher) sampleOnce(ctx context.Context) { w.tick(ctx, true) }

func (w *Watcher) tick(ctx context.Context, wait bool) {
	now := w.opts.Now()
	w.mu.Lock()
	w.lastLoop = now
	fss := w.fss
	w.mu.Unlock()
	calls := make([]*call, 0, len(fss))
	for _, fs := range fss {
		c, _ := w.proberFor(fs.cfg.Path).begin(fs.cfg.Path, now, w.run)
		calls = append(calls, c)
	}
	if wait {
		for _, c := range calls {
			select {
			case <-c.done:
			case <-ctx.Done():
			}
		}
	}
	w.markStale(w.opts.Now())
	// The known ways' events are read on every tick too, so a daemon that no call asks
	// keeps a short inotify queue, and held sites no call asks about are let go (known.go).
	w.mounts.tickKnown()
}

// proberFor returns the prober of the filesystem that holds path by name. Keying by the
// lexical mountpoint needs no syscall on the path, so finding the prober cannot hang. A
// path that reaches another filesystem through a symlink is keyed by where its name
// lies; if that target hangs, the name's filesystem waits (and goes stale) with it.
func (w *Watcher) proberFor(path string) *prober {
	key := w.mounts.lexicalMount(path)
	if key == "" {
		key = path
	}
	w.probersMu.Lock()
	defer w.probersMu.Unlock()
	p := w.probers[key]
	if p == nil {
		p = &prober{}
		w.probers[key] = p
	}
	return p
}

// run is a call's goroutine: measure, record, then free the prober.
func (w *Watcher) run(p *prober, c *call) {
	if c.existing {
		c.at = ExistingAncestor(c.path)
	}
	c.fig, c.dev, c.err = measurePath(w.mounts, c.at, w.opts.Now())
	if c.err == nil {
		c.fig.SampledAt = w.opts.Now()
	}
	w.record(c)
	p.finish(c)
}

// runInline is run on the caller's goroutine, when measureInline can measure c there
// (inline.go); false, with c untouched, when the call is to go to a goroutine.
func (w *Watcher) runInline(p *prober, c *call) bool {
	fig, dev, at, ok := w.measureInline(c.path, c.existing, c.hold, w.opts.Now())
	if !ok {
		return false
	}
	c.at, c.fig, c.dev = at, fig, dev
	c.fig.SampledAt = w.opts.Now()
	p.mu.Lock()
	p.inline++
	p.mu.Unlock()
	w.record(c)
	p.finish(c)
	return true
}

// markStale flags every filesystem whose prober has had a call outstanding for longer
// than StatfsTimeout. Its last figures stay; a mark-only condition past its transition
// period is cleared on the same beat.
func (w *Watcher) markStale(now time.Time) {
	type staleness struct {
		fs      *fsState
		stale   bool
		started time.Time
	}
	var st []staleness
	timeout := time.Duration(w.statfsTimeout.Load())
	w.mu.Lock()
	fss := w.fss
	w.mu.Unlock()
	for _, fs := range fss {
		c, _ := w.proberFor(fs.cfg.Path).outstanding()
		s := staleness{fs: fs, stale: c != nil && now.Sub(c.started) >= timeout}
		if s.stale {
			s.started = c.started
		}
		st = append(st, s)
	}
	w.mu.Lock()
	var events []api.Event
	for _, s := range st {
		if s.stale && !s.fs.fig.Stale {
			w.opts.Logger.Warn("statfs does not answer; serving the last figures", "path", s.fs.cfg.Path, "timeout", timeout)
		}
		if s.stale {
			if ev, ok := w.hung(s.fs, s.started); ok {
				events = append(events, ev)
			}
		}
	}
	events = append(events, w.expireMarks(now)...)
	w.changes.Add(1)
	w.mu.Unlock()
	w.emit(events)
}

// record applies an answered call to every watched filesystem it measured: the one whose
// path it is, and any other on the same device (a Measure of a path on a watched
// filesystem is a fresh sample of it too).
func (w *Watcher) record(c *call) {
	var events []api.Event
	w.mu.Lock()
	for _, fs := range w.fss {
		same := fs.cfg.Path == c.at
		if c.err != nil {
			if same {
				if ev, ok := w.failed(fs, c.err, c.started); ok {
					events = append(events, ev)
				}
			}
			continue
		}
		if !same && (!(fs.figures && fs.dev == c.dev) || fs.fig.Error != "") {
			continue // a filesystem whose own statfs fails is cleared by its own answer only
		}
		if fs.fig.Stale {
			w.opts.Logger.Info("statfs answers again", "path", fs.cfg.Path)
		}
		events = append(events, w.apply(fs, c)...)
	}
	w.changes.Add(1)
	w.mu.Unlock()
	w.emit(events)
}

// apply turns a call's bare figures into fs's figures, growth, thresholds and conditions.
func (w *Watcher) apply(fs *fsState, c *call) []api.Event {
	f := c.fig
	f.Path, f.SizeSetting = fs.cfg.Path, fs.cfg.SizeSetting
	if w.opts.ReserveBytes != nil {
		f.ReserveBytes = w.opts.ReserveBytes(fs.cfg.Path)
	}
	if w.opts.ReserveReleasedBytes != nil {
		f.ReserveReleasedBytes = w.opts.ReserveReleasedBytes(fs.cfg.Path)
	}
	fs.dev = c.dev
	return fs.step(f, w.conds, w.opts.LeadTime, nil, nil)
}

// evaluateLocked observes fs's conditions from its last figures; answered says a reclaim
// that changed the disk has just answered them (Answered). Caller holds w.mu.
func (w *Watcher) evaluateLocked(fs *fsState, now time.Time, answered bool) []api.Event {
	return fs.evaluate(w.conds, now, answered, nil)
}

func (w *Watcher) emit(events []api.Event) {
	for _, ev := range events {
		if w.opts.Events == nil { // else the event log writes the line
			w.opts.Logger.Debug(ev.Message, "kind", ev.Kind, "subject", ev.Subject)
			continue
		}
		w.opts.Events(ev)
	}
}

// sameLevels reports whether two samples show the same space and inode levels.
func sameLevels(a, b api.Filesystem) bool {
	return a.SizeBytes == b.SizeBytes && a.AvailBytes == b.AvailBytes && a.ReserveReleasedBytes == b.ReserveReleasedBytes &&
		a.Files == b.Files && a.FilesFree == b.FilesFree
}
