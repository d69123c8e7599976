package pressure

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

// netWatcher watches a tmpfs of size bytes sampled every (fake) second over a 1-minute window
// (levels of 3 s, a quiet period of 12 s): reclaim below 100 MiB, lead time 1m, warn
// when full within a minute.
func netWatcher(t *testing.T, size int64) (string, *fakeClock, *Watcher) {
	dir := testenv.Tmpfs(t, size, 0)
	clk := newFakeClock()
	w := New(Options{
		Filesystems: []FSConfig{{
			Path:           dir,
			ReclaimBelow:   units.Threshold{Amount: 100 << 20},
			WarnTimeToFull: time.Minute,
		}},
		SampleInterval:   time.Second,
		TransitionPeriod: 10 * time.Second,
		LeadTime:         time.Minute,
		GrowthWindow:     time.Minute,
		Now:              clk.Now,
	})
	return dir, clk, w
}

// TestChurnIsNotGrowth: a loop that writes and deletes a 50 MiB file every second (some
// samples see it, most do not) changes nothing net: growth 0, no prediction, no
// DiskFillingUp, the threshold stays the configured 100 MiB. The estimator that summed
// the drops read this as growth on an idle tmpfs and deleted a cache (issue 10, item 2).
func TestChurnIsNotGrowth(t *testing.T) {
	dir, clk, w := netWatcher(t, 512<<20)
	if err := testenv.Fill(filepath.Join(dir, "data"), 20<<20); err != nil {
		t.Fatal(err)
	}
	sample(t, w)
	churn := filepath.Join(dir, "churn")
	for i := 0; i < 150; i++ { // 2.5 windows of fake seconds
		if err := testenv.Fill(churn, 50<<20); err != nil {
			t.Fatal(err)
		}
		var figs []api.Filesystem
		if i%4 == 0 { // a sample while the file is there
			clk.Add(time.Second)
			figs = append(figs, sample(t, w))
		}
		if err := os.Remove(churn); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
		figs = append(figs, sample(t, w))
		for _, fig := range figs {
			if fig.GrowthBytesPerSecond > 1024 || fig.PredictedFullSeconds != nil {
				t.Fatalf("iteration %d: net-zero churn read as growth %s/s (prediction %v)", i,
					api.FormatSize(uint64(fig.GrowthBytesPerSecond)), fig.PredictedFullSeconds)
			}
			if fig.ReclaimThresholdBytes != 100<<20 {
				t.Fatalf("iteration %d: threshold moved to %s (%s)", i, api.FormatSize(fig.ReclaimThresholdBytes), fig.ReclaimThresholdWhy)
			}
		}
		for _, typ := range []string{api.CondDiskFillingUp, api.CondDiskPressure} {
			if c := cond(t, w, typ, dir); c.Status {
				t.Fatalf("iteration %d: %s raised by churn: %s", i, typ, c.Message)
			}
		}
	}
}

// TestSteadyWriterGrowthAndFillingUp: a writer of 5 MiB/s reads as 5 MiB/s (within 30%)
// once the window holds its writes, and DiskFillingUp is raised once the predicted time to
// full is under warn_time_to_full (and free space under the gate).
func TestSteadyWriterGrowthAndFillingUp(t *testing.T) {
	dir, clk, w := netWatcher(t, 512<<20)
	const rate = 5 << 20
	sample(t, w)
	raised := false
	for i := 0; i < 95; i++ {
		if err := testenv.Fill(filepath.Join(dir, fmt.Sprint(i)), rate); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
		fig := sample(t, w)
		up := cond(t, w, api.CondDiskFillingUp, dir)
		if i < 60 { // the window (1m) still holds its start
			continue
		}
		if math.Abs(fig.GrowthBytesPerSecond-rate) > 0.3*rate {
			t.Fatalf("second %d: growth %s/s under a 5 MiB/s writer", i, api.FormatSize(uint64(fig.GrowthBytesPerSecond)))
		}
		if fig.PredictedFullSeconds == nil {
			t.Fatalf("second %d: no prediction under a steady writer", i)
		}
		due := *fig.PredictedFullSeconds < time.Minute.Seconds() && fig.AvailBytes < 2*fig.ReclaimThresholdBytes
		if due && !up.Status {
			t.Fatalf("second %d: full in %.0f s (warn_time_to_full 1m) but DiskFillingUp false: %s", i, *fig.PredictedFullSeconds, up.Message)
		}
		if !due && up.Status && !raised {
			t.Fatalf("second %d: DiskFillingUp raised early: %s", i, up.Message)
		}
		raised = raised || up.Status
	}
	if !raised {
		t.Fatal("DiskFillingUp never raised while a 5 MiB/s writer filled the disk")
	}
}

// TestOwnReclaimDoesNotResetGrowth: sandboxd's reclaim frees 30 MiB every 10 s while a
// writer writes 5 MiB/s; its frees are announced (OwnFree), so the growth still reads the
// writer's rate, not 0 and not the net of both. The same frees made by a user lower the
// growth honestly (the net of writer and user).
func TestOwnReclaimDoesNotResetGrowth(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprintf("own=%v", own), func(t *testing.T) {
			dir, clk, w := netWatcher(t, 1<<30)
			const rate = 5 << 20
			var cache []string
			for i := 0; i < 12; i++ {
				p := filepath.Join(dir, fmt.Sprintf("cache%d", i))
				if err := testenv.Fill(p, 30<<20); err != nil {
					t.Fatal(err)
				}
				cache = append(cache, p)
			}
			sample(t, w)
			for i := 0; i < 110; i++ {
				if err := testenv.Fill(filepath.Join(dir, fmt.Sprint(i)), rate); err != nil {
					t.Fatal(err)
				}
				if i%10 == 9 {
					if err := os.Remove(cache[0]); err != nil {
						t.Fatal(err)
					}
					cache = cache[1:]
					if own && i%20 == 9 {
						w.OwnFree(dir, 30<<20) // announced before the next sample
					}
				}
				clk.Add(time.Second)
				fig := sample(t, w)
				if own && i%20 == 19 {
					w.OwnFree(dir, 30<<20) // announced after a sample saw the free
				}
				if i < 65 {
					continue
				}
				g := fig.GrowthBytesPerSecond
				if own && math.Abs(g-rate) > 0.3*rate {
					t.Fatalf("second %d: growth %s/s while sandboxd reclaims under a 5 MiB/s writer", i, api.FormatSize(uint64(g)))
				}
				// The user's frees make the net 2 MiB/s, read through a sawtooth of 30 MiB:
				// the growth window reads 2 MiB/s, the fast one (16 s, the prediction's when
				// its trend is significant) the net of its own span, 1.25 to 3.1 MiB/s;
				// never the writer's 5 MiB/s (issue 24).
				if !own && (g <= 0 || g > 0.65*rate) {
					t.Fatalf("second %d: growth %s/s, want the net of the writer and the user's frees (about 2 MiB/s)", i, api.FormatSize(uint64(g)))
				}
			}
		})
	}
}
