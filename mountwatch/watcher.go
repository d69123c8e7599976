package mountwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Watcher probes the configured FUSE mounts and heals them. Its supervisor loop (Run)
// never touches a mount itself: probes and fsyncs run in child processes, and each
// mount's refresh or remediation runs in at most one worker goroutine at a time.
type Watcher struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex // guards mounts, counters, limits and every field of each mount
	mounts   []*mount
	counters Counters
	limits   *Limits // caps on registrations, checked in Add under mu; nil: none

	servers probeServers // the probe children, one per mount owner (own lock)

	reconf chan struct{}
	// observe is Options.Observe as New or SetObserve last set it.
	observe atomic.Bool
}

// mount is the watcher's view of one configured mount; w.mu guards every field. Its
// state comes in groups, embedded so a field reads as m.state, m.backoff, m.credStamp:
// where the mount sits (mounted), what the probes found (probeState), the remedies
// (remedyState), the credential (credState), the symlinks (linkState) and, for a mount
// registered at run time, its registration (regState, registry.go).
type mount struct {
	cfg MountConfig
	mounted
	probeState
	remedyState
	credState
	linkState
	regState
}

// mounted is where the mount sits, from the last mountinfo read.
type mounted struct {
	entry   mountEntry // topmost mountinfo entry at the path, when present
	present bool       // a FUSE mount sits at the path
	conn    uint32     // connection number, recorded while mounted (abort needs it after umount -l)
	hasConn bool
}

// probeState is what the probe rounds found, and the next round.
type probeState struct {
	probed     bool // at least one round finished
	state      string
	errno, op  string
	msg        string // what the last failure said, for the detail line
	since      time.Time
	failStreak int

	lastProbeAt  time.Time
	lastProbeDur float64
	nextProbe    time.Time // monotonic
	probe        *child    // the one outstanding probe child, nil when none
}

// remedyState is the remediation of an unhealthy mount: refresh, abort, remount, with
// their backoff and the remount budget.
type remedyState struct {
	busy bool // a refresh, remediation or link-repair worker runs (one at a time)
	// cancelRemedy cancels the remediation worker's context while one runs (nil
	// otherwise): a release stops a remount in flight instead of waiting for it.
	cancelRemedy context.CancelFunc
	remounting   bool
	refreshTried bool // refresh already tried in this unhealthy episode
	nextRemedy   time.Time
	backoff      time.Duration
	remountTimes []time.Time
	remounts     int64
}

// credState is the mount's credential file as last read, and when to refresh it next.
type credState struct {
	cred        credential
	credStamp   fileStamp
	credNextTry time.Time
	credBackoff time.Duration
	// credExpiredSeen: the expiry of the current credential was already reported.
	credExpiredSeen bool
	// credReading: a read of the credential file is outstanding (reloadCredential).
	credReading bool
}

// linkState is the symlinks kept pointing into the mount.
type linkState struct {
	links       []api.Link
	guarded     bool
	observedFix map[string]bool // observe mode: what was already reported as "would do"
}

// New validates the options and returns a Watcher; Run starts it.
func New(opts Options) (*Watcher, error) {
	ms, err := validateMounts(opts.Mounts)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.FusectlDir == "" {
		opts.FusectlDir = "/sys/fs/fuse/connections"
	}
	if len(opts.ProbeCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the probe binary: %w", err)
		}
		opts.ProbeCommand = []string{exe, "mount-probe"}
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = defaultCommandTimeout
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 5 * time.Minute
	}
	if opts.Tick <= 0 {
		opts.Tick = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w := &Watcher{opts: opts, log: log, reconf: make(chan struct{}, 1)}
	w.counters = newCounters()
	w.mounts = w.build(ms, nil)
	w.observe.Store(opts.Observe)
	return w, nil
}

// SetObserve switches observe mode (a reload that changed [server] mode): from the next
// remedy on, fixes are only reported ("would") or performed again. Probe state stays.
func (w *Watcher) SetObserve(on bool) { w.observe.Store(on) }

// build makes the mount list for cfgs, keeping the state of mounts whose name and path
// did not change.
func (w *Watcher) build(cfgs []MountConfig, old []*mount) []*mount {
	byName := map[string]*mount{}
	for _, m := range old {
		byName[m.cfg.Name] = m
	}
	out := make([]*mount, 0, len(cfgs)+len(old))
	for _, c := range cfgs {
		if m, ok := byName[c.Name]; ok && m.cfg.Path == c.Path {
			m.cfg = c
			out = append(out, m)
			continue
		}
		out = append(out, &mount{cfg: c, probeState: probeState{state: api.MountMissing, since: w.opts.Now()},
			linkState: linkState{observedFix: map[string]bool{}}})
		w.counters.ensure(c.Name)
	}
	for _, m := range old {
		if m.reg != nil { // registered at run time: a reload of the file keeps it
			out = append(out, m)
		}
	}
	return out
}

// clashes names the configured mounts whose name or path a registered mount already
// holds; caller holds w.mu.
func (w *Watcher) clashes(cfgs []MountConfig) error {
	var errs []error
	for _, c := range cfgs {
		for _, m := range w.mounts {
			if m.reg != nil && (m.cfg.Name == c.Name || m.cfg.Path == c.Path) {
				errs = append(errs, fmt.Errorf("mount %q (%s): the name or path is held by the mount %q registered at run time; DELETE /v1/mounts/%s first",
					c.Name, c.Path, m.cfg.Name, m.cfg.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// Reconfigure replaces the mount list; mounts whose name and path stay keep their state.
func (w *Watcher) Reconfigure(mounts []MountConfig) error {
	ms, err := validateMounts(mounts)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if err := w.clashes(ms); err != nil {
		w.mu.Unlock()
		return err
	}
	w.mounts = w.build(ms, w.mounts)
	w.mu.Unlock()
	w.emit(api.EventConfig, "mounts", fmt.Sprintf("%d mounts configured", len(ms)), nil)
	select {
	case w.reconf <- struct{}{}:
	default:
	}
	return nil
}

// Run is the supervisor loop: discovery, probe rounds, credential checks against the
// wall clock, remediation scheduling. It returns nil when ctx ends; probe children still
// stuck in a hung mount are left to their reapers.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.tick())
	defer t.Stop()
	defer w.servers.closeAll()
	last := time.Now()
	w.step(ctx, 0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.reconf:
			t.Reset(w.tick()) // a reload may have lowered a probe interval
			w.step(ctx, 0)
		case now := <-t.C:
			w.step(ctx, now.Sub(last))
			last = now
		}
	}
}

// tick is the loop's period: Options.Tick, lowered to the smallest probe interval.
func (w *Watcher) tick() time.Duration {
	tick := w.opts.Tick
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.mounts {
		if m.cfg.ProbeInterval < tick {
			tick = m.cfg.ProbeInterval
		}
	}
	return tick
}

// step is one pass of the loop over every mount. It never blocks on a mount.
// With no mount configured it reads nothing: Others reads mountinfo when asked.
func (w *Watcher) step(ctx context.Context, elapsed time.Duration) {
	w.mu.Lock()
	none := len(w.mounts) == 0
	w.mu.Unlock()
	if none {
		return
	}
	entries, err := readMountinfo(w.opts.ProcRoot)
	if err != nil && len(entries) == 0 {
		w.log.Warn("mountwatch: cannot read mountinfo", "err", err)
	}
	now := time.Now()
	w.mu.Lock()
	mounts := append([]*mount(nil), w.mounts...)
	w.discover(entries)
	w.mu.Unlock()
	for _, m := range mounts {
		w.mu.Lock()
		if elapsed > 0 && m.probed && m.state != api.MountHealthy {
			w.counters.UnhealthySeconds[m.cfg.Name] += elapsed.Seconds()
		}
		due := !m.remounting && !now.Before(m.nextProbe)
		if due {
			m.nextProbe = now.Add(m.cfg.ProbeInterval)
		}
		w.mu.Unlock()
		w.checkCredential(ctx, m)
		if due {
			w.round(ctx, m)
			w.verifyLinks(m)
		}
		w.maybeGuard(m)
		w.maybeRemediate(ctx, m)
	}
}

// emit records an event; the event log writes its one log line (seq, fields, and the
// component among them). Logging here as well wrote every mount event twice.
func (w *Watcher) emit(kind, subject, msg string, fields map[string]any) {
	if w.opts.Events == nil {
		w.log.Info("mountwatch: "+msg, "kind", kind, "subject", subject)
		return
	}
	f := make(map[string]any, len(fields)+1)
	maps.Copy(f, fields)
	f["component"] = "mountwatch"
	w.opts.Events(api.Event{Time: w.opts.Now(), Kind: kind, Subject: subject, Message: msg, Fields: f})
}
