package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// zeroKeys sets the durations whose "0s" has a documented meaning of its own.
func zeroKeys(o *Options) {
	o.Config.Health.TransitionPeriod = 0
	o.Config.Reclaim.LeadTime = 0
	o.Config.Reclaim.Cooldown = 0
}

func condition(st *api.Status, typ, subject string) api.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ && c.Subject == subject {
			return c
		}
	}
	return api.Condition{}
}

// TestZeroDurationsMeanWhatTheDocsSay: transition_period "0s" clears at once, lead_time
// "0s" keeps the static threshold under a fast fill, cooldown "0s" lets a second launch
// reclaim, and /v1/config shows "0s" for each as in force (issue 10, item 5).
func TestZeroDurationsMeanWhatTheDocsSay(t *testing.T) {
	t.Parallel() // long, and mostly waiting: see "Parallel tests" in harness_test.go
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "512KiB"
reserve = "0"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, mnt, cache)
	// A 10 s growth window: the 10m default has no rate before a minute of samples.
	td := startDaemon(t, body, zeroKeys, func(o *Options) { o.growthWindow = 10 * time.Second })
	ctx := context.Background()

	_, _, raw := td.do(t, "GET", "/v1/config", "")
	var view api.ConfigView
	if err := json.Unmarshal([]byte(raw), &view); err != nil {
		t.Fatalf("/v1/config: %v: %s", err, raw)
	}
	for _, k := range []string{"health.transition_period", "reclaim.lead_time", "reclaim.cooldown"} {
		if view.InForce[k] != "0s" {
			t.Errorf("/v1/config in_force %s = %v, want 0s", k, view.InForce[k])
		}
	}

	// lead_time "0s": a fast fill is seen as growth, yet the threshold stays the static one
	// (with lead_time = 10m it jumps to the 16 MiB cap of a 64 MiB disk). The fill is a
	// trend, 1 MiB every 300 ms for up to 12 s: the growth estimator reads one quick write
	// followed by quiet as no growth at all (issue 24).
	var fs api.Filesystem
	var grow []string
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("a 3 MiB/s fill was never seen as growth (40 MiB written)")
		}
		p := filepath.Join(mnt, fmt.Sprintf("grow%d", i))
		grow = append(grow, p)
		testenv.Fill(p, 1<<20)
		time.Sleep(300 * time.Millisecond)
		st, err := td.client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fs = st.Filesystems[0]; fs.ReclaimThresholdBytes != 2<<20 {
			t.Fatalf("lead_time 0s: reclaim threshold %d (%s) under a fill, want the static 2 MiB", fs.ReclaimThresholdBytes, fs.ReclaimThresholdWhy)
		}
		if fs.GrowthBytesPerSecond > 0 {
			break
		}
	}
	for _, p := range grow {
		os.Remove(p)
	}

	// transition_period "0s": DiskPressure raised at 0 B free clears at the first sample
	// with room again (with the 1m default it holds for a minute).
	fillToFull(t, mnt)
	poll(t, time.Minute, "DiskPressure at 0 B free", func() bool {
		st, _ := td.client.Status(ctx)
		return condition(st, api.CondDiskPressure, mnt).Status
	})
	os.Remove(filepath.Join(mnt, "userdata"))
	poll(t, time.Minute, "DiskPressure to clear at once", func() bool {
		st, _ := td.client.Status(ctx)
		return !condition(st, api.CondDiskPressure, mnt).Status
	})

	// cooldown "0s": two launches at 0 B free a moment apart both reclaim hour-old cache
	// entries; with the 10m default the second answered replace_sandbox "reclaim freed 0 B".
	old := time.Now().Add(-time.Hour)
	for round := 0; round < 2; round++ {
		for i := 0; i < 4; i++ {
			p := filepath.Join(cache, fmt.Sprintf("r%d-pkg%d.tgz", round, i))
			testenv.Fill(p, 1<<20)
			os.Chtimes(p, old, old)
		}
		fillToFull(t, mnt)
		status, r, p := launch(t, td, `{"need_bytes":"1MiB"}`)
		if status != 200 {
			t.Fatalf("launch %d at 0 B free with cooldown 0s: %d %s: %s", round+1, status, p.Code, p.Detail)
		}
		if strings.Contains(r.Detail, "cooldown") || r.Filesystem.AvailBytes < 1<<20 {
			t.Fatalf("launch %d: %s", round+1, r.Detail)
		}
		os.Remove(filepath.Join(mnt, "userdata"))
	}
	if left, _ := os.ReadDir(cache); len(left) > 4 {
		t.Errorf("%d cache entries left after two reclaims", len(left))
	}
}

// TestMoreZerosMeanWhatTheDocsSay: warn_time_to_full "0s" never predicts, a site's
// max_age "0s" prunes nothing by age, reclaim min_age "0s" lets fresh cache entries go.
func TestMoreZerosMeanWhatTheDocsSay(t *testing.T) {
	mnt, site, body := siteOnTmpfs(t, 32<<20, 0, "warn_time_to_full = \"0s\"\n")
	body = strings.Replace(body, `max_age = "12h"`, `max_age = "0s"`, 1)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	body += fmt.Sprintf("[[reclaim.cache]]\nname = \"pkgs\"\npath = %q\nladder = \"entries\"\n", cache) // rung 3 only: the one min_age guards
	staleJobs(t, site, 3, 1024)                                                                         // 13 h old
	td := startDaemon(t, body, func(o *Options) { o.Config.Reclaim.MinAge = 0 })
	ctx := context.Background()

	for i := 1; i <= 6; i++ { // a fast fill
		testenv.Fill(filepath.Join(mnt, "userdata"), int64(i)<<21)
		time.Sleep(120 * time.Millisecond)
	}
	st, _ := td.client.Status(ctx)
	if c := condition(st, api.CondDiskFillingUp, mnt); c.Status || c.Reason != "PredictionDisabled" {
		t.Errorf("warn_time_to_full 0s: DiskFillingUp %v (%s): %s", c.Status, c.Reason, c.Message)
	}
	os.Remove(filepath.Join(mnt, "userdata"))

	status, r, p := launch(t, td, `{}`)
	if status != 200 || r.Pruned != 0 {
		t.Fatalf("max_age 0s: launch %d pruned %d: %s%s", status, r.Pruned, r.Detail, p.Detail)
	}
	if left, _ := os.ReadDir(site); len(left) != 21 {
		t.Errorf("max_age 0s: %d of 21 entries left", len(left))
	}

	for i := 0; i < 4; i++ { // fresh entries: kept by the 2m default, fair game at "0s"
		testenv.Fill(filepath.Join(cache, fmt.Sprintf("fresh%d", i)), 1<<20)
	}
	fillToFull(t, mnt)
	status, r, p = launch(t, td, `{"need_bytes":"2MiB"}`)
	if status != 200 {
		t.Fatalf("min_age 0s: launch at 0 B free with 4 MiB of fresh cache: %d %s: %s", status, p.Code, p.Detail)
	}
	if _, err := os.Stat(filepath.Join(mnt, "userdata")); err != nil {
		t.Error("user data was deleted")
	}
}
