package reclaim

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Run is the background side: it empties leftover trash, keeps the reserve files armed
// (every ReserveInterval),
// triggers a pressure reclaim when a watched filesystem drops below its threshold
// (through the cooldown), and refreshes the cache list and sizes for status. It returns
// when ctx ends.
func (r *Reclaimer) Run(ctx context.Context) error {
	r.startupTrash(ctx)
	poll := time.NewTicker(r.opts.PollInterval)
	defer poll.Stop()
	reserve := time.NewTicker(r.opts.ReserveInterval)
	defer reserve.Stop()
	nextSize := time.Now().Add(time.Minute) // let start-up settle before walking caches
	nextRefill := time.Now()
	r.holdLoop(ctx, r.reserveTick)
	r.holdLoop(ctx, r.tick)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reserve.C:
			r.holdLoop(ctx, r.reserveTick)
		case <-poll.C:
			r.holdLoop(ctx, r.tick)
			if time.Now().After(nextSize) {
				r.holdLoop(ctx, r.sizeCaches)
				nextSize = time.Now().Add(r.opts.SizeInterval)
			}
			if time.Now().After(nextRefill) {
				r.holdLoop(ctx, r.CheckRefills)
				nextRefill = time.Now().Add(r.opts.RefillInterval)
			}
		}
	}
}

// holdLoop runs f holding the loop token (see Reclaimer.loop).
func (r *Reclaimer) holdLoop(ctx context.Context, f func(context.Context)) {
	select {
	case r.loop <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-r.loop }()
	f(ctx)
}

// tick measures every watched filesystem: re-arms reserves with room, and runs a
// pressure reclaim where one is below its threshold.
func (r *Reclaimer) tick(ctx context.Context) {
	var low []string
	if r.lowSeen == nil {
		r.lowSeen = map[string]bool{}
	}
	for _, p := range r.opts.Filesystems {
		m, err := r.measure(ctx, p)
		if err != nil {
			continue
		}
		f := newFSRun(p, m, Request{}, r.opts.Headroom, r.opts.HeadroomInodes.Resolve(m.Files), r.rearmBytes(p))
		f.ownFree = r.opts.OwnFree
		if !f.needed(0) {
			r.lowSeen[p] = false
			continue
		}
		// Still low within the cooldown (or past max_runs_per_hour): the first tick of
		// the episode runs (its cheap rungs, and the mark when the disk refilled after a
		// purge that freed space); later ticks leave the cheap rungs to launches and only
		// renew that mark, instead of one event every poll flooding the trail.
		if why := r.blockedBy(TriggerPressure, p); why != "" && r.lowSeen[p] {
			if c := r.cooldownFor(TriggerPressure, p); c.freed > 0 && r.opts.MarkReplace != nil && m.BelowReclaim() {
				r.opts.MarkReplace(p, fmt.Sprintf("below the threshold again within reclaim.cooldown %s after a purge at %s freed %s; %s",
					api.FormatDuration(r.opts.Cooldown), c.last.UTC().Format("15:04:05"), api.FormatSize(uint64(c.freed)), why))
			}
			continue
		}
		r.lowSeen[p] = true
		low = append(low, p)
	}
	if len(low) > 0 {
		r.Notify(ctx, low...)
	}
}

// Notify runs a pressure reclaim on the named filesystems now (the cooldown applies). It
// does not wait for a reclaim already running: that one is handling the pressure.
func (r *Reclaimer) Notify(ctx context.Context, filesystems ...string) {
	select {
	case r.lock <- struct{}{}:
	default:
		return
	}
	defer func() { <-r.lock }()
	r.run(ctx, Request{Trigger: TriggerPressure, Filesystems: filesystems})
}

// startupTrash empties every cache's leftover trash (a crash mid-delete) before anything
// else, holding the reclaim lock.
func (r *Reclaimer) startupTrash(ctx context.Context) {
	if r.opts.Observe {
		return
	}
	select {
	case r.lock <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-r.lock }()
	var walks int64
	for _, c := range r.discover() {
		if r.unsafeRoot(c.Path) != "" {
			continue
		}
		root, err := r.openCache(c)
		if err != nil {
			continue
		}
		r.emptyTrash(ctx, root, c, &walks)
		root.Close()
	}
}

// sizeCaches estimates every cache's size for status (budgeted walks, so a huge cache
// gives a lower bound marked partial).
func (r *Reclaimer) sizeCaches(ctx context.Context) {
	cs := r.discover()
	for _, c := range cs {
		if ctx.Err() != nil {
			return
		}
		root, err := r.openCache(c)
		if err != nil {
			continue
		}
		u, err := root.Size(ctx, "", r.opts.SizeBudget)
		root.Close()
		if err != nil {
			continue
		}
		r.mu.Lock()
		for i := range r.caches {
			if r.caches[i].Path == c.Path {
				r.caches[i].EstimatedBytes, r.caches[i].EstimatedFiles, r.caches[i].Partial = u.Bytes, u.Files+u.Dirs, u.Partial
				r.caches[i].SizedAt = r.opts.Now()
				r.sized[c.Path] = r.caches[i] // the background sizing's figures, for GrowthBaseline
			}
		}
		r.mu.Unlock()
	}
}
