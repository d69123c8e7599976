package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// drainingSite is a daemon whose site on a 16 MiB tmpfs holds 100 expired jobs (700
// files) and drains them at 20 files/s, so the drain is at work for half a minute; it
// returns once the drain has deleted its first files. Pressure conditions are sampled
// once an hour, so a filesystem filled after start-up is below its thresholds for the
// launch call's own measurement before the drain would see pressure and go full speed.
func drainingSite(t *testing.T, inodes int) (td *testDaemon, mnt, site string) {
	mnt = testenv.Tmpfs(t, 16<<20, inodes)
	site = filepath.Join(mnt, "aura-bg")
	if err := os.Mkdir(site, 0o755); err != nil {
		t.Fatal(err)
	}
	staleJobs(t, site, 100, 1)
	body := fmt.Sprintf(`
[[site]]
name = "aura-bg"
path = %q
max_age = "12h"
min_age = "15m"
drain_rate = 20
[[filesystem]]
path = %q
reclaim_below = "2MiB"
replace_below = "512KiB"
reclaim_below_inodes = 100
replace_below_inodes = 5
reserve = "0"
`, site, mnt)
	td = startDaemon(t, body, func(o *Options) { o.Config.Health.SampleInterval = time.Hour })
	poll(t, time.Minute, "the drain to delete its first files", func() bool { return countDir(t, site) < 700 })
	return td, mnt, site
}

func countDir(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestLaunchLeavesTheBacklogToAThrottledDrain: while the drain works on a backlog at its
// drain_rate and the filesystem has room, launch calls answer ok, prune nothing
// themselves, report the backlog as pending_prune, and make no prune event of their own;
// the files are still there (three calls pruning 256 each would have left none).
func TestLaunchLeavesTheBacklogToAThrottledDrain(t *testing.T) {
	td, _, site := drainingSite(t, 0)
	for i := 0; i < 3; i++ {
		status, r, p := launch(t, td, `{}`)
		if status != 200 {
			t.Fatalf("launch %d: %d %s: %s", i, status, p.Code, p.Detail)
		}
		if r.Pruned != 0 || len(r.PrunedJobs) != 0 {
			t.Fatalf("launch %d pruned %d files (%v) while the drain was at work and the filesystem had room", i, r.Pruned, r.PrunedJobs)
		}
		if r.Site == nil || r.Site.PendingPrune <= 0 {
			t.Fatalf("launch %d: site %+v, want pending_prune > 0", i, r.Site)
		}
		if !strings.Contains(r.Detail, "left to the background drain") {
			t.Errorf("launch %d: detail %q does not say the backlog is left to the drain", i, r.Detail)
		}
	}
	if n := countDir(t, site); n < 300 {
		t.Fatalf("%d of 700 files left after 3 launches: more than the drain's 20 files/s deleted", n)
	}
	_, _, raw := td.do(t, "GET", "/v1/events", "")
	var page api.EventsPage
	if err := json.Unmarshal([]byte(raw), &page); err != nil {
		t.Fatalf("events: %v: %s", err, raw)
	}
	for _, e := range page.Events {
		if e.Kind == api.EventPrune && e.Fields["trigger"] == "launch" {
			t.Errorf("a launch made its own prune event while the drain was at work: %s", e.Message)
		}
	}
}

// TestLaunchPrunesItselfWhenItHasNoRoom: the same throttled drain at work, but the call
// finds the filesystem below a reclaim threshold (bytes filled, or inodes used up), or
// asks for more than is free: it prunes in the call, as it always did.
func TestLaunchPrunesItselfWhenItHasNoRoom(t *testing.T) {
	cases := []struct {
		name   string
		inodes int
		setup  func(t *testing.T, mnt string)
		body   string
	}{
		{"disk-full", 0, fillToFull, `{"need_bytes":"64KiB"}`},
		{"inodes-below-reclaim", 1000, func(t *testing.T, mnt string) {
			for i := 0; ; i++ {
				var sf unix.Statfs_t
				if err := unix.Statfs(mnt, &sf); err != nil {
					t.Fatal(err)
				}
				if sf.Ffree <= 50 { // below reclaim_below_inodes (100), above the call's need
					return
				}
				if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("u%d", i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, `{"need_inodes":4}`},
		{"need-does-not-fit", 0, func(*testing.T, string) {}, `{"need_bytes":"15MiB"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			td, mnt, site := drainingSite(t, tc.inodes)
			before := countDir(t, site)
			tc.setup(t, mnt)
			_, r, p := launch(t, td, tc.body)
			pruned := r.Pruned
			detail := r.Detail + p.Detail
			if pruned == 0 && !strings.Contains(detail, "pruned 0 files") {
				// A refusal (a need that cannot fit) still says what the call pruned.
				fmt.Sscanf(detail[strings.Index(detail, "; pruned ")+len("; pruned "):], "%d", &pruned)
			}
			if pruned <= 0 {
				t.Fatalf("the call pruned nothing itself without room: %s", detail)
			}
			if n := countDir(t, site); n >= before {
				t.Fatalf("%d files before, %d after: nothing deleted", before, n)
			}
		})
	}
}
