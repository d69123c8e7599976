package pressure

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

// fillingWatcher watches a 128 MiB tmpfs sampled every 10 s: reclaim below 8 MiB, lead
// time 1m (so 200 KiB/s of writes makes the adaptive threshold 12 MiB), warn when full
// within an hour. The fast window is 160 s (16 samples), the growth window 4m.
func fillingWatcher(t *testing.T) (string, *fakeClock, *Watcher) {
	dir := testenv.Tmpfs(t, 128<<20, 0)
	clk := newFakeClock()
	w := New(Options{
		Filesystems: []FSConfig{{
			Path:           dir,
			ReclaimBelow:   units.Threshold{Amount: 8 << 20},
			WarnTimeToFull: time.Hour,
		}},
		SampleInterval:   10 * time.Second,
		TransitionPeriod: time.Minute,
		LeadTime:         time.Minute,
		GrowthWindow:     4 * time.Minute,
		Now:              clk.Now,
	})
	return dir, clk, w
}

// A steady fill of 2 MiB per 10 s sample: a prediction within max(10 s, 20 samples) of
// the start, DiskFillingUp as soon as it is under warn_time_to_full (there is no static
// gate any more: issue 24), the adaptive threshold only once the growth window holds
// the trend.
func TestDiskFillingUpUnderSteadyFill(t *testing.T) {
	dir, clk, w := fillingWatcher(t)
	sample(t, w)
	var fig api.Filesystem
	raised := -1
	for i := 0; i < 45; i++ {
		if err := testenv.Fill(filepath.Join(dir, fmt.Sprint(i)), 2<<20); err != nil {
			t.Fatal(err)
		}
		clk.Add(10 * time.Second)
		fig = sample(t, w)
		up := cond(t, w, api.CondDiskFillingUp, dir)
		if fig.PredictedFullSeconds == nil {
			if i >= 20 {
				t.Fatalf("step %d: no prediction 20 samples into a steady fill (growth %v)", i, fig.GrowthBytesPerSecond)
			}
			if up.Status {
				t.Fatalf("step %d: DiskFillingUp without a prediction: %s", i, up.Message)
			}
			continue
		}
		if want := float64(2<<20) / 10; math.Abs(fig.GrowthBytesPerSecond-want) > want*0.05 {
			t.Fatalf("step %d: growth %v B/s, want about %v", i, fig.GrowthBytesPerSecond, want)
		}
		if want := float64(fig.AvailBytes) / fig.GrowthBytesPerSecond; math.Abs(*fig.PredictedFullSeconds-want) > 1 {
			t.Fatalf("predicted %v s, want %v", *fig.PredictedFullSeconds, want)
		}
		if fig.GrowthWindow.D() <= 0 {
			t.Fatalf("step %d: a prediction with no growth_window", i)
		}
		// One duration style (issue 14 item 6): the message renders the prediction as
		// `sandboxd status` does ("full in 5h48m"), with no "about" and no "1h0m0s".
		if want := "full in " + api.FormatSeconds(*fig.PredictedFullSeconds); !strings.Contains(up.Message, want) ||
			strings.Contains(up.Message, "about") || strings.Contains(up.Message, "h0m") || strings.Contains(up.Message, "m0s") {
			t.Fatalf("step %d: DiskFillingUp message %q, want %q in the one duration style", i, up.Message, want)
		}
		if !up.Status {
			t.Fatalf("step %d: full in %.0f s, under warn_time_to_full 1h, but DiskFillingUp false: %s", i, *fig.PredictedFullSeconds, up.Message)
		}
		if raised < 0 {
			raised = i
			t.Logf("raised at step %d: %s", i, up.Message)
		}
		if fig.ReclaimThresholdBytes > 8<<20 {
			break
		}
	}
	if fig.ReclaimThresholdBytes <= 8<<20 || !strings.HasPrefix(fig.ReclaimThresholdWhy, "growth") {
		t.Errorf("adaptive threshold %d (%q), want above the configured 8 MiB once the growth window holds the fill", fig.ReclaimThresholdBytes, fig.ReclaimThresholdWhy)
	}

	// sandboxd's reclaim frees space in jumps (announced as its own) while writes go on:
	// the prediction stays.
	for i := 100; i < 112; i++ {
		if err := testenv.Fill(filepath.Join(dir, fmt.Sprint(i)), 2<<20); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			os.Remove(filepath.Join(dir, fmt.Sprint(i-1)))
			os.Remove(filepath.Join(dir, fmt.Sprint(i-2)))
			w.OwnFree(dir, 4<<20)
		}
		clk.Add(10 * time.Second)
		fig = sample(t, w)
		if fig.PredictedFullSeconds == nil || fig.GrowthBytesPerSecond <= 0 {
			t.Fatalf("a freed jump reset the prediction: %+v", fig)
		}
		if !cond(t, w, api.CondDiskFillingUp, dir).Status {
			t.Fatalf("DiskFillingUp cleared while writes go on (%s free)", api.FormatSize(fig.AvailBytes))
		}
	}

	// Writes stop: the rate drops to 0, the prediction goes, the condition clears after
	// the transition period.
	for i := 0; i < 20; i++ {
		clk.Add(10 * time.Second)
		fig = sample(t, w)
		if fig.PredictedFullSeconds == nil && !cond(t, w, api.CondDiskFillingUp, dir).Status {
			break
		}
	}
	if fig.PredictedFullSeconds != nil || fig.GrowthBytesPerSecond != 0 {
		t.Fatalf("writes stopped but growth %v, prediction %v", fig.GrowthBytesPerSecond, *fig.PredictedFullSeconds)
	}
	if cond(t, w, api.CondDiskFillingUp, dir).Status {
		t.Fatal("DiskFillingUp did not clear after writes stopped")
	}
}

func TestNotFillingOnFlatOrFallingLine(t *testing.T) {
	dir, clk, w := fillingWatcher(t)
	for i := 0; i < 28; i++ { // 112 MiB of 128 used before the watch starts
		if err := testenv.Fill(filepath.Join(dir, fmt.Sprint(i)), 4<<20); err != nil {
			t.Fatal(err)
		}
	}
	check := func(phase string) {
		t.Helper()
		fig := sample(t, w)
		if fig.GrowthBytesPerSecond != 0 || fig.PredictedFullSeconds != nil {
			t.Fatalf("%s: growth %v prediction %v", phase, fig.GrowthBytesPerSecond, fig.PredictedFullSeconds)
		}
		if c := cond(t, w, api.CondDiskFillingUp, dir); c.Status {
			t.Fatalf("%s: DiskFillingUp %s", phase, c.Message)
		}
	}
	for i := 0; i < 10; i++ {
		clk.Add(10 * time.Second)
		check("flat")
	}
	for i := 0; i < 10; i++ {
		os.Remove(filepath.Join(dir, fmt.Sprint(i)))
		clk.Add(10 * time.Second)
		check("falling")
	}
}
