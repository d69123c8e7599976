package pressure

import (
	"slices"
	"time"
)

// growth estimates how fast others (not sandboxd) fill a filesystem: the NET rate of
// change of their used space over a sliding window, what a person comparing two `df`
// readings a minute apart would compute.
//
// sandboxd's own changes are kept out of it by an account: every byte sandboxd writes
// (its reserve file, its state documents) or frees (reclaim deletions and commands,
// site prunes and drains, the reserve released) is announced to the watcher (ownWrite,
// with a negative count for a free), and each sample's free space is recorded as it would
// be without them (avail + own). So the daemon's own reclaim sawtooth neither reads as
// "not filling" (a free does not reset the rate of a writer that goes on) nor its reserve
// as growth, while a user's rm lowers the rate honestly. The old estimator summed only the
// decreases of free space and read net-zero churn (a 50 MiB file written and deleted every
// second) as 870 KiB/s of growth, which raised the adaptive threshold and deleted a cache.
//
// Each end of the window is a level, not a sample: the median of the samples within
// `level` (max(3 intervals, window/20)) of that end, at the median of their times. A file
// written and deleted within that time (a build's temporary files, churn) does not move a
// median, nor does a moment between a change on disk and its announcement. The rate is
// (level now − level at the window's start) / the time between them, 0 when it is not
// positive: a filesystem whose others' usage shrinks is not filling.
//
// Writes that stop must clear the prediction promptly, not fade out over the whole window:
// when the level now is not above the level `quiet` ago (a fifth of the window, at least
// three intervals), the rate is 0. The conditions' transition period keeps DiskFillingUp
// from flapping on top of that. A window shorter than two levels has no rate yet.
type growth struct {
	window, quiet, level time.Duration
	gap                  time.Duration // the least time between two points (half an interval)
	max                  int
	pts                  []growthPoint // oldest first, within window of the newest
	own                  int64         // bytes sandboxd wrote minus bytes it freed, so far
	scratch              []int64       // levelAt's sort buffer
}

type growthPoint struct {
	t     time.Time
	avail int64 // free space as it would be without sandboxd's own writes and frees
}

func newGrowth(window, interval time.Duration) *growth {
	n := 1024
	if interval > 0 {
		n = min(max(int(window/interval)+2, 16), 4096)
	}
	return &growth{window: window, quiet: max(window/5, 3*interval), level: max(window/20, 3*interval), gap: interval / 2, max: n}
}

// ownWrite accounts bytes sandboxd itself wrote (negative: freed, or fewer written than
// declared). The order of the announcement and the change on disk does not matter beyond
// a sample or two: the levels are medians.
func (g *growth) ownWrite(bytes int64) { g.own += bytes }

// add records a sample; samples older than the newest are dropped, and so are those
// within half an interval of it: every Measure (a launch) is a sample too, and a storm
// of launches must not push the window's history out through the cap on points.
func (g *growth) add(t time.Time, avail uint64) {
	if n := len(g.pts); n > 0 && (!t.After(g.pts[n-1].t) || t.Sub(g.pts[n-1].t) < g.gap) {
		return
	}
	g.pts = append(g.pts, growthPoint{t: t, avail: int64(min(avail, 1<<62)) + g.own})
	cut := 0
	for cut < len(g.pts)-1 && (t.Sub(g.pts[cut].t) > g.window || len(g.pts)-cut > g.max) {
		cut++
	}
	if cut > 0 {
		g.pts = append(g.pts[:0], g.pts[cut:]...)
	}
}

// rate is the net growth of others' usage in bytes per second at now (0: not filling).
func (g *growth) rate(now time.Time) float64 {
	if len(g.pts) < 2 {
		return 0
	}
	first, last := g.pts[0].t, g.pts[len(g.pts)-1].t
	if last.Sub(first) < 2*g.level {
		return 0
	}
	startT, startA, _ := g.levelAt(first, first.Add(g.level))
	nowT, nowA, _ := g.levelAt(last.Add(-g.level), last)
	if !nowT.After(startT) || nowA >= startA {
		return 0
	}
	ref := last.Add(-g.quiet)
	if ref.Before(first.Add(g.level)) {
		ref = first.Add(g.level)
	}
	if _, refA, ok := g.levelAt(ref.Add(-g.level), ref); ok && nowA >= refA {
		return 0 // nothing more was used over the quiet period: writes stopped
	}
	return float64(startA-nowA) / nowT.Sub(startT).Seconds()
}

// levelAt is the median time and the median free space of the samples within [from, to]
// (ok false: there is none). The samples are in time order: the slice is found by binary
// search, and its values sorted in a scratch buffer (rate runs on every sample, and
// Measure is on the launch path).
func (g *growth) levelAt(from, to time.Time) (t time.Time, avail int64, ok bool) {
	lo, _ := slices.BinarySearchFunc(g.pts, from, func(p growthPoint, t time.Time) int { return p.t.Compare(t) })
	hi, found := slices.BinarySearchFunc(g.pts, to, func(p growthPoint, t time.Time) int { return p.t.Compare(t) })
	if found {
		hi++
	}
	in := g.pts[lo:hi]
	if len(in) == 0 {
		return time.Time{}, 0, false
	}
	g.scratch = g.scratch[:0]
	for _, p := range in {
		g.scratch = append(g.scratch, p.avail)
	}
	slices.Sort(g.scratch)
	as, m := g.scratch, len(in)/2
	if len(in)%2 == 1 {
		return in[m].t, as[m], true
	}
	return in[m-1].t.Add(in[m].t.Sub(in[m-1].t) / 2), as[m-1] + (as[m]-as[m-1])/2, true
}

// estimate is what a sample's growth says: rate (bytes/s, 0 = not filling) over window for
// the prediction, and slow, the rate the adaptive reclaim threshold may use.
type estimate struct {
	rate   float64
	window time.Duration
	slow   float64
}

func (g *growth) estimate(now time.Time) estimate {
	r := g.rate(now)
	if r <= 0 {
		return estimate{}
	}
	return estimate{rate: r, window: g.window, slow: r}
}
