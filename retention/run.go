package retention

import (
	"context"
	"errors"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fsnotify/fsnotify"
)

// run is the site's loop: it owns the watcher, applies its events, refreshes liveness,
// reconciles, and runs the drain worker beside it. Everything ends with ctx.
func (s *site) run(ctx context.Context) {
	pend := newPending()
	var w io.Closer
	stopWatch := func() {
		if w != nil {
			s.mu.Lock()
			s.raw = nil
			s.mu.Unlock()
			w.Close() // readEvents ends when the channels close
			w = nil
		}
	}
	reconcile := func() {
		opened := s.attach()
		s.mu.Lock()
		attached := s.root != nil
		s.mu.Unlock()
		if !attached {
			stopWatch()
			return
		}
		if opened || w == nil {
			stopWatch()
			w = s.watch(pend) // before the scan, so nothing created meanwhile is missed
			if rw, ok := w.(*rawWatch); ok {
				s.mu.Lock()
				s.raw = rw
				s.mu.Unlock()
			}
		}
		s.rescan(pend)
		s.refreshLiveness(nil)
		s.m.saveSightings(false)
		s.kickDrain()
	}
	// The drain runs from the start: the first scan hands it expired jobs chunk by chunk.
	drainDone := make(chan struct{})
	go func() {
		defer close(drainDone)
		s.drainLoop(ctx)
	}()
	defer func() {
		<-drainDone
		stopWatch()
		s.mu.Lock()
		s.detachLocked("")
		s.mu.Unlock()
	}()
	reconcile()
	s.markStarted()

	tick := time.NewTicker(s.m.opts.LivenessInterval)
	defer tick.Stop()
	rec := time.NewTicker(s.m.opts.ReconcileInterval)
	defer rec.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pend.kick:
			if s.handle(pend) {
				reconcile()
			}
		case <-tick.C:
			s.mu.Lock()
			attached := s.root != nil
			s.mu.Unlock()
			if !attached {
				reconcile() // a missing or bad root is looked at again every tick
				continue
			}
			s.settle()
			s.refreshLiveness(nil)
			s.m.saveSightings(false)
			s.kickDrain()
		case <-rec.C:
			reconcile()
		case <-s.recheckNow:
			reconcile()
		}
	}
}

// handle applies collected events; it answers true when the root itself went away and
// the site must be reconciled. An inotify queue overflow means events were lost: rescan.
func (s *site) handle(p *pending) (reconcile bool) {
	ops, overflow, rootGone := p.take()
	defer p.done()
	switch {
	case rootGone:
		return true
	case overflow:
		s.m.opts.Logger.Info("inotify queue overflowed; rescanning the site", "site", s.name)
		s.rescan(p)
		s.refreshLiveness(nil)
		s.kickDrain()
	default:
		s.applyEvents(ops)
	}
	return false
}

// watch starts an inotify watch on the site root only: entries that are directories are
// one entry each, so nothing below needs a watch. Without a watch (max_user_watches
// exhausted shows as ENOSPC) the site still works from its periodic rescans.
func (s *site) watch(p *pending) io.Closer {
	fd := -1
	s.mu.Lock()
	if s.root != nil {
		fd = s.root.Fd()
	}
	s.mu.Unlock()
	rw, err := newRawWatch(s.path, fd, p)
	if err == nil {
		return rw
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE) {
		s.m.opts.Logger.Warn("no inotify watch for site; relying on rescans", "site", s.name, "err", err)
		return nil
	}
	s.m.opts.Logger.Debug("batched inotify reader not available; using fsnotify", "site", s.name, "err", err)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.m.opts.Logger.Warn("no inotify for site; relying on rescans", "site", s.name, "err", err)
		return nil
	}
	if err := w.Add(s.path); err != nil {
		w.Close()
		s.m.opts.Logger.Warn("no inotify watch for site; relying on rescans", "site", s.name, "err", err)
		return nil
	}
	go readEvents(w, s.path+"/", p)
	return w
}

func (s *site) kickDrain() {
	select {
	case s.drainKick <- struct{}{}:
	default:
	}
}

// sleepCtx sleeps for d or until ctx ends; it reports whether it slept at all.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return true
}
