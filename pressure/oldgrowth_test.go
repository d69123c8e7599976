package pressure

import (
	"slices"
	"time"
)

// oldGrowth is the estimator issue 24 replaced (net change between the medians of the
// two ends of the 10m window), kept for BenchmarkGrowthRate's side-by-side figures only.
type oldGrowth struct {
	window, quiet, level time.Duration
	gap                  time.Duration // the least time between two points (half an interval)
	max                  int
	pts                  []oldGrowthPoint // oldest first, within window of the newest
	own                  int64            // bytes sandboxd wrote minus bytes it freed, so far
	scratch              []int64          // levelAt's sort buffer
}

type oldGrowthPoint struct {
	t     time.Time
	avail int64 // free space as it would be without sandboxd's own writes and frees
}

func newOldGrowth(window, interval time.Duration) *oldGrowth {
	n := 1024
	if interval > 0 {
		n = min(max(int(window/interval)+2, 16), 4096)
	}
	return &oldGrowth{window: window, quiet: max(window/5, 3*interval), level: max(window/20, 3*interval), gap: interval / 2, max: n}
}

// add records a sample; samples older than the newest are dropped, and so are those
// within half an interval of it: every Measure (a launch) is a sample too, and a storm
// of launches must not push the window's history out through the cap on points.
func (g *oldGrowth) add(t time.Time, avail uint64) {
	if n := len(g.pts); n > 0 && (!t.After(g.pts[n-1].t) || t.Sub(g.pts[n-1].t) < g.gap) {
		return
	}
	g.pts = append(g.pts, oldGrowthPoint{t: t, avail: int64(min(avail, 1<<62)) + g.own})
	cut := 0
	for cut < len(g.pts)-1 && (t.Sub(g.pts[cut].t) > g.window || len(g.pts)-cut > g.max) {
		cut++
	}
	if cut > 0 {
		g.pts = append(g.pts[:0], g.pts[cut:]...)
	}
}

// rate is the net growth of others' usage in bytes per second at now (0: not filling).
func (g *oldGrowth) rate(now time.Time) float64 {
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
func (g *oldGrowth) levelAt(from, to time.Time) (t time.Time, avail int64, ok bool) {
	lo, _ := slices.BinarySearchFunc(g.pts, from, func(p oldGrowthPoint, t time.Time) int { return p.t.Compare(t) })
	hi, found := slices.BinarySearchFunc(g.pts, to, func(p oldGrowthPoint, t time.Time) int { return p.t.Compare(t) })
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
