package reclaim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// benchDirs × benchFilesPerDir is the cache the deletion benchmarks build (200,000 files
// in 20,000 dirs by default; SANDBOXD_BENCH_DIRS scales it down for a quick run).
func benchDirs() int {
	if n, err := strconv.Atoi(os.Getenv("SANDBOXD_BENCH_DIRS")); err == nil && n > 0 {
		return n
	}
	return 20_000
}

const benchFilesPerDir = 10

func buildBenchCache(b *testing.B, dir string) {
	b.Helper()
	old := time.Now().Add(-time.Hour)
	for d := 0; d < benchDirs(); d++ {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%05d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < benchFilesPerDir; f++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", f)), []byte("cache entry"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		os.Chtimes(sub, old, old)
	}
}

// BenchmarkDelete compares the ladder deleting a whole declared cache (list, rename each
// entry into the trash, delete it through safefs) with rm -rf of an identical copy, on
// tmpfs and on the ext4 of t.TempDir(), side by side: each iteration builds both copies
// (timer stopped, then sync) and times the two in alternating order. ns/op is the
// reclaim's; the medians, their ratio and the CPU-time ratio (steadier on a loaded
// machine) are extra metrics. Run with -benchtime=5x for medians of 5 interleaved runs.
func BenchmarkDelete(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.RequireCommand(b, "rm")
	for _, where := range []string{"tmpfs", "tempdir"} {
		b.Run(where, func(b *testing.B) {
			root := b.TempDir()
			if where == "tmpfs" {
				root = testenv.Tmpfs(b, 2<<30, 0)
			}
			var took, cpu [2][]time.Duration // reclaim, rm
			b.StopTimer()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cache, twin := filepath.Join(root, "cache"), filepath.Join(root, "copy")
				buildBenchCache(b, cache)
				buildBenchCache(b, twin)
				testenv.SyncFS()
				e := &env{t: nil, root: root, home: filepath.Join(root, "home", "u")}
				o := e.options()
				o.AutoCaches, o.MinAge = nil, 0
				o.HomeRoots = []string{}
				o.Caches = []CacheConfig{{Name: "bench", Path: cache}}
				r, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				for k := range 2 {
					tool := (i + k) % 2
					start, cpu0 := time.Now(), testenv.SelfCPU()
					if tool == 0 {
						b.StartTimer()
						r.Reclaim(context.Background(), Request{Trigger: TriggerManual, TargetFree: 1 << 60})
						b.StopTimer()
						cpu[0] = append(cpu[0], testenv.SelfCPU()-cpu0)
						if n := countFiles(cache); n != 0 {
							b.Fatalf("%d files left", n)
						}
					} else {
						cmd := exec.Command("rm", "-rf", twin)
						if out, err := cmd.CombinedOutput(); err != nil {
							b.Fatalf("rm -rf: %v %s", err, out)
						}
						cpu[1] = append(cpu[1], cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
					}
					took[tool] = append(took[tool], time.Since(start))
				}
				os.RemoveAll(cache)
				testenv.SyncFS()
			}
			rec, rm := testenv.Median(took[0]), testenv.Median(took[1])
			b.ReportMetric(rec.Seconds()*1e3, "reclaim-ms")
			b.ReportMetric(rm.Seconds()*1e3, "rm-ms")
			b.ReportMetric(float64(rec)/float64(rm), "x-rm")
			b.ReportMetric(float64(testenv.Median(cpu[0]))/float64(testenv.Median(cpu[1])), "cpu-x-rm")
		})
	}
}

// BenchmarkDryRunPlan is the plan of a dry run over the same cache (a budgeted
// estimate: each entry is sized with safefs.Size under SizeBudget).
func BenchmarkDryRunPlan(b *testing.B) {
	testenv.RequireRoot(b)
	root := testenv.Tmpfs(b, 2<<30, 0)
	cache := filepath.Join(root, "cache")
	buildBenchCache(b, cache)
	e := &env{root: root, home: filepath.Join(root, "home", "u")}
	o := e.options()
	o.AutoCaches, o.MinAge, o.HomeRoots = nil, 0, []string{}
	o.Caches = []CacheConfig{{Name: "bench", Path: cache}}
	r, _ := New(o)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Reclaim(context.Background(), Request{Trigger: TriggerManual, DryRun: true, TargetFree: 1 << 60})
	}
}

// BenchmarkHealthyResume compares a healthy resume (cache of the 10 s result defeated)
// with the bare Measure it is built on.
func BenchmarkHealthyResume(b *testing.B) {
	testenv.RequireRoot(b)
	root := testenv.Tmpfs(b, 64<<20, 0)
	e := &env{root: root, home: filepath.Join(root, "home", "u")}
	o := e.options()
	o.AutoCaches = nil
	r, _ := New(o)
	ctx := context.Background()
	b.Run("resume", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.Reclaim(ctx, Request{Trigger: TriggerResume})
		}
	})
	b.Run("measure", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e.measure(ctx, root)
		}
	})
}
