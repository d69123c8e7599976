package pressure

import "time"

// growth estimates how fast writes consume a filesystem.
//
// The trend of the writes decides, not the level: between consecutive samples only the
// decreases of avail count (the consumption); increases (a reclaim, a deleted file, the
// reserve released) are ignored, so a reclaimer's sawtooth does not read as "not filling"
// and a freed jump does not reset the prediction while writes go on. The rate is the
// consumption over the sliding window divided by the time the window's samples span;
// predict_linear on avail (node-mixin) would instead read a reclaim as negative growth.
//
// Writes that stop must clear the prediction promptly, not fade out over the whole window:
// when no sample in the last quiet period showed a decrease, the rate is 0. The quiet
// period (a fifth of the window, at least three sample intervals) is long enough that a
// writer pausing between bursts keeps its trend, and the conditions' transition period
// keeps DiskFillingUp from flapping on top of that.
//
// sandboxd's own writes (its reserve file, its state) are not growth: the writer declares
// them first (ownWrite) and the next decreases are discounted by that credit, which lapses
// after creditFor so that a declared write that never happened cannot hide real writes.
type growth struct {
	window, quiet time.Duration
	creditFor     time.Duration
	max           int
	pts           []growthPoint // oldest first, within window of the newest
	lastDrop      time.Time     // when avail last went down by more than the credit
	credit        uint64        // bytes of sandboxd's own writes not yet seen as a decrease
	creditUntil   time.Time
}

type growthPoint struct {
	t        time.Time
	avail    uint64
	consumed uint64 // the decrease since the previous point, less sandboxd's own writes
}

func newGrowth(window, interval time.Duration) *growth {
	n := 1024
	if interval > 0 {
		n = min(max(int(window/interval)+2, 16), 4096)
	}
	return &growth{window: window, quiet: max(window/5, 3*interval), creditFor: max(5*interval, 5*time.Second), max: n}
}

// ownWrite declares that sandboxd itself is about to consume bytes (negative: fewer than
// declared were written) at t.
func (g *growth) ownWrite(t time.Time, bytes int64) {
	if !t.Before(g.creditUntil) {
		g.credit = 0
	}
	if bytes < 0 {
		g.credit -= min(g.credit, uint64(-bytes))
	} else {
		g.credit += uint64(bytes)
	}
	g.creditUntil = t.Add(g.creditFor)
}

// add records a sample; samples older than the newest are dropped.
func (g *growth) add(t time.Time, avail uint64) {
	p := growthPoint{t: t, avail: avail}
	if n := len(g.pts); n > 0 {
		last := g.pts[n-1]
		if !t.After(last.t) {
			return
		}
		if avail < last.avail {
			p.consumed = last.avail - avail
			if g.credit > 0 && t.Before(g.creditUntil) {
				own := min(g.credit, p.consumed)
				g.credit -= own
				p.consumed -= own
			}
		}
		if p.consumed > 0 {
			g.lastDrop = t
		}
	}
	g.pts = append(g.pts, p)
	cut := 0
	for cut < len(g.pts)-1 && (t.Sub(g.pts[cut].t) > g.window || len(g.pts)-cut > g.max) {
		cut++
	}
	if cut > 0 {
		g.pts = append(g.pts[:0], g.pts[cut:]...)
	}
}

// rate is the consumption in bytes per second at now (0: not filling).
func (g *growth) rate(now time.Time) float64 {
	if len(g.pts) < 2 || g.lastDrop.IsZero() || now.Sub(g.lastDrop) > g.quiet {
		return 0
	}
	var consumed float64
	for _, p := range g.pts[1:] {
		consumed += float64(p.consumed)
	}
	span := g.pts[len(g.pts)-1].t.Sub(g.pts[0].t).Seconds()
	if span <= 0 || consumed <= 0 {
		return 0
	}
	return consumed / span
}
