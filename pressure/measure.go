package pressure

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Measure statfs's path now, for the launch hot path and reclaim's re-measure. The call
// obeys the one-outstanding rule of path's filesystem: it joins a call for the same path
// that started after Measure was entered, otherwise waits for the outstanding one to end
// before starting its own, so the answer is never older than the request. ctx bounds the
// wait; on timeout the error is returned with the last known figures (Stale set) when path
// is on a watched filesystem, and on a failed statfs with them too (Error, Errno and
// ErrorSince set).
//
// When path lies on a watched filesystem (same st_dev), the answer is that filesystem's
// object, freshly sampled, with its thresholds, conditions updated, and Path the watched
// path; otherwise it is path's bare figures.
//
// A call on a local filesystem (ext2/3/4, xfs, btrfs, tmpfs, an overlay of those, with
// nothing else on the way) is measured on the caller's goroutine; any other on a
// goroutine of its own, so a hung filesystem never holds the caller (inline.go).
func (w *Watcher) Measure(ctx context.Context, path string) (api.Filesystem, error) {
	return w.measure(ctx, cleanPath(path), false)
}

// MeasureExisting is Measure of path's nearest existing ancestor (ExistingAncestor: a
// site the launcher has not created yet is measured on the filesystem it will be
// created on). The walk up by lstat is part of the call, so a path on a hung mount
// holds no caller past its deadline.
func (w *Watcher) MeasureExisting(ctx context.Context, path string) (api.Filesystem, error) {
	return w.measure(ctx, cleanPath(path), true)
}

// MeasureSite is MeasureExisting of a write site's directory, asked at every launch:
// once its way is known (known.go), the directory is held open (an O_PATH fd, as the
// retention component holds the site's root) and the next call is the poll and an
// fstatfs of it. Only a path that exists is held; the fd goes when the way is forgotten
// (the next call or sampling tick after a change on the way, a mount table reload, the
// end of Run), or at the second sampling tick without a call for it.
func (w *Watcher) MeasureSite(ctx context.Context, path string) (api.Filesystem, error) {
	return w.measureHold(ctx, cleanPath(path), true, true)
}

// measure is Measure; with existing, of path's nearest existing ancestor. A call it
// starts runs on the caller's goroutine when nothing on its way can wait on a server
// (inline.go), else on a goroutine of its own that the caller waits for until ctx ends.
func (w *Watcher) measure(ctx context.Context, path string, existing bool) (api.Filesystem, error) {
	return w.measureHold(ctx, path, existing, false)
}

// measureHold is measure; with hold, a path measured inline may be held open (MeasureSite).
func (w *Watcher) measureHold(ctx context.Context, path string, existing, hold bool) (api.Filesystem, error) {
	p := w.proberFor(path)
	_, entered := p.outstanding()
	for {
		c, started := p.claim(path, existing, w.opts.Now())
		if started {
			c.hold = hold // set by the caller that runs it, before it runs
		}
		if started && (ctx.Err() != nil || !w.runInline(p, c)) {
			go w.run(p, c)
		}
		select {
		case <-c.done: // measured inline: ctx's Done is not asked for (issue 27)
		default:
			select {
			case <-c.done:
			case <-ctx.Done():
				// Stale says what the watcher knows (statfs unanswered for StatfsTimeout), not
				// that this call's own deadline passed: a 1 ns deadline is no hung filesystem.
				last, _ := w.lastFor(path)
				if o, _ := p.outstanding(); o != nil && w.opts.Now().Sub(o.started) >= time.Duration(w.statfsTimeout.Load()) {
					last.Stale = true
				}
				return last, fmt.Errorf("measure %s: statfs did not answer: %w", path, ctx.Err())
			}
		}
		if !started && (c.path != path || c.existing != existing || c.seq <= entered) {
			continue // an older or another path's call: now start our own
		}
		if c.err != nil {
			// The last known figures (none for a path on no watched filesystem), with
			// the failure: the caller names what failed, since when, and the last sample.
			last, _ := w.lastFor(c.at)
			if last.Error == "" {
				last.Error, last.Errno = c.err.Error(), errnoName(c.err)
			}
			return last, fmt.Errorf("measure %s: %w", c.at, c.err)
		}
		if fig, ok := w.watchedFor(c.at, c.dev); ok {
			return fig, nil
		}
		return c.fig, nil
	}
}

// FilesystemFor resolves which watched filesystem holds path by comparing st_dev, with a
// fresh measurement bounded by StatfsTimeout; false when path is on no watched filesystem
// or does not answer.
func (w *Watcher) FilesystemFor(path string) (api.Filesystem, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(w.statfsTimeout.Load()))
	defer cancel()
	fig, err := w.Measure(ctx, path)
	if err != nil {
		return api.Filesystem{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fs := range w.fss {
		if fs.cfg.Path == fig.Path && fs.figures {
			return fig, true
		}
	}
	return api.Filesystem{}, false
}

// watchedFor returns the watched filesystem configured with path, else the first one on
// device dev.
func (w *Watcher) watchedFor(path string, dev uint64) (api.Filesystem, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fs := range w.fss {
		if fs.figures && fs.cfg.Path == path {
			return copyFig(fs.fig), true
		}
	}
	for _, fs := range w.fss {
		if fs.figures && fs.dev == dev {
			return copyFig(fs.fig), true
		}
	}
	return api.Filesystem{}, false
}

// lastFor returns the last figures of the watched filesystem path lies on by name: the
// configured path, or the one whose mountpoint is path's lexical mount.
func (w *Watcher) lastFor(path string) (api.Filesystem, bool) {
	if fig, ok := w.Filesystem(path); ok {
		return fig, true
	}
	mp := w.mounts.lexicalMount(path)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fs := range w.fss {
		if fs.figures && mp != "" && fs.fig.Mountpoint == mp {
			return copyFig(fs.fig), true
		}
	}
	return api.Filesystem{Path: path}, false
}

// MarkReplace holds the verdict of the filesystem that holds path at replace, on the
// reclaim component's word (the ladder cannot free enough, or the disk filled again
// within the cooldown after a purge that freed space). The mark goes into the figures
// (ReplaceMark), so launch, resume, status, check, health and metrics all say replace
// from the one verdict; it lapses once a sample is back at or above the reclaim
// thresholds, or when not renewed for TransitionPeriod. The filesystem is found by name
// (no syscall on path, so a hung mount cannot block the caller); a path on no watched
// filesystem gets its own condition with path as subject, which clears the same way.
func (w *Watcher) MarkReplace(path, reason string) {
	path = cleanPath(path)
	subject := path
	if fig, ok := w.lastFor(path); ok {
		subject = fig.Path
	}
	now := w.opts.Now()
	w.mu.Lock()
	for _, fs := range w.fss {
		if fs.cfg.Path != subject || !fs.figures {
			continue
		}
		fs.mark, fs.markAt = reason, now
		fs.applyMark(&fs.fig, now, w.opts.TransitionPeriod)
		events := w.evaluateLocked(fs, now, false)
		w.changes.Add(1)
		w.mu.Unlock()
		w.emit(events)
		return
	}
	msg := fmt.Sprintf("reclaim cannot keep %s healthy: %s: replace the sandbox", subject, reason)
	ev, ok := w.conds.observe(now, signal{
		typ: api.CondReplaceRecommended, subject: subject, raw: true,
		reason: "MarkedByReclaim", message: msg, severity: sevCritical,
		fields: map[string]any{"mark": reason},
	})
	w.changes.Add(1)
	w.mu.Unlock()
	if ok {
		w.emit([]api.Event{ev})
	}
}

// Answered tells the watcher that a reclaim which changed the disk (freed bytes or inodes)
// has just answered the filesystem that holds path, after re-measuring it. Its conditions
// raised since the previous answer are judged again on the last sample at once: a
// condition the reclaim fixed clears now, without the transition period meant for disks
// that flap by themselves, so a fill that self-healed in 70 ms does not page for a minute.
func (w *Watcher) Answered(path string) {
	path = cleanPath(path)
	now := w.opts.Now()
	w.mu.Lock()
	var events []api.Event
	for _, fs := range w.fss {
		if fs.cfg.Path != path || !fs.figures || fs.fig.Error != "" {
			continue
		}
		fs.applyMark(&fs.fig, now, w.opts.TransitionPeriod)
		events = append(events, w.evaluateLocked(fs, now, true)...)
		fs.answered = now
	}
	w.changes.Add(1)
	w.mu.Unlock()
	w.emit(events)
}

// expireMarks clears mark-only conditions (subjects that are no watched filesystem, so no
// sample re-evaluates them) once their transition period has passed. Caller holds w.mu.
func (w *Watcher) expireMarks(now time.Time) []api.Event {
	watched := map[string]bool{}
	for _, fs := range w.fss {
		watched[fs.cfg.Path] = true
	}
	var events []api.Event
	for subject := range w.conds.activeSubjects() {
		if watched[subject] {
			continue
		}
		if ev, ok := w.conds.observe(now, signal{
			typ: api.CondReplaceRecommended, subject: subject,
			reason: "MarkExpired", message: "no replace mark renewed for " + subject,
		}); ok {
			events = append(events, ev)
		}
	}
	return events
}

// MeasureCounts says, for the filesystem that holds path by name (its prober), how many
// measurements were started in all (samples and Measure calls) and how many of them ran
// on the caller's goroutine (inline.go).
func (w *Watcher) MeasureCounts(path string) (started, inline uint64) {
	p := w.proberFor(cleanPath(path))
	return p.startedTotal(), p.inlineTotal()
}
