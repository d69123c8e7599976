package pressure

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/units"
)

// rawSignals is evaluate's raw signals without the messages (a Tracker's lazy step
// decides with it whether anything can flip): the two must agree on every input.
func TestRawSignalsAgreeWithEvaluate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs ...uint64) uint64 { return vs[rng.IntN(len(vs))] }
	for i := 0; i < 20000; i++ {
		f := api.Filesystem{Path: "/x",
			SizeBytes: pick(0, 1<<30), AvailBytes: pick(0, 1, 10<<20, 100<<20, 1<<30),
			Files: pick(0, 1000), FilesFree: pick(0, 5, 50, 1000)}
		if rng.IntN(2) == 0 {
			p := float64(rng.IntN(7200))
			f.PredictedFullSeconds = &p
			f.GrowthBytesPerSecond = 1
		}
		r := resolved{reclaim: pick(0, 10<<20, 100<<20), replace: pick(0, 1<<20, 50<<20),
			reclaimInodes: pick(0, 10, 100), replaceInodes: pick(0, 1, 20)}
		warn := time.Duration(pick(0, uint64(time.Hour)))
		raws := rawSignals(f, r, warn)
		for j, s := range evaluate(f, r, warn) {
			if s.typ != pressureTypes[j] || s.raw != raws[j] {
				t.Fatalf("%+v %+v warn %v: evaluate says %s %v, rawSignals %s %v", f, r, warn, s.typ, s.raw, pressureTypes[j], raws[j])
			}
		}
	}
}

// A lazy step (a Tracker's) flips the same conditions at the same samples as the
// Watcher's full one, through fills, frees, quiet and transition periods.
func TestLazyStepFlipsAsTheFullOne(t *testing.T) {
	cfg := FSConfig{Path: "/x", ReclaimBelow: units.Threshold{Amount: 64 << 20},
		ReplaceBelow: units.Threshold{Amount: 16 << 20}, WarnTimeToFull: time.Hour,
		ReclaimBelowInodes: units.Threshold{Amount: 100}}
	full := &fsState{cfg: cfg, growth: newGrowth(10*time.Minute, time.Second)}
	fullConds := newCondSet(time.Minute)
	tr := NewTracker(cfg, Options{SampleInterval: time.Second, TransitionPeriod: time.Minute, LeadTime: 10 * time.Minute})
	rng := rand.New(rand.NewPCG(3, 4))
	t0 := time.Unix(1_700_000_000, 0)
	avail, files := int64(1<<30), int64(5000)
	flips := 0
	for i := 0; i < 20000; i++ {
		switch phase := (i / 500) % 4; phase {
		case 0: // fill
			avail -= 3 << 20
		case 1: // quiet with noise
			avail += rng.Int64N(2<<20) - 1<<20
		case 2: // frees
			if i%50 == 0 {
				avail += 300 << 20
			}
		case 3:
			files += rng.Int64N(100) - 55
		}
		avail = min(max(avail, 0), 1<<30)
		files = min(max(files, 0), 10000)
		f := api.Filesystem{SizeBytes: 1 << 30, AvailBytes: uint64(avail), FreeBytes: uint64(avail),
			Files: 10000, FilesFree: uint64(files), SampledAt: t0.Add(time.Duration(i) * time.Second)}
		f.Path = "/x"
		want := describe(full.step(f, fullConds, 10*time.Minute, nil, nil))
		_, evs := tr.Sample(f)
		if got := describe(evs); got != want {
			t.Fatalf("sample %d: lazy step flipped %s, the full one %s", i, got, want)
		}
		flips += len(evs)
	}
	if flips < 10 {
		t.Fatalf("only %d flips: the series does not exercise the conditions", flips)
	}
}

func describe(evs []api.Event) string {
	out := ""
	for _, ev := range evs {
		out += fmt.Sprintf("[%v %v %v]", ev.Fields["type"], ev.Fields["status"], ev.Fields["reason"])
	}
	return out
}
