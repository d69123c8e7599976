package backtest

import (
	"math/rand/v2"
	"testing"
	"time"
)

// syntheticCorpus is every synthetic pattern of issue 24's targets.
func syntheticCorpus() []trace {
	rng := rand.New(rand.NewPCG(24, 24))
	var out []trace
	for _, iv := range []time.Duration{250 * time.Millisecond, time.Second, 10 * time.Second} {
		for _, rate := range []float64{64 * kib, 1 * mib, 2 * mib, 64 * mib, 1 * gib} {
			for _, ttf := range []float64{180, 1800} {
				for _, start := range []float64{30, 0, -60} {
					free := uint64(rate*ttf) &^ 4095
					if float64(free)/rate <= max(10, 20*iv.Seconds())*2 {
						continue
					}
					out = append(out, fillTrace(rng, iv, rate, free+8*gib, free, start))
				}
			}
		}
		for _, rate := range []float64{1 * mib, 20 * mib, 50 * mib} {
			for _, period := range []float64{0.5, 1, 2, 5, 10} {
				for _, duty := range []float64{0.1, 0.5, 0.9} {
					out = append(out, churnSquare(rng, iv, rate, period, duty))
				}
			}
		}
		out = append(out, noise(rng, iv, 1*mib))
		for _, secs := range []float64{1, 3} {
			out = append(out, checkout(rng, iv, 500*mib, secs))
		}
		out = append(out, sawtooth(rng, iv, 256*mib, 120), sawtooth(rng, iv, 30*mib, 20))
	}
	return out
}

func TestSyntheticCorpus(t *testing.T) {
	for _, tr := range syntheticCorpus() {
		sc := runTrace(tr)
		switch {
		case tr.want.fill:
			if sc.detectDelay < 0 || sc.detectDelay > sc.deadline {
				t.Errorf("%s: DiskFillingUp after %v, want within %v", tr.name, sc.detectDelay, sc.deadline)
			}
			if sc.maxTTFError > 0.3 {
				t.Errorf("%s: time to full off by %.0f%% (over %d samples)", tr.name, sc.maxTTFError*100, sc.ttfSamples)
			}
			if testing.Verbose() {
				t.Logf("%s: raised after %v (window %v), ttf error %.0f%% over %d samples", tr.name, sc.detectDelay, sc.window, sc.maxTTFError*100, sc.ttfSamples)
			}
		case tr.want.quiet:
			if sc.fillingUps > 0 || sc.raisedSamples > 0 {
				t.Errorf("%s: DiskFillingUp raised %d times, threshold raised on %d samples", tr.name, sc.fillingUps, sc.raisedSamples)
			}
		}
	}
}
