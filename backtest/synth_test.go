package backtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// A synthetic trace: a series of samples with what sandboxd itself wrote (own, the
// cumulative bytes announced, negative for frees) and the outcome it must have.
type trace struct {
	name     string
	interval time.Duration
	points   []point
	want     outcome
	recorded bool // on this machine, with real commands
}

type point struct {
	t           time.Time
	avail, size uint64
	own         int64 // cumulative bytes sandboxd announced as its own at t
}

// outcome is what the policy must do on a trace.
type outcome struct {
	// fill: a steady fill begins at fillStart (the trace's time) and goes to the wall:
	// DiskFillingUp within max(10 s, 20 samples) of it (or of the first sample, when
	// the fill was already on), predictions within ±30% of the true time to full.
	fill      bool
	fillStart time.Time
	// quiet: no DiskFillingUp and no rise of the adaptive threshold, ever (quietAfter
	// not zero: from then on; before it the trace is transient).
	quiet      bool
	quietAfter time.Time
	// transient: a finite writer (a build, a copy): DiskFillingUp may be raised while it
	// writes, the adaptive threshold must not rise.
	transient bool
	// endsQuiet: a long writer; by the last sample (a minute after it ended) neither a
	// prediction nor a raised threshold is left.
	endsQuiet bool
}

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// series samples used (everything on disk at a time offset, in seconds) every interval
// for dur; the size is fixed. own gives what sandboxd has announced as its own by then
// (nil: nothing). Samples jitter by up to a
// tenth of the interval, as a loaded machine's ticker does.
func series(rng *rand.Rand, interval, dur time.Duration, size uint64, used func(s float64) float64, own func(s float64) int64) []point {
	var out []point
	for d := time.Duration(0); d <= dur; d += interval {
		at := d + time.Duration(rng.Int64N(int64(interval/10)+1))
		s := at.Seconds()
		u := used(s)
		var o int64
		if own != nil {
			o = own(s)
		}
		avail := float64(size) - u
		avail = math.Max(0, math.Min(avail, float64(size)))
		out = append(out, point{t: t0.Add(at), avail: uint64(avail) &^ 4095, size: size, own: o})
	}
	return out
}

// fillTrace: usage base, then from start (seconds, may be negative: the fill was on
// before the first sample) rate bytes/s up to the wall, then full for a while.
func fillTrace(rng *rand.Rand, interval time.Duration, rate float64, size, free uint64, start float64) trace {
	base := float64(size - free)
	wall := start + float64(free)/rate
	dur := time.Duration(max(wall, 0)*float64(time.Second)) + 30*time.Second
	name := fmt.Sprintf("fill %s/s %s free of %s, start %+.0fs, every %s", human(rate), human(float64(free)), human(float64(size)), start, interval)
	pts := series(rng, interval, dur, size, func(s float64) float64 {
		if s < start {
			return base
		}
		return min(base+(s-start)*rate, float64(size))
	}, nil)
	return trace{name: name, interval: interval, points: pts,
		want: outcome{fill: true, fillStart: t0.Add(time.Duration(max(start, 0) * float64(time.Second)))}}
}

func human(v float64) string {
	switch {
	case v >= gib:
		return fmt.Sprintf("%.4gGiB", v/gib)
	case v >= mib:
		return fmt.Sprintf("%.4gMiB", v/mib)
	default:
		return fmt.Sprintf("%.4gKiB", v/kib)
	}
}

// churnSquare: a file of rate×period bytes is written at disk speed, kept for duty of
// the period, deleted, every period (with a random phase).
func churnSquare(rng *rand.Rand, interval time.Duration, rate, period, duty float64) trace {
	size, base := uint64(4*gib), float64(1*gib)
	amp := rate * period
	phase := rng.Float64() * period
	return trace{name: fmt.Sprintf("churn square %s/s period %.1fs duty %.0f%% every %s", human(rate), period, duty*100, interval),
		interval: interval, want: outcome{quiet: true},
		points: series(rng, interval, 15*time.Minute, size, func(s float64) float64 {
			if math.Mod(s+phase, period) < duty*period {
				return base + amp
			}
			return base
		}, nil)}
}

// churnRamp: rate bytes/s written for the period, then all deleted.
func churnRamp(rng *rand.Rand, interval time.Duration, rate, period float64) trace {
	size, base := uint64(4*gib), float64(1*gib)
	phase := rng.Float64() * period
	return trace{name: fmt.Sprintf("churn ramp %s/s period %.1fs every %s", human(rate), period, interval),
		interval: interval, want: outcome{quiet: true},
		points: series(rng, interval, 15*time.Minute, size, func(s float64) float64 {
			return base + rate*math.Mod(s+phase, period)
		}, nil)}
}

// noise: usage wanders ±amp around a level, independently at each sample.
func noise(rng *rand.Rand, interval time.Duration, amp float64) trace {
	size, base := uint64(4*gib), float64(3*gib)
	return trace{name: fmt.Sprintf("noise ±%s every %s", human(amp), interval),
		interval: interval, want: outcome{quiet: true},
		points: series(rng, interval, 30*time.Minute, size, func(float64) float64 {
			return base + (rng.Float64()*2-1)*amp
		}, nil)}
}

// checkout: one write of total bytes over secs at start, then quiet.
func checkout(rng *rand.Rand, interval time.Duration, total, secs float64) trace {
	size, base := uint64(4*gib), float64(1*gib)
	return trace{name: fmt.Sprintf("checkout %s in %.0fs every %s", human(total), secs, interval),
		interval: interval, want: outcome{quiet: true},
		points: series(rng, interval, 20*time.Minute, size, func(s float64) float64 {
			switch {
			case s < 60:
				return base
			case s < 60+secs:
				return base + total*(s-60)/secs
			}
			return base + total
		}, nil)}
}

// sawtooth: sandboxd's own cycle, others quiet: its reserve file (amp bytes) re-armed
// and released every period, and its reclaim freeing what a tool then writes back
// within the period. The announcements come a sample early or late.
func sawtooth(rng *rand.Rand, interval time.Duration, amp, period float64) trace {
	size, base := uint64(4*gib), float64(2*gib)
	skew := (rng.Float64()*2 - 1) * interval.Seconds()
	return trace{name: fmt.Sprintf("own sawtooth %s period %.0fs every %s", human(amp), period, interval),
		interval: interval, want: outcome{quiet: true},
		points: series(rng, interval, 30*time.Minute, size, func(s float64) float64 {
			// on disk, the reserve is there for the first half of each period
			if math.Mod(s, period) < period/2 {
				return base + amp
			}
			return base
		}, func(s float64) int64 {
			if math.Mod(s+skew, period) < period/2 { // announced skew seconds off
				return int64(amp)
			}
			return 0
		})}
}
