package pressure

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

// TestReconfigureInPlace: a reload keeps a filesystem's samples and growth; a raised
// threshold turns DiskPressure true at the next sample although the levels did not move
// (the sample's shortcut for unchanged levels must not hide it); a removed filesystem
// takes its conditions with it; an unchanged config reports no change.
func TestReconfigureInPlace(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	other := testenv.Tmpfs(t, 8<<20, 0)
	clk := newFakeClock()
	fs := FSConfig{Path: dir, ReclaimBelow: units.Threshold{Amount: 4 << 20}}
	opts := Options{Filesystems: []FSConfig{fs, {Path: other}}, TransitionPeriod: time.Minute, LeadTime: time.Second, Now: clk.Now}
	w := New(opts)
	for i := 0; i < 8; i++ { // a steady writer for longer than two levels of the window (30 s each)
		if err := testenv.Fill(filepath.Join(dir, "f"+string(rune('a'+i))), 2<<20); err != nil {
			t.Fatal(err)
		}
		clk.Add(10 * time.Second)
		sample(t, w)
	}
	before := w.Snapshot()[0]
	if before.GrowthBytesPerSecond <= 0 || cond(t, w, api.CondDiskPressure, dir).Status {
		t.Fatalf("setup: growth %.0f, DiskPressure %v", before.GrowthBytesPerSecond, cond(t, w, api.CondDiskPressure, dir).Status)
	}
	if w.Reconfigure(opts) {
		t.Error("the same options reported as a change")
	}

	fs.ReclaimBelow = units.Threshold{Amount: 60 << 20} // above what is free now
	if !w.Reconfigure(Options{Filesystems: []FSConfig{fs}, TransitionPeriod: time.Minute, LeadTime: time.Second}) {
		t.Fatal("a raised threshold reported as no change")
	}
	kept := w.Snapshot()
	if len(kept) != 1 || kept[0].SampledAt != before.SampledAt || kept[0].GrowthBytesPerSecond != before.GrowthBytesPerSecond {
		t.Fatalf("reconfigure lost the sample: before %+v, after %+v", before, kept)
	}
	for _, c := range w.Conditions() {
		if c.Subject == other {
			t.Errorf("condition of the removed filesystem %s kept: %+v", other, c)
		}
	}
	clk.Add(10 * time.Second)
	after := sample(t, w)
	if after.AvailBytes != before.AvailBytes {
		t.Logf("levels moved (%d -> %d); the check still applies", before.AvailBytes, after.AvailBytes)
	}
	if c := cond(t, w, api.CondDiskPressure, dir); !c.Status {
		t.Errorf("DiskPressure false at %s free after reclaim_below rose to 60 MiB: %+v", api.FormatSize(after.AvailBytes), c)
	}
	if after.GrowthBytesPerSecond <= 0 {
		t.Error("growth history lost across the reconfigure")
	}
}
