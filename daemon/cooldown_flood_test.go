package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// 2,000 launches inside a cooldown leave the last cache deletion and the reserve events in
// /v1/events (issue 23 item 2): the cooldown's notices are coalesced like refusals, one
// per filesystem per interval with a count, and the kept ring keeps what changed the disk.
// Before, 1,560 such launches left only their notices, dropped: true.
func TestCooldownFloodKeepsTheTrail(t *testing.T) {
	testenv.RequireRoot(t)
	mnt := testenv.Tmpfs(t, 64<<20, 0)
	cache := filepath.Join(mnt, "cache")
	os.Mkdir(cache, 0o755)
	young := func(prefix string, n int) { // younger than reclaim.min_age: only the whole-cache rung takes them
		for i := 0; i < n; i++ {
			testenv.Fill(filepath.Join(cache, fmt.Sprintf("%s%d.tgz", prefix, i)), 1<<20)
		}
	}
	young("a", 10)
	body := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "16MiB"
replace_below = "1MiB"
reserve = "4MiB"
warn_time_to_full = "0s"
[[reclaim.cache]]
name = "pkgs"
path = %q
`, mnt, cache)
	td := startDaemon(t, body)
	// The start-up reclaim is a writer's kind of run (not held by the cooldown): let it
	// pass on the roomy disk before the disk fills.
	poll(t, time.Minute, "the start-up reclaim", func() bool { return startupRuns(td) > 0 })
	poll(t, time.Minute, "the reserve to be armed", func() bool {
		fs, ok := td.d.current().pressure.Filesystem(mnt)
		return ok && fs.ReserveBytes >= 4<<20
	})
	fillTo := func(name string, free uint64) {
		fs, _ := td.d.current().pressure.Measure(t.Context(), mnt)
		if fs.AvailBytes > free {
			testenv.Fill(filepath.Join(mnt, name), int64(fs.AvailBytes-free))
		}
	}
	// Low: the launch's reclaim deletes the whole cache, and that starts the cooldown.
	fillTo("user1", 8<<20)
	if status, _, p := launch(t, td, `{"need_bytes":"1KiB"}`); status != 200 {
		t.Fatalf("first launch: %d %s", status, p.Detail)
	}
	// The cache refills and the disk is low again: every launch now meets the cooldown.
	young("b", 8)
	fillTo("user2", 3<<20)
	var last api.Problem
	began := time.Now()
	for i := 0; i < 2000; i++ {
		status, ok, p := launch(t, td, `{"need_bytes":"5MiB"}`)
		if status != 507 {
			t.Fatalf("launch %d inside the cooldown: %d %s%s", i, status, p.Detail, ok.Detail)
		}
		last = p
	}
	// Coalesced: at most one notice when a window opens and one when it ends, per
	// refusalInterval the flood lasted (however long a loaded machine took for it).
	maxNotices := max(20, 2*(int(time.Since(began)/refusalInterval)+2))
	if !strings.Contains(last.Detail, "cooldown until ") || !strings.Contains(last.Detail, "reclaimable then") ||
		strings.Contains(last.Detail, "nothing reclaimable was found") {
		t.Errorf("refusal inside the cooldown: %s", last.Detail)
	}
	page, err := td.client.Events(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var deletion, reserve bool
	notices := 0
	for _, ev := range page.Events {
		switch {
		case ev.Kind == api.EventReclaimRun && ev.Fields["changed"] == true && strings.Contains(ev.Message, "pkgs"):
			deletion = true
		case ev.Kind == api.EventReserve:
			reserve = true
		case ev.Kind == api.EventRefusal && ev.Subject == mnt:
			notices++
		}
	}
	if !deletion || !reserve {
		t.Errorf("after 2,000 launches inside the cooldown: cache deletion kept %v, reserve event kept %v (%d events)", deletion, reserve, len(page.Events))
	}
	if notices > maxNotices {
		t.Errorf("%d cooldown notices for one filesystem: not coalesced", notices)
	}
}
