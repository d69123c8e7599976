package retention

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// makeFlat writes n small files in groups of 7 (no directories, so `find -delete`, which
// bumps a directory's mtime by emptying it, deletes the same set), all with mtime at.
func makeFlat(tb testing.TB, dir string, n int, at time.Time) {
	tb.Helper()
	sufs := jobSuffixes[:6]
	pid := []byte(fmt.Sprintf("%d\n", deadPid(tb)))
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%08x%s", i/7, sufs[i%6]))
		if i%7 == 6 {
			p = filepath.Join(dir, fmt.Sprintf("%08x.meta", i/7))
		}
		data := []byte("x\n")
		if i%7 == 0 {
			data = pid
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			tb.Fatal(err)
		}
	}
}

// staticSite builds a site that is attached, scanned and liveness-checked, without Run.
func staticSite(tb testing.TB, dir string, opts Options) (*Manager, *site) {
	tb.Helper()
	opts.Sites = []SiteConfig{siteCfg("s", dir)}
	m, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	s := m.sites["s"]
	s.attach()
	if err := s.rescan(); err != nil {
		tb.Fatal(err)
	}
	s.refreshLiveness(nil)
	tb.Cleanup(func() { s.mu.Lock(); s.detachLocked(""); s.mu.Unlock() })
	return m, s
}

// BenchmarkPruneNothingExpired is the launch call's prune on a site of 16,381 entries
// none of which is expired: it must not depend on the number of entries.
func BenchmarkPruneNothingExpired(b *testing.B) {
	dir := testenv.Tmpfs(b, 256<<20, 0)
	makeFlat(b, dir, 16381, time.Now())
	m, _ := staticSite(b, dir, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := m.Prune(ctx, "", 256)
		if err != nil || r.Files != 0 {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkDrain100k races the background drain (rate limit off) against
// `find DIR -mindepth 1 -mmin +720 -delete` on identical copies of 100,000 stale files, on
// tmpfs and on the ext4 root (b.TempDir), side by side. The drain's time runs from Run's
// start (it includes the first scan and liveness) to an empty site.
func BenchmarkDrain100k(b *testing.B) {
	const n = 100000
	testenv.RequireRoot(b)
	testenv.RequireCommand(b, "find")
	fss := []struct {
		name string
		dir  func(b *testing.B) string
	}{
		{"tmpfs", func(b *testing.B) string { return testenv.Tmpfs(b, 1<<30, 0) }},
		{"ext4", func(b *testing.B) string { return b.TempDir() }},
	}
	old := time.Now().Add(-13 * time.Hour)
	for _, fs := range fss {
		b.Run(fs.name+"/find", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := filepath.Join(fs.dir(b), "site")
				os.Mkdir(dir, 0o755)
				makeFlat(b, dir, n, old)
				syncFS()
				b.StartTimer()
				if out, err := exec.Command("find", dir, "-mindepth", "1", "-mmin", "+720", "-delete").CombinedOutput(); err != nil {
					b.Fatalf("find: %v: %s", err, out)
				}
				b.StopTimer()
				assertEmpty(b, dir)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
		b.Run(fs.name+"/drain", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := filepath.Join(fs.dir(b), "site")
				os.Mkdir(dir, 0o755)
				makeFlat(b, dir, n, old)
				syncFS()
				m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)}, DrainRate: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.StartTimer()
				go func() { done <- m.Run(ctx) }()
				for {
					if s, _ := m.Site("s"); s.Problem == nil && s.Files == 0 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				b.StopTimer()
				cancel()
				<-done
				assertEmpty(b, dir)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
	}
}

func syncFS() { exec.Command("sync").Run() }

func assertEmpty(b *testing.B, dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		b.Fatalf("%s not emptied: %d entries left, %v", dir, len(ents), err)
	}
}

// BenchmarkIndexMemory reports the live heap per indexed entry (100,000 entries in jobs of
// 7 with their first sightings, against an empty index), after GC.
func BenchmarkIndexMemory(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(indexBytesPerEntry(100000), "bytes/entry")
	}
}

func TestIndexMemoryPerEntry(t *testing.T) {
	if got := indexBytesPerEntry(100000); got >= 200 {
		t.Fatalf("%.1f bytes per indexed entry, want under 200", got)
	}
}

func indexBytesPerEntry(n int) float64 {
	sufs := []string{".pid", ".status", ".out", ".err", ".launch.sh", ".callback.json", ""}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	x := newIndex()
	sightings := map[string]sighting{}
	now := time.Now().UnixNano()
	for i := 0; i < n; i++ {
		// names as a launcher makes them: a 16-hex-digit id and a suffix
		name := fmt.Sprintf("%016x%s", i/7, sufs[i%7])
		j := x.upsert(name, now-int64(i), 100, uint64(i))
		j.live = liveDead
		x.place(j)
		if i%7 == 0 {
			sightings[j.id] = sighting{Pid: int32(i), Ticks: uint64(i)}
		}
	}
	after := heap()
	runtime.KeepAlive(x)
	runtime.KeepAlive(sightings)
	return float64(after-before) / float64(n)
}
