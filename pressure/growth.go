package pressure

import (
	"slices"
	"time"
)

// growth estimates how fast others (not sandboxd) fill a filesystem, fast enough to warn
// within seconds of a writer starting and robust enough that net-zero churn, one large
// write, noise or sandboxd's own reclaim sawtooth never read as a trend (issue 24).
//
// sandboxd's own changes are kept out by an account: every byte sandboxd writes (its
// reserve file, its state documents) or frees (reclaim deletions and commands, site
// prunes and drains, the reserve released) is announced (ownWrite, negative for a free),
// and each sample is recorded as the usage would be without them (−(avail + own)). So the
// daemon's reclaim sawtooth neither reads as "not filling" nor its reserve as growth,
// while a user's rm lowers the growth honestly.
//
// Several windows look at the same samples: the fast one (max(8 s, 16 sample intervals),
// capped at the growth window), a middle one four times as long, and the growth window
// (10m). Each cuts its window into buckets (4, 4 and 8) and keeps, per completed bucket,
// the median time, the median usage and the bucket's spread (the range of its samples
// about the bucket's own trend). A window's trend is significant when
//
//   - its bucket medians rose from each bucket to the next (all of them; one fall allowed
//     among the 8 buckets of the growth window), the last one included: writes that stop
//     end the trend within a bucket;
//   - the rise from the first median to the last is more than twice the median spread:
//     noise and churn move the samples within a bucket more than they move its median;
//   - in the fast window, the samples' falls add up to at most a third of their rises:
//     a launcher's steady churn (files written and pruned every second) drifts up for a
//     few seconds now and then, a fill hardly ever falls.
//
// Its rate is then the Theil–Sen slope of the bucket medians but the oldest (the median
// of the slopes between every two of them; the oldest bucket most likely holds the start
// of the trend, half flat, and would make a fill that just began read slow). A file written and deleted within a bucket (churn) does not
// move a median; one large write followed by quiet is one rise, not a trend; a fill is a
// rise in every bucket. The prediction (growth_bytes_per_second, predicted_full_seconds,
// DiskFillingUp) takes the fastest window whose trend is significant, so a writer shows
// within about four fast buckets (16 s at the default 1 s interval), from the daemon's
// start too. The adaptive reclaim threshold, which deletes caches, takes only the growth
// window: a false warning is cheap, a false deletion is not. A slower window's trend
// stands only while the middle window (or the fast one, when the growth window is too
// short for a middle one) shows the usage rising over its last two buckets, so writes
// that stop clear the prediction within three of its buckets (48 s by default) rather
// than a growth window.
//
// Each window takes a sample only if it is at least a sixteenth of its bucket after the
// last it took (half an interval for the fast one), so a storm of launches, each a
// Measure and so a sample, costs little and shifts no median; the work of a sample is an
// append per window, a bucket's sort of at most a few dozen values when it completes and
// a few dozen slopes per completed bucket.
type growth struct {
	own     int64         // bytes sandboxd wrote minus bytes it freed, so far
	half    time.Duration // half the sample interval
	last    time.Time     // the newest sample taken
	base    time.Time     // times are seconds since base
	windows []*gwindow    // fastest first
	slow    int           // index of the growth window in windows
	veto    int           // index of the window whose flat usage vetoes slower ones (-1: none)
	scratch [64]float64   // a bucket's sort buffer
	cur     estimate      // as of the last sample
}

// minRise is the least rise between two buckets that counts as one: a block, the most
// that rounding can make of a flat level.
const minRise = 4096

// gwindow is one window of the estimator.
type gwindow struct {
	window, span, gap time.Duration // the window, one bucket, the least time between two samples taken
	n, falls          int           // buckets per window; falls allowed between them
	monotone          bool          // the samples themselves must mostly rise (the fast window)
	start             time.Time     // of the bucket being filled
	lastTaken         time.Time
	ts, vs            []float64 // the bucket being filled: times (s since base) and usage
	up, down          float64   // ... and the sums of its samples' rises and falls
	prev              float64   // the last sample taken (hasPrev: there is one)
	hasPrev           bool
	ring              []gbucket // completed buckets, oldest first, at most n
	est               gtrend    // of ring, recomputed when a bucket completes
}

type gbucket struct{ t, v, spread, up, down float64 }

// gtrend is a window's verdict: rate > 0 only when the trend is significant; slope is the
// Theil–Sen slope whether or not it is (it detrends the next bucket); rise is the usage's
// change from the first bucket median to the last (full windows only).
type gtrend struct {
	rate, slope, rise float64
	full, lastRose    bool // all n buckets are there; the newest rose above the one before
	stopped           bool // the newest is not above the one two before: no writes for a bucket or two
}

func newGrowth(window, interval time.Duration) *growth {
	if interval <= 0 {
		interval = time.Second
	}
	g := &growth{veto: -1, half: interval / 2}
	fast := min(max(8*time.Second, 16*interval), window)
	g.windows = append(g.windows, newGWindow(fast, 4, 0, interval/2))
	g.windows[0].monotone = true
	if mid := 4 * fast; mid < window {
		g.windows = append(g.windows, newGWindow(mid, 4, 0, 0))
		g.veto = 1
	} else if fast < window {
		g.veto = 0
	}
	if fast < window {
		g.windows = append(g.windows, newGWindow(window, 8, 1, 0))
	}
	g.slow = len(g.windows) - 1
	return g
}

func newGWindow(window time.Duration, n, falls int, gap time.Duration) *gwindow {
	span := window / time.Duration(n)
	w := &gwindow{window: window, span: span, gap: max(gap, span/16), n: n, falls: falls}
	w.ring = make([]gbucket, 0, n)
	return w
}

// ownWrite accounts bytes sandboxd itself wrote (negative: freed, or fewer written than
// declared). The order of the announcement and the change on disk does not matter beyond
// a sample or two: a bucket's median does not move for one sample.
func (g *growth) ownWrite(bytes int64) { g.own += bytes }

// add records a sample; one not newer than the last is dropped.
func (g *growth) add(t time.Time, avail uint64) {
	if !g.last.IsZero() && !t.After(g.last) {
		return
	}
	if g.base.IsZero() {
		g.base = t
	}
	g.last = t
	used := -float64(int64(min(avail, 1<<62)) + g.own)
	secs := t.Sub(g.base).Seconds()
	for _, w := range g.windows {
		g.take(w, t, secs, used)
	}
	g.cur = g.combine()
}

func (g *growth) take(w *gwindow, t time.Time, secs, used float64) {
	if !w.lastTaken.IsZero() {
		if t.Sub(w.lastTaken) < w.gap {
			return
		}
		if t.Sub(w.lastTaken) > w.window { // a gap longer than the window: start afresh
			w.ring, w.ts, w.vs, w.est = w.ring[:0], w.ts[:0], w.vs[:0], gtrend{}
			w.up, w.down, w.hasPrev = 0, 0, false
			w.start = time.Time{}
		}
	}
	w.lastTaken = t
	// Buckets lie on a grid that starts half an interval before the first sample, so
	// their bounds fall between samples and a late tick does not stretch a bucket.
	if w.start.IsZero() {
		w.start = t.Add(-g.half)
	}
	if t.Sub(w.start) >= w.span && len(w.ts) > 0 {
		g.complete(w)
		w.start = w.start.Add(w.span)
		if t.Sub(w.start) >= w.span { // after a gap: a new grid from this sample
			w.start = t.Add(-g.half)
		}
	}
	if w.hasPrev {
		if d := used - w.prev; d > 0 {
			w.up += d
		} else {
			w.down -= d
		}
	}
	w.prev, w.hasPrev = used, true
	w.ts = append(w.ts, secs)
	w.vs = append(w.vs, used)
}

// complete closes w's bucket: its median time and usage and its spread join the ring,
// and w's trend is recomputed.
func (g *growth) complete(w *gwindow) {
	b := gbucket{t: w.ts[len(w.ts)/2]}
	if len(w.ts)%2 == 0 {
		b.t = (w.ts[len(w.ts)/2-1] + w.ts[len(w.ts)/2]) / 2
	}
	// The level is the median about the estimator's rate (that of the last sample: only
	// a significant trend, never a guess that churn could feed): for a steady fill the
	// detrended samples are equal, so one odd sample (a free seen before its
	// announcement, a file between its write and its delete) cannot move the median by
	// half a sample's step, as it would in a plain median of four.
	s := g.scratch[:0]
	for i, v := range w.vs {
		s = append(s, v-g.cur.rate*(w.ts[i]-b.t))
	}
	b.v = g.median(s)
	b.spread = g.spread(w.ts, w.vs)
	b.up, b.down, w.up, w.down = w.up, w.down, 0, 0
	if len(w.ring) == w.n {
		copy(w.ring, w.ring[1:])
		w.ring = w.ring[:w.n-1]
	}
	w.ring = append(w.ring, b)
	w.ts, w.vs = w.ts[:0], w.vs[:0]
	w.est = g.trend(w)
}

// median of vs (sorted in the scratch buffer; vs is left as it was).
func (g *growth) median(vs []float64) float64 {
	s := g.scratch[:0]
	if len(vs) > len(g.scratch) {
		s = make([]float64, 0, len(vs))
	}
	s = append(s, vs...)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// spread is the range of a bucket's samples about the bucket's own trend (the slope from
// the median of its first half to that of its second), less the one sample farthest out.
// A steady fill has none however fast it is; noise and churn have their amplitude.
func (g *growth) spread(ts, vs []float64) float64 {
	n := len(vs)
	if n < 2 {
		return 0
	}
	h := n / 2
	t0, t1 := g.median(ts[:h]), g.median(ts[n-h:])
	v0, v1 := g.median(vs[:h]), g.median(vs[n-h:])
	slope := 0.0
	if t1 > t0 {
		slope = (v1 - v0) / (t1 - t0)
	}
	res := g.scratch[:0]
	for i := range vs {
		res = append(res, vs[i]-slope*ts[i])
	}
	slices.Sort(res)
	if n >= 4 { // one odd sample (a free seen before its announcement) is not the spread
		if res[n-1]-res[n/2] > res[n/2]-res[0] {
			return res[n-2] - res[0]
		}
		return res[n-1] - res[1]
	}
	return res[n-1] - res[0]
}

// trend judges w's completed buckets (see growth).
func (g *growth) trend(w *gwindow) gtrend {
	if len(w.ring) < w.n {
		return gtrend{}
	}
	r := w.ring
	est := gtrend{full: true, rise: r[len(r)-1].v - r[0].v}
	est.slope = g.theilSen(r[1:]) // not the oldest bucket: it most likely holds the trend's start
	est.lastRose = r[len(r)-1].v >= r[len(r)-2].v+minRise
	est.stopped = r[len(r)-1].v < r[len(r)-3].v+minRise
	falls := 0
	for i := 1; i < len(r); i++ {
		if r[i].v < r[i-1].v+minRise {
			falls++
		}
	}
	if falls > w.falls || !est.lastRose {
		return est
	}
	spreads := g.scratch[:0]
	for _, b := range r {
		spreads = append(spreads, b.spread)
	}
	if est.rise <= 2*g.median(spreads) {
		return est
	}
	if w.monotone {
		var up, down float64
		for _, b := range r {
			up, down = up+b.up, down+b.down
		}
		if down > up/3 {
			return est // as much falling as rising: churn with a drift, not a fill
		}
	}
	est.rate = max(est.slope, 0)
	return est
}

// theilSen is the median of the slopes between every two of bs.
func (g *growth) theilSen(bs []gbucket) float64 {
	var buf [28]float64 // the slopes of 8 buckets
	slopes := buf[:0]
	for i := range bs {
		for j := i + 1; j < len(bs); j++ {
			if dt := bs[j].t - bs[i].t; dt > 0 {
				slopes = append(slopes, (bs[j].v-bs[i].v)/dt)
			}
		}
	}
	if len(slopes) == 0 {
		return 0
	}
	return g.median(slopes)
}

// estimate is what a sample's growth says: rate (bytes/s, 0 = not filling) over window for
// the prediction, and slow, the rate the adaptive reclaim threshold may use.
type estimate struct {
	rate   float64
	window time.Duration
	slow   float64
}

// estimate is the estimate as of the last sample.
func (g *growth) estimate(time.Time) estimate { return g.cur }

// combine is the fastest significant window's rate, and the growth window's.
func (g *growth) combine() estimate {
	var e estimate
	for i, w := range g.windows {
		if w.est.rate <= 0 {
			continue
		}
		if g.veto >= 0 && i > g.veto {
			if v := g.windows[g.veto].est; v.full && v.stopped {
				break // the usage stopped rising: slower windows have not seen it yet
			}
		}
		if e.rate == 0 {
			e.rate, e.window = w.est.rate, w.window
		}
		if i == g.slow {
			e.slow = w.est.rate
		}
	}
	return e
}
