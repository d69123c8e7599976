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

// BenchmarkDelete compares the ladder deleting a whole declared cache (list, size,
// rename into trash, delete through safefs) with rm -rf of an identical copy, on tmpfs
// and on the ext4 of t.TempDir(), side by side. Run with -benchtime=1x.
func BenchmarkDelete(b *testing.B) {
	testenv.RequireRoot(b)
	for _, where := range []string{"tmpfs", "tempdir"} {
		base := func() string {
			if where == "tmpfs" {
				return testenv.Tmpfs(b, 2<<30, 0)
			}
			return b.TempDir()
		}
		b.Run(where+"/reclaim", func(b *testing.B) {
			root := base()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cache := filepath.Join(root, "cache")
				buildBenchCache(b, cache)
				e := &env{t: nil, root: root, home: filepath.Join(root, "home", "u")}
				o := e.options()
				o.AutoCaches, o.MinAge = nil, 0
				o.HomeRoots = []string{}
				o.Caches = []CacheConfig{{Name: "bench", Path: cache}}
				r, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				r.Reclaim(context.Background(), Request{Trigger: TriggerManual, TargetFree: 1 << 60})
				b.StopTimer()
				if n := countFiles(cache); n != 0 {
					b.Fatalf("%d files left", n)
				}
				os.RemoveAll(cache)
				b.StartTimer()
			}
		})
		b.Run(where+"/rm-rf", func(b *testing.B) {
			root := base()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cache := filepath.Join(root, "cache")
				buildBenchCache(b, cache)
				b.StartTimer()
				if out, err := exec.Command("rm", "-rf", cache).CombinedOutput(); err != nil {
					b.Fatalf("rm -rf: %v %s", err, out)
				}
			}
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
