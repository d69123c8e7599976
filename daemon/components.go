package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/jobs"
	"github.com/sandboxd/sandboxd/mountwatch"
	"github.com/sandboxd/sandboxd/pressure"
	"github.com/sandboxd/sandboxd/reclaim"
	"github.com/sandboxd/sandboxd/retention"
)

// components are the running parts built from one config. A reload reconfigures them in
// place (reconfigure.go); only a part that cannot change in place is replaced, and then
// in a new components value that shares run with the one it replaces.
type components struct {
	pressure *pressure.Watcher
	sites    *retention.Manager
	reclaim  *reclaim.Reclaimer
	mounts   *mountwatch.Watcher
	jobs     *jobs.Manager // the daemon's one registry, shared by every components value

	run *runner
}

// parts are the components' Run loops by name, in start order.
func (c *components) parts() []part {
	return []part{
		{"pressure", c.pressure.Run},
		{"retention", c.sites.Run},
		{"reclaim", c.reclaim.Run},
		{"mountwatch", c.mounts.Run},
		{"jobs", c.jobs.Run},
	}
}

// part is one component's loop.
type part struct {
	name string
	run  func(context.Context) error
}

// runner owns the goroutines of the running parts: one per name, each stoppable and
// waited for on its own, so a reload can stop a part and start its replacement without
// the two ever running at once.
type runner struct {
	logger *slog.Logger

	mu      sync.Mutex // guards the fields below
	ctx     context.Context
	wg      *sync.WaitGroup
	running map[string]runningPart
}

type runningPart struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs p under the runner's context; before Run (no context yet) it does nothing,
// as Run starts every part.
func (r *runner) start(p part) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	r.running[p.name] = runningPart{cancel, done}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		if err := p.run(ctx); err != nil && ctx.Err() == nil {
			r.logger.Error("component stopped", "component", p.name, "err", err)
		}
	}()
}

// stop ends the part name and waits until its Run returned.
func (r *runner) stop(name string) {
	r.mu.Lock()
	rp, ok := r.running[name]
	delete(r.running, name)
	r.mu.Unlock()
	if ok {
		rp.cancel()
		<-rp.done
	}
}

// ready: the first sample of every watched filesystem is taken, and the job registry is
// the daemon's (or the wait for the one another sandboxd held passed: jobs/acquire.go).
func (c *components) ready() bool { return c.pressure.Ready() && registrySettled(c.jobs) }

// notReady says what the daemon waits for before it is ready ("" once it is).
func (c *components) notReady() string {
	switch {
	case !c.pressure.Ready():
		return "waiting for the first sample of every watched filesystem"
	case !registrySettled(c.jobs):
		return "waiting for the job registry, held by another sandboxd (the one before this one, still stopping)"
	}
	return ""
}

func (c *components) reserveBytes(fs string) uint64 {
	if c.reclaim == nil {
		return 0
	}
	return uint64(max(c.reclaim.ReserveBytes(fs), 0))
}

// reserveReleased is the room of a released reserve not re-armed yet (not the workload's).
func (c *components) reserveReleased(fs string) uint64 {
	if c.reclaim == nil {
		return 0
	}
	return uint64(max(c.reclaim.ReleasedBytes(fs), 0))
}

func (c *components) samplingFresh(now time.Time) bool {
	last := c.pressure.LastLoop()
	return last.IsZero() || now.Sub(last) <= 10*time.Second
}

func (d *Daemon) pressureOptions(cfg *config.Config) pressure.Options {
	fss := make([]pressure.FSConfig, 0, len(cfg.Filesystems))
	for _, f := range cfg.Filesystems {
		fss = append(fss, pressure.FSConfig{
			Path: f.Path, ReclaimBelow: f.ReclaimBelow, ReplaceBelow: f.ReplaceBelow,
			ReclaimBelowInodes: f.ReclaimBelowInodes, ReplaceBelowInodes: f.ReplaceBelowInodes,
			WarnTimeToFull: f.WarnTimeToFull, SizeSetting: f.SizeSetting,
		})
	}
	return pressure.Options{
		Filesystems: fss, SampleInterval: cfg.Health.SampleInterval,
		TransitionPeriod: cfg.Health.TransitionPeriod, LeadTime: cfg.Reclaim.LeadTime,
		Now: d.now, Events: d.events.For("pressure"), Logger: d.logger.With("component", "pressure"),
		ProcRoot: d.opts.ProcRoot, GrowthWindow: d.opts.growthWindow,
	}
}

func siteConfigs(cfg *config.Config) ([]retention.SiteConfig, error) {
	out := make([]retention.SiteConfig, 0, len(cfg.Sites))
	for i, s := range cfg.Sites {
		var owners []uint32
		uid, set, err := s.OwnerUID()
		if err != nil {
			return nil, fmt.Errorf("site[%d].owner: %w", i, err)
		}
		if set {
			owners = append(owners, uid)
		}
		out = append(out, retention.SiteConfig{Name: s.Name, Path: s.Path, OwnerUIDs: owners,
			MaxAge: s.MaxAge, MinAge: s.MinAge, MaxFiles: s.MaxFiles, MaxBytes: int64(s.MaxBytes), DrainRate: int(s.DrainRate),
			Guards: cfg.SiteGuards()})
	}
	return out, nil
}

func mountConfigs(cfg *config.Config) []mountwatch.MountConfig {
	out := make([]mountwatch.MountConfig, 0, len(cfg.Mounts))
	for _, m := range cfg.Mounts {
		links := make([]mountwatch.LinkConfig, 0, len(m.Links))
		for _, l := range m.Links {
			links = append(links, mountwatch.LinkConfig{Path: l.Path, Target: l.Target})
		}
		out = append(out, mountwatch.MountConfig{Name: m.Name, Path: m.Path, Required: m.Required,
			ProbeInterval: m.ProbeInterval, ProbeTimeout: m.ProbeTimeout, Canary: m.Canary,
			RemountUnit: m.RemountUnit, RemountCommand: m.RemountCommand, CredentialFile: m.CredentialFile,
			RefreshCommand: m.RefreshCommand, RefreshAt: m.RefreshAt, MaxRemountsPerHour: int(m.MaxRemountsPerHour),
			RemountTimeout: m.RemountTimeout, Links: links, Guard: m.Guard})
	}
	return out
}

// reservePath is where a filesystem's reserve file lives: <state_dir>/reserve (or
// reserve-<n>) when the state dir is on that filesystem, else <mountpoint>/.sandboxd-reserve.
// Filesystems are told apart by their mountpoints in mountinfo, found lexically: no
// syscall touches the watched path here, since it may be a hung FUSE mount.
func reservePath(cfg *config.Config, i int, mountpoints []string) string {
	f := cfg.Filesystems[i]
	if f.ReservePath != "" {
		return f.ReservePath
	}
	mp := lexicalMount(mountpoints, f.Path)
	if cfg.Server.StateDir != "" && lexicalMount(mountpoints, cfg.Server.StateDir) == mp {
		if i == 0 {
			return filepath.Join(cfg.Server.StateDir, "reserve")
		}
		return filepath.Join(cfg.Server.StateDir, fmt.Sprintf("reserve-%d", i))
	}
	return filepath.Join(mp, ".sandboxd-reserve")
}

// lexicalMount is the deepest mountpoint that contains path by name.
func lexicalMount(mountpoints []string, path string) string {
	best := "/"
	for _, mp := range mountpoints {
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	return best
}

func (d *Daemon) reclaimOptions(cfg *config.Config, pw *pressure.Watcher) reclaim.Options {
	caches := make([]reclaim.CacheConfig, 0, len(cfg.Reclaim.Caches))
	for _, c := range cfg.Reclaim.Caches {
		caches = append(caches, reclaim.CacheConfig{Name: c.Name, Path: c.Path, Command: c.Command,
			Order: int(c.Order), Ladder: c.Ladder})
	}
	var reserves []reclaim.ReserveConfig
	var fsPaths []string
	mountpoints := reclaim.MountPoints(d.opts.ProcRoot)
	for i, f := range cfg.Filesystems {
		fsPaths = append(fsPaths, f.Path)
		if f.Reserve > 0 {
			reserves = append(reserves, reclaim.ReserveConfig{Filesystem: f.Path, Path: reservePath(cfg, i, mountpoints), Bytes: int64(f.Reserve)})
		}
	}
	return reclaim.Options{
		Caches: caches, AutoCaches: cfg.Reclaim.AutoCaches, Protect: cfg.Reclaim.Protect, Guards: cfg.CacheGuards(),
		MinAge: cfg.Reclaim.MinAge, Headroom: int64(cfg.Reclaim.Headroom), HeadroomInodes: cfg.Reclaim.HeadroomInodes,
		Cooldown: cfg.Reclaim.Cooldown, MaxRunsPerHour: int(cfg.Reclaim.MaxRunsPerHour),
		Reserves: reserves, Filesystems: fsPaths,
		Measure: pw.Measure, OwnWrite: pw.OwnWrite, OwnFree: pw.OwnFree, ReserveInterval: cfg.Health.SampleInterval,
		// The sites of the components current at the call: a reload may replace them.
		PruneSites:  func(ctx context.Context, dry bool) []api.Action { return pruneSiteActions(ctx, d.current().sites, dry) },
		SiteUsage:   func() (int64, int64) { return siteUsage(d.current().sites) },
		MarkReplace: pw.MarkReplace,
		Answered:    pw.Answered,
		State:       d.state, Observe: cfg.Server.Mode == api.ModeObserve, Offline: cfg.Reclaim.Offline, Now: d.now,
		Events: d.events.For("reclaim"), Logger: d.logger.With("component", "reclaim"),
	}
}

// pruneSiteActions is rung 1 of the ladder: expired entries of every site, as actions.
// A dry run plans from the index and deletes nothing.
func pruneSiteActions(ctx context.Context, sites *retention.Manager, dry bool) []api.Action {
	var out []api.Action
	results := func() []retention.PruneResult { return sites.PlanAll(ctx) }
	if !dry {
		results = func() []retention.PruneResult { return sites.PruneAll(ctx) }
	}
	for _, r := range results() {
		st := api.ActionDone
		switch {
		case dry:
			st = api.ActionPlanned
		case r.Observed:
			st = api.ActionObserved
		}
		a := api.Action{Source: "site:" + r.Site, Kind: api.ActionPruneSite, FreedBytes: r.Bytes, FreedFiles: r.Files, Status: st}
		if r.Problem != "" {
			a.Status, a.Error = api.ActionSkipped, r.Problem
		}
		out = append(out, a)
	}
	return out
}

// buildComponents builds the parts of cfg and gives the mount watcher the registered
// mounts of the state dir; nothing runs yet.
func (d *Daemon) buildComponents(cfg *config.Config) (*components, error) {
	c, err := d.newComponents(cfg, d.jobRegistry)
	if err != nil {
		return nil, err
	}
	d.restoreMounts(c.mounts)
	c.mounts.SetLimits(mountLimits(cfg)) // after the restore: mounts accepted before stay
	return c, nil
}

// newComponents builds the parts of cfg, each refusing what it cannot take (the refusals
// of New besides resolveWriters'); registry gives the job registry, nil for none (Validate's
// dry build, which must not touch the registry).
func (d *Daemon) newComponents(cfg *config.Config, registry func(*config.Config) *jobs.Manager) (*components, error) {
	c := &components{run: &runner{logger: d.logger, running: map[string]runningPart{}}}
	po := d.pressureOptions(cfg)
	po.ReserveBytes = c.reserveBytes // what the file holds, asked of reclaim (built below)
	po.ReserveReleasedBytes = c.reserveReleased
	c.pressure = pressure.New(po)
	if registry != nil {
		c.jobs = registry(cfg)
	}
	var err error
	if c.sites, err = d.newSites(cfg); err != nil {
		return nil, err
	}
	c.reclaim, err = reclaim.New(d.reclaimOptions(cfg, c.pressure))
	if err != nil {
		return nil, fmt.Errorf("reclaim: %w", err)
	}
	c.mounts, err = mountwatch.New(d.mountOptions(cfg))
	if err != nil {
		return nil, fmt.Errorf("mounts: %w", err)
	}
	return c, nil
}

func (d *Daemon) newSites(cfg *config.Config) (*retention.Manager, error) {
	sites, err := siteConfigs(cfg)
	if err != nil {
		return nil, err
	}
	m, err := retention.New(retention.Options{Sites: sites, State: d.state, Observe: cfg.Server.Mode == api.ModeObserve,
		Now: d.now, Events: d.events.For("retention"), Logger: d.logger.With("component", "retention"), ProcRoot: d.opts.ProcRoot,
		Jobs: jobHolder{d}, FullSpeed: d.underPressure,
		// The watcher current at the call: a reload may replace it.
		OwnFree: d.ownFree})
	if err != nil {
		return nil, fmt.Errorf("sites: %w", err)
	}
	return m, nil
}

func (d *Daemon) mountOptions(cfg *config.Config) mountwatch.Options {
	// The D-Bus restarter connects on first use, so one is always passed: a reload that
	// adds a remount_unit needs no new watcher.
	return mountwatch.Options{Mounts: mountConfigs(cfg), Observe: cfg.Server.Mode == api.ModeObserve, Now: d.now,
		Events: d.events.For("mountwatch"), Logger: d.logger.With("component", "mountwatch"), ProcRoot: d.opts.ProcRoot,
		ProbeCommand: d.opts.ProbeCommand, Restarter: d.restarter, OnRegistryChange: d.saveMounts}
}

// start runs every part under ctx; the parts' goroutines join wg.
func (c *components) start(ctx context.Context, wg *sync.WaitGroup) {
	c.run.mu.Lock()
	c.run.ctx, c.run.wg = ctx, wg
	c.run.mu.Unlock()
	for _, p := range c.parts() {
		c.run.start(p)
	}
}

// onReady runs the resume policy once right after READY (CONTRACT §6); the supervisor
// runs it in the background (goBackground).
func (c *components) onReady(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c.mounts.Resume(rctx)
	c.reclaim.Reclaim(rctx, reclaim.Request{Trigger: reclaim.TriggerStartup})
}

func (d *Daemon) shutdownComponents() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.current().reclaim.Shutdown(ctx)
}
