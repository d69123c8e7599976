package safefs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// benchTree makes dirs directories (in groups of 40 under top-level ones) holding files
// small files in all: the shape of a launcher's temp dir or a package cache.
func benchTree(b *testing.B, base string, dirs, files int) {
	b.Helper()
	content := []byte("some small output of a job, a few hundred bytes at most\n")
	perDir := files / dirs
	for d := 0; d < dirs; d++ {
		dir := filepath.Join(base, fmt.Sprintf("g%03d", d/40), fmt.Sprintf("d%04d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < perDir; f++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("job-%d.out", f)), content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRemoveTree compares Remove with `rm -rf` and `find -delete` on identical
// copies of a 20,000-file, 2,000-directory tree, on tmpfs and on the ext4 root's temp
// dir. Each iteration builds three copies (timer stopped, then sync) and times the three
// tools in rotating order; ns/op is Remove's, the others and the ratios are extra
// metrics (medians over iterations). Run with e.g. -benchtime=5x.
func BenchmarkRemoveTree(b *testing.B) {
	testenv.RequireCommand(b, "rm")
	testenv.RequireCommand(b, "find")
	const dirs, files = 2000, 20000
	for _, fs := range []string{"tmpfs", "ext4"} {
		b.Run(fs, func(b *testing.B) {
			var base string
			if fs == "tmpfs" {
				base = testenv.Tmpfs(b, 1<<30, 0)
			} else {
				base = b.TempDir()
			}
			r, err := OpenRoot(base)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			tools := []string{"safefs", "rm", "find"}
			took := map[string][]time.Duration{}
			b.StopTimer()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, tool := range tools {
					benchTree(b, filepath.Join(base, tool), dirs, files)
				}
				unix.Sync()
				for k := range tools {
					tool := tools[(i+k)%len(tools)]
					path := filepath.Join(base, tool)
					start := time.Now()
					switch tool {
					case "safefs":
						b.StartTimer()
						st, err := r.Remove(context.Background(), tool, RemoveOptions{})
						b.StopTimer()
						if err != nil || st.Files != files {
							b.Fatalf("Remove = %+v, %v", st, err)
						}
					case "rm":
						if out, err := exec.Command("rm", "-rf", path).CombinedOutput(); err != nil {
							b.Fatalf("rm: %v: %s", err, out)
						}
					case "find":
						if out, err := exec.Command("find", path, "-delete").CombinedOutput(); err != nil {
							b.Fatalf("find: %v: %s", err, out)
						}
					}
					took[tool] = append(took[tool], time.Since(start))
				}
				unix.Sync()
			}
			med := func(tool string) float64 {
				d := slices.Clone(took[tool])
				slices.Sort(d)
				return float64(d[len(d)/2])
			}
			b.ReportMetric(med("safefs")/1e6, "safefs-ms")
			b.ReportMetric(med("rm")/1e6, "rm-ms")
			b.ReportMetric(med("find")/1e6, "find-ms")
			b.ReportMetric(med("safefs")/med("rm"), "x-rm")
			b.ReportMetric(med("safefs")/med("find"), "x-find")
		})
	}
}
