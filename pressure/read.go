package pressure

import (
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Snapshot returns a copy of every watched filesystem in configuration order. One not yet
// sampled has a zero SampledAt (the daemon shows no gauges for it yet); a stale one keeps
// its last figures with Stale set; one whose last statfs failed has Error set.
func (w *Watcher) Snapshot() []api.Filesystem {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]api.Filesystem, 0, len(w.fss))
	for _, fs := range w.fss {
		out = append(out, copyFig(fs.fig))
	}
	return out
}

// Filesystem returns the watched filesystem configured with path.
func (w *Watcher) Filesystem(path string) (api.Filesystem, bool) {
	path = cleanPath(path)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fs := range w.fss {
		if fs.cfg.Path == path {
			return copyFig(fs.fig), true
		}
	}
	return api.Filesystem{}, false
}

// Conditions returns every known condition, true or false, in first-seen order. All four
// pressure types of a filesystem appear (false) with its first sample, so their since is
// meaningful and their metric exists at 0 before they ever fire.
func (w *Watcher) Conditions() []api.Condition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conds.list()
}

// Ready reports whether every filesystem has had its first sample: answered, failed, or
// marked stale after StatfsTimeout.
func (w *Watcher) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fs := range w.fss {
		if !fs.sampled && !fs.fig.Stale {
			return false
		}
	}
	return true
}

// LastLoop is when the sampling loop last ran (by Options.Now), for liveness: it advances
// even while a statfs hangs.
func (w *Watcher) LastLoop() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastLoop
}

func copyFig(f api.Filesystem) api.Filesystem {
	if f.PredictedFullSeconds != nil {
		v := *f.PredictedFullSeconds
		f.PredictedFullSeconds = &v
	}
	return f
}

// Timings are the durations the Watcher runs with, for /v1/config's in_force: what is in
// force, read back from the running component rather than from the config file.
type Timings struct {
	SampleInterval, TransitionPeriod, LeadTime time.Duration
}

// Timings returns the durations in force.
func (w *Watcher) Timings() Timings {
	return Timings{SampleInterval: w.opts.SampleInterval, TransitionPeriod: w.opts.TransitionPeriod, LeadTime: w.opts.LeadTime}
}

// OwnWrite accounts bytes sandboxd itself wrote at path (its reserve file, a state
// document), or with a negative count that it wrote fewer than it announced. The watched
// filesystems that hold path by name (no syscall: the path may be on a hung mount) keep
// them out of their growth, so sandboxd's own writes never raise the growth rate, the
// adaptive threshold, DiskFillingUp or the prediction (CONTRACT §6, "Do no harm").
func (w *Watcher) OwnWrite(path string, bytes int64) {
	mp := w.mounts.lexicalMount(cleanPath(path))
	w.mu.Lock()
	fss := w.fss // Reconfigure replaces the list (and keeps a kept path's growth)
	w.mu.Unlock()
	var on []*fsState
	for _, fs := range fss {
		if w.mounts.lexicalMount(fs.cfg.Path) == mp { // mountinfo may be re-read: not under w.mu
			on = append(on, fs)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fs := range on {
		fs.growth.ownWrite(bytes)
	}
}

// OwnFree accounts bytes sandboxd itself freed at path (reclaim's deletions and commands,
// site prunes and drains, the reserve released): a free by sandboxd neither lowers the
// growth of a writer that goes on nor resets its prediction, while a free by anyone else
// lowers the growth as it lowers the net usage.
func (w *Watcher) OwnFree(path string, bytes int64) {
	if bytes > 0 {
		w.OwnWrite(path, -bytes)
	}
}
