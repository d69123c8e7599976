package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// BenchmarkBootFull is the in-process part of `sandboxd boot` on a full 64 MiB tmpfs with
// an 8 MiB reserve: statfs, the release, the state written after it (issue 22's figure;
// scripts/bench-boot.sh measures the whole command, process start included).
func BenchmarkBootFull(b *testing.B) {
	mnt := testenv.Tmpfs(b, 64<<20, 0)
	dir := b.TempDir()
	cfg := parseConfig(b, fmt.Sprintf(`site = []
[[filesystem]]
path = %q
reclaim_below = "12MiB"
replace_below = "4MiB"
reserve = "8MiB"
[server]
state_dir = %q
`, mnt, filepath.Join(dir, "state")))
	reserve, fill := filepath.Join(mnt, ".sandboxd-reserve"), filepath.Join(mnt, "fill")
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		os.Remove(fill)
		f, err := os.Create(reserve)
		if err != nil {
			b.Fatal(err)
		}
		if err := unix.Fallocate(int(f.Fd()), 0, 0, 8<<20); err != nil {
			b.Fatal(err)
		}
		f.Close()
		testenv.Fill(fill, 64<<20) // to ENOSPC
		b.StartTimer()
		if rep := Boot(cfg, "/proc", time.Now()); rep.Exit != BootExitOnReserve {
			b.Fatalf("boot: %+v", rep)
		}
	}
}
