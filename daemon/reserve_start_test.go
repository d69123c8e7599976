package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestReserveArmedAtStartIsNotGrowth starts sandboxd on a 3 GiB tmpfs with room for its
// 256 MiB reserve, so the file is written while the first samples are taken (as on every
// fresh install): the daemon's own write must not read as growth, raise DiskFillingUp or
// move the threshold (issue 10, item 2: "start, wait, no DiskFillingUp, threshold static").
func TestReserveArmedAtStartIsNotGrowth(t *testing.T) {
	mnt := testenv.Tmpfs(t, 3<<30, 0)
	// The state dir on the filesystem, as with make run on / : the reserve is
	// <state_dir>/reserve and the state documents are written beside it.
	text := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "1GiB"
replace_below = "64MiB"
reserve = "256MiB"
[server]
socket = %q
socket_mode = "0666"
state_dir = %q
[health]
sample_interval = "1s"
[reclaim]
auto_caches = []
`, mnt, filepath.Join(mnt, "s.sock"), filepath.Join(mnt, "state"))
	td := startDaemonIn(t, mnt, text)
	ctx := context.Background()
	reserve := filepath.Join(mnt, "state", "reserve")
	poll(t, time.Minute, "the reserve to be armed", func() bool { return allocatedBytes(reserve) >= 256<<20 })
	for i := 0; i < 30; i++ { // three seconds of 100 ms samples
		st, err := td.client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs := st.Filesystems[0]
		if fs.GrowthBytesPerSecond != 0 || fs.PredictedFullSeconds != nil || fs.ReclaimThresholdBytes != 1<<30 {
			t.Fatalf("the reserve written at start read as growth: %.0f B/s, prediction %v, threshold %d (%s)",
				fs.GrowthBytesPerSecond, fs.PredictedFullSeconds, fs.ReclaimThresholdBytes, fs.ReclaimThresholdWhy)
		}
		if c := condition(st, api.CondDiskFillingUp, mnt); c.Status {
			t.Fatalf("DiskFillingUp raised by sandboxd's own reserve: %s", c.Message)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
