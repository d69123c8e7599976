package pressure

import (
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Reconfigure applies a reloaded config (SIGHUP) in place: the reloadable fields of opts
// are Filesystems, SampleInterval, StatfsTimeout, TransitionPeriod and LeadTime; the
// others (clock, events, logger, proc root) stay as New set them. A filesystem whose path
// stays keeps its last sample, growth history and conditions, so readiness, the growth
// rate and time to full carry on; one whose thresholds changed is evaluated against the
// new ones at its next sample. A new path starts unsampled; a removed one is forgotten
// with its conditions. It reports whether anything changed.
func (w *Watcher) Reconfigure(opts Options) bool {
	opts = opts.withDefaults()
	w.mu.Lock()
	old := map[string]*fsState{}
	for _, fs := range w.fss {
		old[fs.cfg.Path] = fs
	}
	changed := len(opts.Filesystems) != len(w.fss)
	next := make([]*fsState, 0, len(opts.Filesystems))
	for i, c := range opts.Filesystems {
		c.Path = cleanPath(c.Path)
		prev := old[c.Path]
		delete(old, c.Path)
		switch {
		case prev != nil && prev.cfg == c:
			next = append(next, prev)
			changed = changed || i >= len(w.fss) || w.fss[i] != prev
			continue
		case prev != nil:
			// A new state object rather than writes into the old one's cfg: the sampling
			// loop reads a listed filesystem's path without the lock.
			fs := &fsState{cfg: c, fig: prev.fig, dev: prev.dev, figures: prev.figures,
				sampled: prev.sampled, growth: prev.growth, retuned: true}
			next = append(next, fs)
		default:
			fs := &fsState{cfg: c, growth: newGrowth(opts.GrowthWindow, opts.SampleInterval)}
			fs.fig = api.Filesystem{Path: c.Path}
			next = append(next, fs)
		}
		changed = true
	}
	for path := range old {
		w.conds.forget(path)
	}
	w.fss = next
	if w.opts.LeadTime != opts.LeadTime || w.conds.transition != opts.TransitionPeriod {
		changed = true
	}
	w.opts.LeadTime = opts.LeadTime
	w.conds.transition = opts.TransitionPeriod
	w.changes.Add(1)
	w.mu.Unlock()

	if time.Duration(w.interval.Load()) != opts.SampleInterval || time.Duration(w.statfsTimeout.Load()) != opts.StatfsTimeout {
		changed = true
		w.interval.Store(int64(opts.SampleInterval))
		w.statfsTimeout.Store(int64(opts.StatfsTimeout))
		select { // Run resets its ticker
		case w.reconf <- struct{}{}:
		default:
		}
	}
	return changed
}
