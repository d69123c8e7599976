package main

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/reclaim"
)

// A small fleet gives the same table for the same seed, whatever the number of workers,
// and another table for another seed.
func TestSameSeedSameTable(t *testing.T) {
	p := DefaultParams()
	p.Sandboxes, p.Days = 12, 4
	pols := []Policy{Policies()[0], Policies()[1], Policies()[2]}
	report := func(seed uint64, workers int) string {
		rows, f := Simulate(p, seed, pols, workers)
		return Report(p, seed, rows, f)
	}
	a, b := report(7, 1), report(7, 2)
	if a != b {
		t.Fatalf("same seed, different tables:\n%s\n%s", a, b)
	}
	if c := report(8, 2); c == a {
		t.Errorf("seeds 7 and 8 gave the same table:\n%s", c)
	}
	for _, want := range []string{"| 1 | none |", "| 3 | sandboxd", "-seed 7", "12 sandboxes × 4 simulated days"} {
		if !strings.Contains(a, want) {
			t.Errorf("report lacks %q:\n%s", want, a)
		}
	}
}

// handSpec is a sandbox with nothing random in it: an 8 GiB disk, 6 GiB of system, a
// 1 GiB store and one session of minutes.
func handSpec(minutes int) spec {
	return spec{index: 0, seed: 1, size: 8 * gib, system: 6 * gib, storeCeil: 1 * gib, storeStart: 1,
		sessions: []session{{start: epoch, minutes: minutes, seed: 2}}}
}

// The scoring on hand-made runs: a runaway fill on a disk nothing reclaims is 100% with
// failed commands and no warning; sandboxd warns before a slow fill reaches 100% and
// frees the store first.
func TestScoringOnHandMadeSandboxes(t *testing.T) {
	p := DefaultParams()
	p.BuildsPerHour, p.NewCheckoutPerHour = 0, 0 // nothing random happens
	pols := Policies()

	// 2 GiB of slow fill (20 MiB a minute) on a disk with 1 GiB free, 100 commands a
	// minute: it is full after ~50 minutes without reclaim.
	sp := handSpec(150)
	sp.cmdsPerMin = 100
	sp.sessions[0].runaway = &runaway{at: 0, minutes: 100, bytesPerMin: 20 * mib}
	none := simulate(p, sp, pols[0])
	if !none.everFull || none.enospcMinutes < 90 || none.failed < 9000 || len(none.fulls) != 1 {
		t.Fatalf("none: %+v", none)
	}
	if none.leads[0] != 0 {
		t.Errorf("none warned %s before 100%%: it has no warnings", none.leads[0])
	}
	sd := simulate(p, sp, pols[2])
	if sd.reclaims == 0 {
		t.Fatalf("sandboxd ran no reclaim: %+v", sd)
	}
	if !sd.everFull || len(sd.leads) == 0 || sd.leads[0] < 10*time.Minute {
		t.Errorf("sandboxd: the fill is bigger than the store, so it reaches 100%% but with a warning up long before: %+v", sd)
	}
	if sd.enospcMinutes >= none.enospcMinutes {
		t.Errorf("sandboxd %0.f ENOSPC-minutes, none %0.f: the store's gigabyte should have bought time", sd.enospcMinutes, none.enospcMinutes)
	}

	// The scores of a hand-made fleet.
	v := epoch.Add(time.Hour)
	rs := []result{
		{everFull: true, enospcMinutes: 30, failed: 10, commands: 100, reclaims: 6, replaces: []time.Time{v}, fulls: []time.Time{v.Add(2 * time.Hour)}, leads: []time.Duration{time.Hour}},
		{commands: 100, reclaims: 0, replaces: []time.Time{v}}, // a replace never followed by 100%: not needed
		{everFull: true, enospcMinutes: 10, failed: 5, commands: 100, fulls: []time.Time{v}, leads: []time.Duration{0}, loadBearing: true, redownloaded: 3 * gib},
		{commands: 100},
	}
	p.Days = 3
	row := score(p, pols[2], rs)
	if row.EverFullPct != 50 || row.EnospcMinutes != 40 || row.Failed != 15 || row.FailedPct != 15.0/4 {
		t.Errorf("fullness: %+v", row)
	}
	if row.ReclaimsPerDay != 0.5 || row.Replaces != 2 || row.ReplacesNeeded != 1 {
		t.Errorf("reclaims and replaces: %+v", row)
	}
	if row.FullEpisodes != 2 || row.Warned != 1 || row.LeadMedian != 0 || row.LeadP5 != 0 {
		t.Errorf("lead times: %+v", row)
	}
	if row.RedownloadGiB != 3 || row.RedownloadLBGiB != 3 || row.LoadBearing != 1 {
		t.Errorf("re-downloads: %+v", row)
	}
	if q := quantile([]time.Duration{4, 1, 3, 2}, 0.5); q != 2 {
		t.Errorf("median of 1..4 = %d", q)
	}
}

// The ladder model takes a thrashing store after the build cache, and only as far as the
// replace threshold; otherwise the store's gc comes first.
func TestLadderTakesAThrashingCacheLast(t *testing.T) {
	p := DefaultParams()
	for _, thrashing := range []bool{false, true} {
		s := &sim{p: p, pol: sandboxdPolicy("x"), sp: spec{seed: 1}}
		s.d = disk{size: 10 * gib, system: 8 * gib, store: 1 * gib, storeUnref: 256 * mib, buildCache: 512 * mib}
		if thrashing {
			for i := range reclaim.ThrashPrunes {
				at := epoch.Add(time.Duration(i) * 2 * time.Hour)
				s.d.storeHist.Pruned(at, 100*mib, 0, 0)
				s.d.storeHist.Observe(at.Add(10*time.Minute), 100*mib)
			}
			s.d.storeHist.Expire(epoch.Add(24 * time.Hour))
		}
		// avail is 512 MiB; ask for 1 GiB more.
		rung, freed := s.ladder(epoch.Add(48*time.Hour), 1*gib)
		switch {
		case !thrashing && (freed != 1*gib || s.d.storeUnref != 0 || s.d.buildCache != 0):
			t.Errorf("not thrashing: freed %d (rung %s), store unref %d, build cache %d: want gc, the build cache, then store entries",
				freed, rung, s.d.storeUnref, s.d.buildCache)
		case thrashing && (s.d.buildCache != 0 || s.d.store != 1*gib):
			t.Errorf("thrashing: build cache %d, store %d: the build cache goes first and the store is kept above replace_below (avail %d)",
				s.d.buildCache, s.d.store, s.d.avail())
		}
	}
}

// BenchmarkFleetRow is one row's cost: 50 sandboxes × 30 days under the policy of that
// row (none, the write-up's, sandboxd's defaults through the backtest engine), GOGC as
// the command sets it. docs/benchmarks.md, section 9.
func BenchmarkFleetRow(b *testing.B) {
	p := DefaultParams()
	p.Sandboxes = 50
	for _, row := range []int{1, 2, 3} {
		pol := Policies()[row-1]
		b.Run(fmt.Sprintf("row%d", row), func(b *testing.B) {
			old := debug.SetGCPercent(800)
			defer debug.SetGCPercent(old)
			for range b.N {
				Simulate(p, 1, []Policy{pol}, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/float64(p.Sandboxes), "ms/sandbox")
		})
	}
}
