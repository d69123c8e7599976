package retention

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// drainBatchTime bounds the deletion work of one drain batch (at least one job is done):
// on ext4 an unlink costs 200-340 µs (FIELD-NOTES), so 128 entries could hold the site
// for 40 ms, and a launch call waits for the batch in progress.
const drainBatchTime = 2 * time.Millisecond

// maxDrainBatch is the batch of an unthrottled drain.
const maxDrainBatch = 512

// drainProgressEvery is how often a long drain reports how far it got, between its start
// and its one closing event.
const drainProgressEvery = 10 * time.Second

// muteGoneAfter is how long an unthrottled drain must be (files deleted so far, plus names
// a running scan is still handing over) before it takes IN_DELETE off the site's watch
// until it ends (rawWatch.setGoneMuted). The rescan that follows costs one listing and a
// statx per entry left; the events it spares cost about as much per unlink, so a drain
// this long pays for it.
const muteGoneAfter = 10000

// muteGone takes IN_DELETE off the site's watch for the rest of the drain, and returns
// the watch it muted (nil when there is none, or it could not be muted).
func (s *site) muteGone() *rawWatch {
	s.mu.Lock()
	w := s.raw
	s.mu.Unlock()
	if w == nil || !s.setGoneMuted(w, true) {
		return nil
	}
	return w
}

// unmuteGone puts IN_DELETE back on w and has the site rescanned: what others deleted
// while the drain ran went unseen, and the listing finds it gone. A watch closed or
// replaced meanwhile (a re-attach) needs nothing: its successor was never muted, and the
// re-attach rescanned.
func (s *site) unmuteGone(w *rawWatch) {
	if !s.setGoneMuted(w, false) {
		return
	}
	select {
	case s.recheckNow <- struct{}{}:
	default: // one is asked for already
	}
}

// setGoneMuted mutes or unmutes w, the site's current watch, through a fresh fd of the
// site's root; false when w is not the site's watch any more or the change did not take.
func (s *site) setGoneMuted(w *rawWatch, mute bool) bool {
	s.mu.Lock()
	root, cur := s.root, s.raw
	s.mu.Unlock()
	if cur != w || root == nil || !w.acquire() {
		return false
	}
	defer w.release()
	d, err := root.OpenDir("")
	if err != nil {
		return false
	}
	defer d.Close()
	return w.setGoneMuted(d.Fd(), mute)
}

// drainBatch is how many entries one drain batch takes: small enough that a launch call
// waiting for the site lock waits for a few milliseconds at most, and at a rate, about
// an eighth of a second's worth.
func drainBatch(rate int) int {
	if rate <= 0 {
		return maxDrainBatch
	}
	return min(maxDrainBatch, max(8, rate/8))
}

// drainRate is the site's drain_rate now (a reload may change it), and whether its
// filesystem is under pressure, which lifts the limit: running out of inodes is the
// incident this daemon exists for.
func (s *site) drainRate() (rate int, fullSpeed bool) {
	s.mu.Lock()
	rate = s.cfg.DrainRate
	s.mu.Unlock()
	if rate > 0 && s.m.opts.FullSpeed != nil && s.m.opts.FullSpeed(s.path) {
		return rate, true
	}
	return rate, false
}

// drainLoop deletes the backlog in small batches, at most drain_rate files per second
// (FIELD-NOTES: I/O priorities do not reach ext4's jbd2 thread, a rate does) unless the
// filesystem is under pressure, and lets a waiting launch call in between batches. One
// drain (from a kick until nothing is left to claim) is one prune event with its totals,
// plus a progress event at most every drainProgressEvery.
func (s *site) drainLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.drainKick:
		}
		s.draining.Store(true)
		var d *drainRun
		var muted *rawWatch
		for ctx.Err() == nil {
			if s.waiting.Load() > 0 {
				sleepCtx(ctx, time.Millisecond)
				continue
			}
			rate, full := s.drainRate()
			throttled := rate > 0 && !full
			batch := maxDrainBatch
			if throttled {
				batch = drainBatch(rate)
			}
			if muted != nil && throttled {
				// Back to drain_rate (the pressure is gone): a slow drain is long, and
				// what others delete must not go unseen for all of it.
				s.unmuteGone(muted)
				muted = nil
			}
			// The drain's start is the start of its first batch, on both clocks: taking
			// the wall clock after the batch put started_at up to a batch's time (tens of
			// ms on a loaded machine) after the deletions began, while duration_seconds
			// counted from before them, so the event claimed the drain ran past its end
			// (TestReloadRaces saw a stopped drain "overlap" its successor).
			start, wall := time.Now(), s.m.opts.Now()
			r, claimed := s.pruneClaimed(ctx, batch, pruneDrain)
			if claimed == 0 {
				if d != nil && s.scanLeft.Load() > 0 {
					// A scan is still handing work over: the drain goes on with its next
					// chunk, as one drain (one event, one mute), not a new one per chunk.
					select {
					case <-ctx.Done():
					case <-s.drainKick:
					}
					continue
				}
				break
			}
			if r.Files > 0 || len(r.errs) > 0 {
				if d == nil {
					d = &drainRun{start: start, wall: wall, reasons: map[string]int64{}, lastReport: start}
				}
				d.add(r, rate, full)
				if muted == nil && !throttled && d.files+s.scanLeft.Load() >= muteGoneAfter {
					muted = s.muteGone()
					if muted != nil && s.m.opts.afterMute != nil {
						s.m.opts.afterMute(muted)
					}
				}
				if time.Since(d.lastReport) >= drainProgressEvery {
					d.lastReport = time.Now()
					s.m.emit(d.event(s, true))
				}
			}
			if throttled {
				want := time.Duration(float64(r.Files) / float64(rate) * float64(time.Second))
				if sleepCtx(ctx, want-time.Since(start)) {
					continue
				}
			}
			// Unthrottled: let a runnable launch call have this P now rather than when the
			// scheduler next preempts (up to 10 ms on a busy machine).
			runtime.Gosched()
		}
		if muted != nil {
			s.unmuteGone(muted)
		}
		s.draining.Store(false)
		if d != nil {
			d.stopped = ctx.Err() != nil
			s.m.emit(d.event(s, false))
		}
	}
}

// drainRun adds up one drain's batches for its event.
type drainRun struct {
	start      time.Time // monotonic, for the duration
	wall       time.Time // opts.Now at start: started_at
	lastReport time.Time

	files, bytes int64
	reasons      map[string]int64
	jobs         []string // the first maxEventJobs ids
	jobsTotal    int
	first, last  string
	errs         []string // the first few
	errsTotal    int
	observed     bool
	rate         int  // the drain_rate of the last batch
	fullSpeed    bool // some batch ran at full speed (pressure)
	stopped      bool // ended by a stop (reload, shutdown), not by an empty backlog
}

func (d *drainRun) add(r PruneResult, rate int, full bool) {
	d.files += r.Files
	d.bytes += r.Bytes
	for k, v := range r.ByReason {
		d.reasons[k] += v
	}
	for _, id := range r.Jobs {
		if d.first == "" {
			d.first = id
		}
		d.last = id
		if len(d.jobs) < maxEventJobs {
			d.jobs = append(d.jobs, id)
		}
	}
	d.jobsTotal += len(r.Jobs)
	for _, e := range r.errs {
		if len(d.errs) < 5 {
			d.errs = append(d.errs, e)
		}
	}
	d.errsTotal += len(r.errs)
	d.observed = d.observed || r.Observed
	d.rate = rate
	d.fullSpeed = d.fullSpeed || full
}

// event is the drain's closing event, or (progress) a report of how far it got.
func (d *drainRun) event(s *site, progress bool) api.Event {
	dur := time.Since(d.start)
	verb := "pruned"
	if d.observed {
		verb = "would prune"
	}
	speed := fmt.Sprintf("at most %s files/s", api.FormatCount(uint64(d.rate)))
	switch {
	case d.rate <= 0:
		speed = "no rate limit"
	case d.fullSpeed:
		speed = fmt.Sprintf("at full speed while the filesystem was under pressure (drain_rate %s files/s otherwise)", api.FormatCount(uint64(d.rate)))
	}
	f := map[string]any{
		"trigger": "drain", "files": d.files, "bytes": d.bytes, "jobs": d.jobs, "jobs_total": d.jobsTotal,
		"first_job": d.first, "last_job": d.last, "reasons": d.reasons, "observed": d.observed,
		"started_at": d.wall.Format(time.RFC3339Nano), "duration_seconds": dur.Seconds(),
		"drain_rate": d.rate, "full_speed": d.fullSpeed,
	}
	if d.errsTotal > 0 {
		f["errors"], f["errors_total"] = d.errs, d.errsTotal
	}
	size := api.FormatSize(uint64(max(d.bytes, 0)))
	files := api.FormatCount(uint64(max(d.files, 0)))
	jobs := api.FormatCount(uint64(d.jobsTotal))
	took := api.FormatDuration(dur)
	if progress {
		pending := s.pending()
		f["progress"], f["pending"] = true, pending
		return api.Event{Kind: api.EventPrune, Subject: s.name, Fields: f,
			Message: fmt.Sprintf("draining site %s: %s files (%s) of %s jobs so far in %s, %s pending, %s",
				s.name, files, size, jobs, took, api.FormatCount(uint64(max(pending, 0))), speed)}
	}
	msg := fmt.Sprintf("drain of site %s %s %s files (%s) of %s jobs in %s, %s", s.name, verb, files, size, jobs, took, speed)
	if d.stopped {
		msg += "; stopped before the backlog was done"
		f["stopped"] = true
	}
	if d.errsTotal > 0 {
		msg += fmt.Sprintf("; %s jobs not fully pruned, first: %s", api.FormatCount(uint64(d.errsTotal)), d.errs[0])
	}
	return api.Event{Kind: api.EventPrune, Subject: s.name, Fields: f, Message: msg}
}
