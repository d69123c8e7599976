package daemon

import (
	"context"
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

func allocatedBytes(path string) int64 {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// TestReserveArmsWhenRoomReturnsAndIsNotGrowth starts sandboxd on a 1 GiB tmpfs with too
// little free for its 256 MiB reserve: reserve_bytes says 0 (what is on disk, not the
// configured size). Once room returns the reserve is armed, reserve_bytes is the file's
// allocation, and writing it does not read as growth: no rate, no prediction, no
// DiskFillingUp, the static threshold (issue 10, items 2 and 3). A reload that stops
// watching the filesystem removes the file.
func TestReserveArmsWhenRoomReturnsAndIsNotGrowth(t *testing.T) {
	mnt := testenv.Tmpfs(t, 1<<30, 0)
	filler := filepath.Join(mnt, "filler")
	if err := testenv.Fill(filler, 700<<20); err != nil { // 324 MiB free < 128 MiB + 256 MiB
		t.Fatal(err)
	}
	fsBody := fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "128MiB"
replace_below = "64MiB"
reserve = "256MiB"
`, mnt)
	td := startDaemon(t, fsBody)
	ctx := context.Background()
	reserve := filepath.Join(mnt, ".sandboxd-reserve")
	time.Sleep(500 * time.Millisecond) // a few samples and reclaim polls
	st, err := td.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Filesystems[0].ReserveBytes; got != 0 || allocatedBytes(reserve) != 0 {
		t.Fatalf("started low: reserve_bytes %d, file holds %d; want 0 and no file", got, allocatedBytes(reserve))
	}
	if c := condition(st, api.CondReserveReleased, mnt); c.Reason != "ReserveNotWritten" || !strings.Contains(c.Message, "not written yet") ||
		strings.Contains(c.Message, "holds") || c.Since.IsZero() {
		t.Fatalf("no reserve on disk yet, but ReserveReleased reads %s (since %s): %s", c.Reason, c.Since, c.Message)
	}

	os.Remove(filler)
	poll(t, time.Minute, "the reserve to be armed once room returned", func() bool {
		return allocatedBytes(reserve) >= 256<<20
	})
	var fs api.Filesystem
	for i := 0; i < 20; i++ { // two seconds of 100 ms samples after the reserve was written
		time.Sleep(100 * time.Millisecond)
		st, err = td.client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs = st.Filesystems[0]
		if fs.GrowthBytesPerSecond != 0 || fs.PredictedFullSeconds != nil || fs.ReclaimThresholdBytes != 128<<20 {
			t.Fatalf("the reserve read as growth: %.0f B/s, prediction %v, threshold %d (%s)",
				fs.GrowthBytesPerSecond, fs.PredictedFullSeconds, fs.ReclaimThresholdBytes, fs.ReclaimThresholdWhy)
		}
		if c := condition(st, api.CondDiskFillingUp, mnt); c.Status {
			t.Fatalf("DiskFillingUp raised by sandboxd's own reserve: %s", c.Message)
		}
	}
	if fs.ReserveBytes != uint64(allocatedBytes(reserve)) {
		t.Errorf("reserve_bytes %d, the file holds %d", fs.ReserveBytes, allocatedBytes(reserve))
	}
	page, err := td.client.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if strings.Contains(ev.Message, "DiskFillingUp raised") {
			t.Errorf("event: %s", ev.Message)
		}
	}

	// A reload that stops watching the filesystem removes its reserve file.
	other := t.TempDir()
	text := baseConfig(td.dir, fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreserve = \"0\"\n", other))
	if err := os.WriteFile(td.d.opts.ConfigPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the reserve of the unwatched filesystem to be removed", func() bool {
		_, err := os.Lstat(reserve)
		return os.IsNotExist(err)
	})
}
