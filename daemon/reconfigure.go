package daemon

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/mountwatch"
	"github.com/sandboxd/sandboxd/reclaim"
	"github.com/sandboxd/sandboxd/retention"
)

// reconfigureWait bounds how long a reload waits for a reclaim in progress before it is
// rejected (the last good config stays; the next SIGHUP tries again).
const reconfigureWait = 30 * time.Second

// A reconfigureStep moves one component from the running config to the next one (SIGHUP,
// CONTRACT §9): in place, keeping its state, wherever it can. check validates next for
// the component and runs for every step before any apply, so a config that one component
// rejects changes nothing. apply may fail only for a reason of the moment (a reclaim that
// does not end in time), which is why the steps that can fail come first. A component
// that cannot change in place is stopped (and waited for) by its apply and its
// replacement set into c; apply names it in restart and the reload starts it once c is
// current. New components add their step to reconfigureSteps.
type reconfigureStep struct {
	name  string
	check func(next *config.Config) error
	// apply returns a short note of what changed ("" when nothing did).
	apply func(ctx context.Context, c *components, prev, next *config.Config) (note string, restart bool, err error)
}

func (d *Daemon) reconfigureSteps() []reconfigureStep {
	return []reconfigureStep{
		{"reclaim", d.checkReclaim, d.reconfigureReclaim},
		{"pressure", func(*config.Config) error { return nil }, d.reconfigurePressure},
		{"retention", d.checkSites, d.reconfigureSites},
		{"mountwatch", d.checkMounts, d.reconfigureMounts},
		{"jobs", func(*config.Config) error { return nil }, d.reconfigureJobs},
	}
}

// reconfigure applies next to the running components. It answers the components to make
// current (c itself, or a copy holding replaced parts), the parts to start once they are,
// and notes of what changed.
func (d *Daemon) reconfigure(c *components, prev, next *config.Config) (*components, []part, []string, error) {
	steps := d.reconfigureSteps()
	var errs []error
	for _, s := range steps {
		if err := s.check(next); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), reconfigureWait)
	defer cancel()
	nc := *c
	var notes []string
	var restart []string
	for _, s := range steps {
		note, re, err := s.apply(ctx, &nc, prev, next)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		if note != "" {
			notes = append(notes, note)
		}
		if re {
			restart = append(restart, s.name)
		}
	}
	var starts []part
	for _, p := range nc.parts() {
		for _, name := range restart {
			if p.name == name {
				starts = append(starts, p)
			}
		}
	}
	return &nc, starts, notes, nil
}

func (d *Daemon) checkReclaim(next *config.Config) error {
	opts := d.reclaimOptions(next, nil)
	opts.Measure = func(context.Context, string) (api.Filesystem, error) { return api.Filesystem{}, nil }
	opts.State, opts.Events, opts.Logger = nil, nil, nil
	opts.Reserves = nil // New would look at the files; their paths are derived, not written
	if _, err := reclaim.New(opts); err != nil {
		return fmt.Errorf("reclaim: %w", err)
	}
	return nil
}

func (d *Daemon) reconfigureReclaim(ctx context.Context, c *components, _, next *config.Config) (string, bool, error) {
	changed, err := c.reclaim.Reconfigure(ctx, d.reclaimOptions(next, c.pressure))
	if err != nil || !changed {
		return "", false, err
	}
	return "reclaim settings applied", false, nil
}

func (d *Daemon) reconfigurePressure(_ context.Context, c *components, _, next *config.Config) (string, bool, error) {
	if !c.pressure.Reconfigure(d.pressureOptions(next)) {
		return "", false, nil
	}
	return "filesystem settings applied (samples and growth kept)", false, nil
}

func (d *Daemon) checkSites(next *config.Config) error {
	sites, err := siteConfigs(next)
	if err != nil {
		return err
	}
	if _, err := retention.New(retention.Options{Sites: sites}); err != nil {
		return fmt.Errorf("sites: %w", err)
	}
	return nil
}

// reconfigureSites changes the site list in place. A mode change replaces the manager:
// observe mode is fixed for a manager's life, so the old one is stopped and waited for
// (no prune of it runs any more) before the new one, which scans the sites afresh, starts.
func (d *Daemon) reconfigureSites(_ context.Context, c *components, prev, next *config.Config) (string, bool, error) {
	if prev.Server.Mode != next.Server.Mode {
		// Stopped first: its Run saves the first sightings as it returns, and the new
		// manager loads them (checkSites has validated next, so New cannot fail on it).
		c.run.stop("retention")
		m, err := d.newSites(next)
		if err != nil {
			return "", false, err
		}
		c.sites = m
		return "sites restarted for mode " + next.Server.Mode, true, nil
	}
	// The guards (protected paths, the state dir) are part of each site's config: a new
	// protect list must reach the sites even when the [[site]] entries are unchanged.
	if reflect.DeepEqual(prev.Sites, next.Sites) && reflect.DeepEqual(prev.SiteGuards(), next.SiteGuards()) {
		return "", false, nil
	}
	sites, err := siteConfigs(next)
	if err != nil {
		return "", false, err
	}
	if err := c.sites.Reconfigure(sites); err != nil {
		return "", false, err
	}
	return "site settings applied (unchanged sites keep their index and drain)", false, nil
}

func (d *Daemon) checkMounts(next *config.Config) error {
	opts := d.mountOptions(next)
	opts.Events, opts.Logger = nil, nil
	if _, err := mountwatch.New(opts); err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	return nil
}

func (d *Daemon) reconfigureMounts(_ context.Context, c *components, prev, next *config.Config) (string, bool, error) {
	var notes []string
	if prev.Server.Mode != next.Server.Mode {
		c.mounts.SetObserve(next.Server.Mode == api.ModeObserve)
		notes = append(notes, "mounts now in mode "+next.Server.Mode)
	}
	if prev.RuntimeMounts != next.RuntimeMounts {
		c.mounts.SetLimits(mountLimits(next))
		notes = append(notes, "registration limits applied")
	}
	if !reflect.DeepEqual(prev.Mounts, next.Mounts) {
		if err := c.mounts.Reconfigure(mountConfigs(next)); err != nil {
			return "", false, err
		}
		notes = append(notes, "mount settings applied (unchanged mounts keep their probe state)")
	}
	return joinNotes(notes), false, nil
}

func joinNotes(notes []string) string {
	out := ""
	for i, n := range notes {
		if i > 0 {
			out += "; "
		}
		out += n
	}
	return out
}
