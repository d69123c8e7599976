package reclaim

import (
	"context"
	"fmt"
	"reflect"
)

// Reconfigure applies a reloaded config (SIGHUP) in place. The reloadable fields of opts
// are Caches, AutoCaches, Protect, MinAge, Headroom, HeadroomInodes, Cooldown,
// MaxRunsPerHour, Reserves, Filesystems and Observe; the hooks (Measure, PruneSites,
// MarkReplace, State, Events ...) stay as New set them. Cooldowns, run counts, the last
// run, counters and the state of unchanged reserves carry on. A reclaim in progress is
// waited for (within ctx: ErrBusy when it does not end in time), so no run ever sees
// half of a config, and no second reclaimer exists to overlap with it. A reserve file the
// new config no longer keeps is removed on the next reserve tick (Orphan). It reports
// whether anything changed.
func (r *Reclaimer) Reconfigure(ctx context.Context, opts Options) (bool, error) {
	if err := validate(opts); err != nil {
		return false, err
	}
	next := r.opts
	next.Caches, next.AutoCaches, next.Protect = opts.Caches, opts.AutoCaches, opts.Protect
	next.Guards = opts.Guards
	next.MinAge, next.Headroom, next.HeadroomInodes = opts.MinAge, opts.Headroom, opts.HeadroomInodes
	next.Cooldown, next.MaxRunsPerHour = opts.Cooldown, opts.MaxRunsPerHour
	next.Reserves, next.Filesystems, next.Observe = opts.Reserves, opts.Filesystems, opts.Observe
	next = next.withDefaults()
	if reflect.DeepEqual(reloadable(next), reloadable(r.opts)) {
		return false, nil
	}
	for _, tok := range []chan struct{}{r.lock, r.loop} {
		select {
		case tok <- struct{}{}:
			defer func() { <-tok }()
		case <-ctx.Done():
			return false, fmt.Errorf("reclaim settings not reloaded: %w: %w", ErrBusy, ctx.Err())
		}
	}
	r.settings.Lock()
	defer r.settings.Unlock()
	r.mu.Lock()
	old := r.opts.Reserves
	// Field by field: the hooks and clock stay untouched, so their lock-free readers
	// (emit, the pressure watcher's calls) never race with a reload.
	o := &r.opts
	o.Caches, o.AutoCaches, o.Protect = next.Caches, next.AutoCaches, next.Protect
	o.Guards = next.Guards
	o.MinAge, o.Headroom, o.HeadroomInodes = next.MinAge, next.Headroom, next.HeadroomInodes
	o.Cooldown, o.MaxRunsPerHour = next.Cooldown, next.MaxRunsPerHour
	o.Reserves, o.Filesystems, o.Observe = next.Reserves, next.Filesystems, next.Observe
	r.mu.Unlock()
	r.loadReserves(r.reserveMap())
	// Reserve files the new config no longer keeps go at the next reserve tick.
	r.Orphan(&Reclaimer{opts: Options{Reserves: old}})
	r.discover() // the cache list for status, with the new roots (keeps known sizes)
	return true, nil
}

// reloadable is the part of Options that Reconfigure changes, for comparison.
func reloadable(o Options) []any {
	return []any{o.Caches, o.AutoCaches, o.Protect, o.Guards, o.MinAge, o.Headroom, o.HeadroomInodes,
		o.Cooldown, o.MaxRunsPerHour, o.Reserves, o.Filesystems, o.Observe}
}
