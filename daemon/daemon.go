package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/jobs"
	"github.com/sandboxd/sandboxd/systemd"
)

// supervisorPeriod is how often the supervisor loop runs; /livez fails after 3 periods.
const supervisorPeriod = time.Second

// Options configure a Daemon. Zero values take the defaults named on each field.
type Options struct {
	Config     *config.Config
	ConfigPath string // the file Reload re-reads; "" = embedded default only
	Logger     *slog.Logger
	// LogLevel is the handler's level, changed on reload (may be nil).
	LogLevel *slog.LevelVar
	Version  string
	Commit   string
	Now      func() time.Time
	ProcRoot string // default "/proc"
	// ProbeCommand runs a mount probe child (default: this executable, "mount-probe").
	ProbeCommand []string
	Notifier     *systemd.Notifier
	// Overrides are the serve flags, re-applied over the file on every reload.
	Overrides Overrides

	// stallSupervisor, when set (tests), is called at the top of every supervisor round.
	stallSupervisor func()
	// mountJobs, when set (tests), is the jobs registry registered mounts are tied to.
	mountJobs jobTie
	// growthWindow, when set (tests), replaces the 10m window of the growth rate, so a
	// test of a few seconds sees a rate at all.
	growthWindow time.Duration
	// stopGrace, when set (tests), replaces defaultStopGrace (stop.go).
	stopGrace time.Duration
}

// Daemon is one running sandboxd. Create it with New, run it with Run.
type Daemon struct {
	opts    Options
	logger  *slog.Logger
	now     func() time.Time
	events  *eventLog
	state   *state.Store
	notify  *systemd.Notifier
	selfUID uint32
	started time.Time
	baseCtx context.Context
	metrics *metrics
	health  *healthTracker

	statusCache statusCache

	reloadMu sync.Mutex // serialises reloads
	// restarter restarts remount units over D-Bus; it connects on first use.
	restarter *systemd.UnitRestarter

	cfgMu    sync.RWMutex // guards cfg, writersV and comps
	cfg      *config.Config
	writersV Writers
	comps    *components

	quarantineMu sync.Mutex         // guards quarantined
	quarantined  []quarantinedMount // saved registrations refused at start (mounts_quarantine.go)

	mountJobs jobTie // the jobs registry, for mounts tied to a job (nil: no tie)
	// jobReg is the job registry (jobs.go): built once, it outlives reloads.
	jobReg   *jobs.Manager
	activity atomic.Int64 // the last launch, registration or heartbeat, Unix ns

	lastLoop  atomic.Int64 // unix nanoseconds of the last supervisor round
	readySent atomic.Bool
	stopping  atomic.Bool // the stop began: no READY, no start-up work
	calls     callCount   // the calls being answered (stop.go)
	bg        background  // the goroutines Run waits for besides its own (stop.go)
	reloads   reloadStats
	persist   persistence
	booted    bootedFull // the marker of `sandboxd boot`, as the condition BootedFull
}

// Validate rejects what New would reject of cfg (unknown writers or site owners, a
// setting a component refuses), without reading or writing the state dir or the job
// registry and without a socket. `serve --wait-for-socket` runs it before it waits for
// the daemon it replaces: a rollout of a config New would refuse then exits at once and
// the old daemon goes on serving, rather than being stopped first for nothing.
func Validate(cfg *config.Config) error {
	d := &Daemon{opts: Options{Config: cfg, ProcRoot: "/proc", ProbeCommand: []string{"mount-probe"}},
		logger: slog.New(slog.DiscardHandler), now: time.Now, state: state.Open(""),
		restarter: &systemd.UnitRestarter{Logger: slog.New(slog.DiscardHandler)}}
	d.events = newEventLog(d.logger, d.now)
	if _, err := resolveWriters(cfg); err != nil {
		return err
	}
	_, err := d.newComponents(cfg, nil)
	return err
}

// New validates the config and builds the daemon and its components; nothing runs yet.
func New(opts Options) (*Daemon, error) {
	if opts.Config == nil {
		c, err := config.LoadOrDefault("")
		if err != nil {
			return nil, fmt.Errorf("embedded default config: %w", err)
		}
		opts.Config = c
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.Notifier == nil {
		opts.Notifier = &systemd.Notifier{}
	}
	if len(opts.ProbeCommand) == 0 {
		if exe, err := os.Executable(); err == nil {
			opts.ProbeCommand = []string{exe, "mount-probe"}
		}
	}
	d := &Daemon{
		opts:    opts,
		logger:  opts.Logger,
		now:     opts.Now,
		notify:  opts.Notifier,
		selfUID: uint32(os.Getuid()),
		started: opts.Now(),
		baseCtx: context.Background(),
	}
	d.events = newEventLog(d.logger, d.now)
	d.events.onRecord = d.statusCache.invalidate
	d.health = newHealthTracker(d.now, d.events.Record)
	w, err := resolveWriters(opts.Config)
	if err != nil {
		return nil, err
	}
	d.cfg, d.writersV = opts.Config, w
	d.state = state.Open(opts.Config.Server.StateDir)
	d.watchState() // a dir that cannot be used is one WARN line and StateNotPersistent
	d.restarter = &systemd.UnitRestarter{Logger: d.logger.With("component", "systemd")}
	comps, err := d.buildComponents(opts.Config)
	if err != nil {
		return nil, err
	}
	d.comps = comps
	if opts.mountJobs != nil {
		d.wireJobTie(opts.mountJobs)
	}
	d.state.OnWrite(d.stateWrite)
	d.loadBootMarker()
	d.metrics = newMetrics(d)
	d.reloads.record(true, d.now())
	d.lastLoop.Store(d.now().UnixNano())
	return d, nil
}

func resolveWriters(c *config.Config) (Writers, error) {
	uids, gids, err := c.Writers()
	if err != nil {
		return Writers{}, fmt.Errorf("server.writers: %w", err)
	}
	return Writers{UIDs: uids, GIDs: gids}, nil
}

func (d *Daemon) config() *config.Config {
	d.cfgMu.RLock()
	defer d.cfgMu.RUnlock()
	return d.cfg
}

func (d *Daemon) writers() Writers {
	d.cfgMu.RLock()
	defer d.cfgMu.RUnlock()
	return d.writersV
}

func (d *Daemon) current() *components {
	d.cfgMu.RLock()
	defer d.cfgMu.RUnlock()
	return d.comps
}

func (d *Daemon) observe() bool { return d.config().Server.Mode == api.ModeObserve }

// Run serves ln (the Unix socket) and, when non-nil, tcp (the loopback read-only
// listener) and runs every component until ctx ends. It reports READY=1 to systemd once
// /readyz would answer 200, and STOPPING=1 when ctx ends. The stop is graceful (stop.go):
// the listeners close at once, the calls in flight finish within the stop grace, then the
// components stop; Run returns once all of its goroutines have.
func (d *Daemon) Run(ctx context.Context, ln net.Listener, tcp net.Listener) error {
	// The components and the calls outlive ctx (the stop signal): runCtx ends once the
	// calls are done, the calls' base context when they finished or the grace passed.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	serveCtx, cutCalls := context.WithCancel(runCtx)
	defer cutCalls()
	d.baseCtx = serveCtx
	d.events.Record(api.Event{Kind: api.EventLifecycle, Subject: "sandboxd",
		Message: "daemon starting", Fields: map[string]any{"version": d.opts.Version, "mode": d.config().Server.Mode}})

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	d.current().start(runCtx, &wg)
	defer d.restarter.Close()
	d.goBackground(func() {
		// Which job a mount's job is, is the registry's to say: not before it is loaded
		// (another sandboxd may hold it still: jobs/acquire.go).
		select {
		case <-d.jobReg.Loaded():
			d.settleJobMounts(runCtx)
		case <-runCtx.Done():
		}
	})

	h := d.calls.counted(d.Handler())
	servers := []*http.Server{d.newHTTPServer(h)}
	serve := func(srv *http.Server, l net.Listener) {
		defer wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve %s: %w", l.Addr(), err)
		}
	}
	wg.Add(1)
	go serve(servers[0], ln)
	if tcp != nil {
		servers = append(servers, d.newHTTPServer(h))
		wg.Add(1)
		go serve(servers[1], tcp)
	}

	wg.Add(1)
	go func() { defer wg.Done(); d.runTextfile(runCtx) }()

	if iv, ok := systemd.WatchdogInterval(); ok {
		wd := &systemd.Watchdog{Notifier: d.notify, Interval: iv, Fresh: d.fresh, Logger: d.logger}
		wg.Add(1)
		go func() { defer wg.Done(); wd.Run(runCtx) }()
	}

	// The supervisor loop runs on while the calls in flight finish (the watchdog's pings
	// and /livez go on through the grace).
	var runErr error
	func() {
		t := time.NewTicker(supervisorPeriod)
		defer t.Stop()
		stop := ctx.Done()
		var drained chan struct{}
		begin := func() {
			stop = nil
			d.stopping.Store(true)
			d.notify.Stopping()
			d.events.Record(api.Event{Kind: api.EventLifecycle, Subject: "sandboxd", Message: "daemon stopping"})
			drained = make(chan struct{})
			go func() { defer close(drained); d.drain(servers, cutCalls) }()
		}
		for {
			d.supervise(runCtx)
			select {
			case <-stop:
				begin()
			case err := <-errc:
				if runErr == nil {
					runErr = err
				}
				if drained == nil {
					begin()
				}
			case <-drained:
				return
			case <-t.C:
			}
		}
	}()

	d.shutdownComponents()
	cutCalls()
	cancel()
	wg.Wait()
	d.closeBackground()
	return runErr
}

// fresh reports whether the supervisor loop and the sampling loop ran recently: the
// watchdog pings only then. A stale filesystem does not make the loops stale.
func (d *Daemon) fresh() bool {
	now := d.now()
	if now.Sub(time.Unix(0, d.lastLoop.Load())) > 3*supervisorPeriod {
		return false
	}
	return d.current().samplingFresh(now)
}

// supervise is one round of the supervisor loop: liveness stamp, readiness, health
// conditions, and the systemd status line.
func (d *Daemon) supervise(ctx context.Context) {
	if d.opts.stallSupervisor != nil {
		d.opts.stallSupervisor()
	}
	d.lastLoop.Store(d.now().UnixNano())
	c := d.current()
	if !d.readySent.Load() && !d.stopping.Load() && c.ready() {
		d.readySent.Store(true)
		d.notify.Ready()
		msg := "ready: first sample of every watched filesystem taken"
		if since, _ := d.jobReg.Held(); !since.IsZero() {
			msg += "; the job registry is still held by another sandboxd: job calls are refused until it is free (JobRegistryHeld)"
		}
		d.events.Record(api.Event{Kind: api.EventLifecycle, Subject: "sandboxd", Message: msg})
		d.goBackground(func() { c.onReady(ctx) })
	}
	d.retryPersist()
	h := d.healthNow()
	d.notify.Status(d.statusLine(h))
}
