package backtest

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
	"github.com/sandboxd/sandboxd/pressure"
)

func testConfig() Config {
	return Config{
		Filesystem: pressure.FSConfig{
			Path: "/sandbox", ReclaimBelow: units.Threshold{Amount: 64 << 20},
			ReplaceBelow: units.Threshold{Amount: 16 << 20}, WarnTimeToFull: time.Hour,
		},
		Pressure: pressure.Options{SampleInterval: time.Second, TransitionPeriod: time.Minute, LeadTime: 10 * time.Minute},
		Headroom: 32 << 20, Cooldown: 10 * time.Minute,
	}
}

// A steady writer on a 1 GiB disk: the engine raises DiskFillingUp before the disk is
// full, starts one pressure reclaim when free space drops below the threshold (the
// Ladder frees what it is asked to), and is refused within the cooldown when the
// writer fills the disk again: ReplaceRecommended instead, as the daemon does.
func TestEngineSteadyFillReclaimsThenRefuses(t *testing.T) {
	cfg := testConfig()
	var own uint64
	cfg.Ladder = func(_ time.Time, deficit uint64) (string, uint64) {
		own += deficit
		return "entries", deficit
	}
	e := New(cfg)
	t0 := time.Unix(1_700_000_000, 0)
	const size, rate = 1 << 30, 2 << 20
	avail := uint64(size - 100<<20)
	var kinds []Kind
	var started Event
	for i := 0; i < 600 && avail > rate; i++ {
		for _, ev := range e.Step(t0.Add(time.Duration(i)*time.Second), Sample{AvailBytes: avail + own, SizeBytes: size}) {
			kinds = append(kinds, ev.Kind)
			if ev.Kind == ReclaimStarted {
				started = ev
			}
		}
		avail -= rate
	}
	sum := e.Summary()
	if sum.FirstFillingUp.IsZero() || sum.Raised[api.CondDiskFillingUp] == 0 {
		t.Fatalf("DiskFillingUp never raised under a steady 2 MiB/s writer: %+v", sum)
	}
	if sum.Reclaims != 1 || started.Rung != "entries" || started.TargetBytes < 64<<20+32<<20 {
		t.Fatalf("want one reclaim to threshold + headroom, got %d, last %+v", sum.Reclaims, started)
	}
	if sum.Refused != 1 || !e.State().Replace {
		t.Fatalf("want the second low episode refused within the cooldown and ReplaceRecommended: %+v, events %v", sum, kinds)
	}
	if sum.Samples == 0 || sum.Verdict != api.VerdictReplace {
		t.Fatalf("summary %+v", sum)
	}
}

// A quiet disk: no event at all, the verdict healthy, the threshold static.
func TestEngineQuiet(t *testing.T) {
	e := New(testConfig())
	t0 := time.Unix(1_700_000_000, 0)
	for i := 0; i < 3600; i++ {
		if evs := e.Step(t0.Add(time.Duration(i)*time.Second), Sample{AvailBytes: 512 << 20, SizeBytes: 1 << 30, FilesFree: 1000, Files: 2000}); len(evs) > 0 {
			t.Fatalf("second %d: %v on a quiet disk", i, evs)
		}
	}
	st := e.State()
	if st.Verdict != api.VerdictHealthy || st.ThresholdRaised() || st.Figures.GrowthBytesPerSecond != 0 {
		t.Fatalf("state %+v", st)
	}
}

// BenchmarkStep is one sample through the engine on a filesystem with a slow writer
// (the levels change every sample, nothing is true), the fleet simulator's common case.
func BenchmarkStep(b *testing.B) {
	e := New(testConfig())
	t0 := time.Unix(1_700_000_000, 0)
	avail := uint64(800 << 20)
	i := 0
	for b.Loop() {
		i++
		avail -= 1 << 10
		if avail < 600<<20 {
			avail = 800 << 20
		}
		e.Step(t0.Add(time.Duration(i)*time.Second), Sample{AvailBytes: avail, SizeBytes: 1 << 30})
	}
}
