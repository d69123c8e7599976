package pressure

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

func TestDiskPressureThenReplaceAndClearAfterTransition(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 2000)
	clk := newFakeClock()
	var log eventLog
	w := New(Options{
		Filesystems: []FSConfig{{
			Path:         dir,
			ReclaimBelow: units.Threshold{Amount: 16 << 20},
			ReplaceBelow: units.Threshold{Amount: 4 << 20},
		}},
		TransitionPeriod: time.Minute,
		LeadTime:         time.Second, // keep the adaptive part below the configured value
		Now:              clk.Now,
		Events:           log.add,
	})
	step := func(name string, n int64) api.Filesystem {
		t.Helper()
		if name != "" {
			if err := testenv.Fill(filepath.Join(dir, name), n); err != nil {
				t.Fatal(err)
			}
		}
		clk.Add(10 * time.Second)
		return sample(t, w)
	}

	fig := step("a", 40<<20)
	if c := cond(t, w, api.CondDiskPressure, dir); c.Status {
		t.Fatalf("DiskPressure true at %s free: %s", api.FormatSize(fig.AvailBytes), c.Message)
	}
	start := cond(t, w, api.CondDiskPressure, dir).Since

	fig = step("b", 10<<20) // ~14 MiB free
	dp := cond(t, w, api.CondDiskPressure, dir)
	if !dp.Status || dp.Severity != "warning" || dp.Since == start {
		t.Fatalf("DiskPressure at %s free = %+v, want true, warning, new since", api.FormatSize(fig.AvailBytes), dp)
	}
	if !strings.Contains(dp.Message, "below filesystem.reclaim_below 16.0 MiB") || !strings.Contains(dp.Message, "% used") {
		t.Errorf("message lacks the figures: %q", dp.Message)
	}
	if cond(t, w, api.CondReplaceRecommended, dir).Status {
		t.Fatal("ReplaceRecommended already true")
	}
	raisedAt := dp.Since

	step("c", 12<<20) // ~2 MiB free
	rr := cond(t, w, api.CondReplaceRecommended, dir)
	if !rr.Status || rr.Severity != "critical" || rr.Reason != "AvailBelowReplaceThreshold" {
		t.Fatalf("ReplaceRecommended = %+v", rr)
	}
	if got := cond(t, w, api.CondDiskPressure, dir).Since; got != raisedAt {
		t.Errorf("since moved from %v to %v without a flip", raisedAt, got)
	}

	// Space comes back: the conditions hold for the transition period, then clear.
	for _, n := range []string{"b", "c"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	fig = step("", 0)
	if fig.AvailBytes < 20<<20 {
		t.Fatalf("avail %d after deleting", fig.AvailBytes)
	}
	for i := 0; i < 4; i++ { // 10s … 50s after the last true sample
		if !cond(t, w, api.CondDiskPressure, dir).Status || !cond(t, w, api.CondReplaceRecommended, dir).Status {
			t.Fatalf("cleared %d s after space came back, before the transition period", (i+1)*10)
		}
		step("", 0)
	}
	step("", 0) // 60 s
	for _, typ := range []string{api.CondDiskPressure, api.CondReplaceRecommended} {
		c := cond(t, w, typ, dir)
		if c.Status || c.Severity != "" || !c.Since.Equal(clk.Now()) {
			t.Errorf("%s after the transition period = %+v", typ, c)
		}
		if n := log.count(typ); n != 2 {
			t.Errorf("%s: %d events, want 2 (raise, clear)", typ, n)
		}
	}
}

func TestInodePressureAndReplace(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20, 200)
	clk := newFakeClock()
	w := New(Options{
		Filesystems: []FSConfig{{
			Path:               dir,
			ReclaimBelowInodes: units.Threshold{Amount: 50},
			ReplaceBelowInodes: units.Threshold{Pct: 5, Percent: true}, // 10
		}},
		TransitionPeriod: 30 * time.Second,
		Now:              clk.Now,
	})
	touch := func(from, to int) {
		for i := from; i < to; i++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		clk.Add(10 * time.Second)
	}
	fig := sample(t, w)
	if fig.Files != 200 || fig.ReplaceThresholdFiles != 10 {
		t.Fatalf("files %d replace threshold %d", fig.Files, fig.ReplaceThresholdFiles)
	}
	touch(0, 160)
	fig = sample(t, w)
	ip := cond(t, w, api.CondInodePressure, dir)
	if !ip.Status || !strings.Contains(ip.Message, "inodes free of 200") {
		t.Fatalf("InodePressure at %d free = %+v", fig.FilesFree, ip)
	}
	if cond(t, w, api.CondDiskPressure, dir).Status || cond(t, w, api.CondReplaceRecommended, dir).Status {
		t.Fatal("disk or replace condition from inodes alone")
	}
	touch(160, 195)
	fig = sample(t, w)
	if rr := cond(t, w, api.CondReplaceRecommended, dir); !rr.Status || rr.Reason != "InodesBelowReplaceThreshold" {
		t.Fatalf("ReplaceRecommended at %d inodes free = %+v", fig.FilesFree, rr)
	}
	for i := 0; i < 195; i++ {
		os.Remove(filepath.Join(dir, fmt.Sprint(i)))
	}
	clk.Add(20 * time.Second)
	sample(t, w)
	if !cond(t, w, api.CondInodePressure, dir).Status {
		t.Fatal("InodePressure cleared before the transition period")
	}
	clk.Add(10 * time.Second)
	sample(t, w)
	if cond(t, w, api.CondInodePressure, dir).Status || cond(t, w, api.CondReplaceRecommended, dir).Status {
		t.Fatal("inode conditions still true after the transition period")
	}
}

func TestMarkReplaceHoldsThenClears(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20, 200)
	clk := newFakeClock()
	var log eventLog
	w := New(Options{
		// Below the reclaim threshold: a mark holds only while the disk is below one
		// (issue 23: it lapses at once when the disk says otherwise).
		Filesystems:      []FSConfig{{Path: dir, ReplaceBelow: units.Threshold{Amount: 1 << 20}, ReclaimBelow: units.Threshold{Amount: 64 << 20}}},
		TransitionPeriod: time.Minute,
		Now:              clk.Now,
		Events:           log.add,
	})
	sample(t, w)
	w.MarkReplace(filepath.Join(dir, "some", "cache"), "cooldown holds")
	rr := cond(t, w, api.CondReplaceRecommended, dir)
	if !rr.Status || rr.Reason != "MarkedByReclaim" || !strings.Contains(rr.Message, "cooldown holds") {
		t.Fatalf("after MarkReplace: %+v", rr)
	}
	clk.Add(40 * time.Second)
	sample(t, w)
	w.MarkReplace(dir, "ladder not enough") // renewed
	clk.Add(40 * time.Second)
	sample(t, w)
	if !cond(t, w, api.CondReplaceRecommended, dir).Status {
		t.Fatal("cleared 40 s after a renewed mark")
	}
	clk.Add(30 * time.Second)
	sample(t, w)
	if c := cond(t, w, api.CondReplaceRecommended, dir); c.Status {
		t.Fatalf("still true 70 s after the last mark with healthy figures: %+v", c)
	}
	if n := log.count(api.CondReplaceRecommended); n != 2 {
		t.Errorf("%d events, want 2", n)
	}

	// A path on no watched filesystem gets its own condition, cleared by the loop.
	w.MarkReplace("/nowhere/watched", "test")
	if !cond(t, w, api.CondReplaceRecommended, "/nowhere/watched").Status {
		t.Fatal("mark on an unwatched path not shown")
	}
	clk.Add(2 * time.Minute)
	sample(t, w)
	if cond(t, w, api.CondReplaceRecommended, "/nowhere/watched").Status {
		t.Fatal("unwatched mark never cleared")
	}
}
