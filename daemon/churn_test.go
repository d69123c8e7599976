package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestChurnDeletesNoCache is QA's report (issue 10, item 2): on an idle tmpfs with
// 484 MiB free and reclaim_below 100 MiB, a loop writing and deleting a 50 MiB file every
// second read as growth, the adaptive threshold rose, DiskPressure was raised and a whole
// 100 MiB cache was deleted. Net-zero churn is no growth: no DiskFillingUp or
// DiskPressure, the threshold stays 100 MiB, and every cache file hashes the same after.
// The growth window is 10 s here (not 10m), so the rate is live within the test.
func TestChurnDeletesNoCache(t *testing.T) {
	t.Parallel() // long, and mostly waiting: see "Parallel tests" in harness_test.go
	mnt := testenv.Tmpfs(t, 768<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	old := time.Now().Add(-2 * time.Hour)
	for i := 0; i < 20; i++ {
		p := filepath.Join(cache, fmt.Sprintf("pkg%d.tgz", i))
		if err := testenv.Fill(p, 5<<20); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	if err := testenv.Fill(filepath.Join(mnt, "userdata"), 180<<20); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "100MiB"
replace_below = "8MiB"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, mnt, cache)
	td := startDaemon(t, body, func(o *Options) { o.growthWindow = 10 * time.Second })
	before := treeHashes(t, cache)
	ctx := context.Background()

	churn := filepath.Join(mnt, "churn")
	check := func(i int) {
		t.Helper()
		st, err := td.client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs := st.Filesystems[0]
		if fs.GrowthBytesPerSecond > 64<<10 || fs.PredictedFullSeconds != nil || fs.ReclaimThresholdBytes != 100<<20 {
			t.Fatalf("second %d: churn read as growth %s/s, prediction %v, threshold %s (%s)", i,
				api.FormatSize(uint64(fs.GrowthBytesPerSecond)), fs.PredictedFullSeconds,
				api.FormatSize(fs.ReclaimThresholdBytes), fs.ReclaimThresholdWhy)
		}
		for _, typ := range []string{api.CondDiskFillingUp, api.CondDiskPressure} {
			if c := condition(st, typ, mnt); c.Status {
				t.Fatalf("second %d: %s raised by net-zero churn: %s", i, typ, c.Message)
			}
		}
	}
	for i := 0; i < 25; i++ { // 2.5 windows
		if err := testenv.Fill(churn, 50<<20); err != nil {
			t.Fatal(err)
		}
		check(i)
		if err := os.Remove(churn); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 4; j++ {
			time.Sleep(250 * time.Millisecond)
			check(i)
		}
	}
	run, err := td.client.Resume(ctx, api.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Verdict != api.VerdictHealthy || run.FreedBytes != 0 {
		t.Errorf("resume after churn: %s, freed %d: %s", run.Verdict, run.FreedBytes, run.Detail)
	}
	if after := treeHashes(t, cache); !sameHashes(before, after) {
		t.Fatalf("cache files changed under net-zero churn: %d files before, %d after", len(before), len(after))
	}
}
