package retention

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	return staticSiteCfg(tb, siteCfg("s", dir), opts)
}

// staticSiteCfg is staticSite for a site configured as cfg (named "s").
func staticSiteCfg(tb testing.TB, cfg SiteConfig, opts Options) (*Manager, *site) {
	tb.Helper()
	opts.Sites = []SiteConfig{cfg}
	m, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	s := m.sites["s"]
	s.attach()
	if err := s.rescan(nil); err != nil {
		tb.Fatal(err)
	}
	s.refreshLiveness(nil)
	s.markStarted() // scanned by hand: a Prune need not wait for a Run that never comes
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
// `find DIR -mindepth 1 -mmin +720 -delete` on identical copies of 100,000 stale files
// (jobs of 7), on tmpfs and on the ext4 root (b.TempDir), side by side: each iteration
// builds the copies (timer stopped, then sync) and times them in alternating order. Two
// ways the drain meets such a backlog, each its own sub-benchmark:
//
//   - backlog: the daemon has indexed the files (they were written while it ran) and
//     they expire; timed from the moment they are expired (the daemon's injected clock
//     jumps 13 h and the drain is woken) to an empty index. This is the backlog the
//     drain exists for: what launch calls report as pending_prune.
//   - cold: the daemon starts on a directory already full of expired files; timed from
//     Run's start, so it includes listing, stating every file and reading every pid
//     file, which the drain overlaps with its deletions.
//
// ns/op is the drain's; the medians of both tools, their ratio and the CPU-time ratio are
// extra metrics. Run with -benchtime=5x for the medians of 5 interleaved runs.
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
	for _, fs := range fss {
		for _, mode := range []string{"backlog", "cold"} {
			b.Run(fs.name+"/"+mode, func(b *testing.B) {
				base := fs.dir(b)
				var took, cpu [2][]time.Duration // find, drain: wall and CPU (user+sys) time
				b.StopTimer()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					dirs := [2]string{filepath.Join(base, "find"), filepath.Join(base, "drain")}
					old := time.Now().Add(-13 * time.Hour)
					os.Mkdir(dirs[0], 0o755)
					makeFlat(b, dirs[0], n, old)
					os.Mkdir(dirs[1], 0o755)
					var d *indexedDrain
					if mode == "backlog" {
						makeFlat(b, dirs[1], n, time.Now())
						d = startIndexed(b, dirs[1])
					} else {
						makeFlat(b, dirs[1], n, old)
					}
					testenv.SyncFS()
					for k := range 2 {
						tool := (i + k) % 2
						var wall, used time.Duration
						if tool == 0 {
							start := time.Now()
							cmd := exec.Command("find", dirs[0], "-mindepth", "1", "-mmin", "+720", "-delete")
							if out, err := cmd.CombinedOutput(); err != nil {
								b.Fatalf("find: %v: %s", err, out)
							}
							wall, used = time.Since(start), cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()
						} else {
							b.StartTimer()
							if d != nil {
								wall, used = d.expire(b)
							} else {
								wall, used = benchDrain(b, dirs[1])
							}
							b.StopTimer()
						}
						took[tool] = append(took[tool], wall)
						cpu[tool] = append(cpu[tool], used)
						assertEmpty(b, dirs[tool])
					}
					testenv.SyncFS()
				}
				find, drain := testenv.Median(took[0]), testenv.Median(took[1])
				b.ReportMetric(find.Seconds()*1e3, "find-ms")
				b.ReportMetric(drain.Seconds()*1e3, "drain-ms")
				b.ReportMetric(float64(drain)/float64(find), "x-find")
				// CPU time says the same with less noise on a shared, loaded machine.
				b.ReportMetric(float64(testenv.Median(cpu[1]))/float64(testenv.Median(cpu[0])), "cpu-x-find")
			})
		}
	}
}

// benchDrain runs a Manager on dir until its index is empty and reports the wall and CPU
// time that took. It polls the index's count directly: the status snapshot also counts
// the pending backlog, O(expired) per call, which at a 2 ms poll would take a core's share
// from the drain it measures.
func benchDrain(b testing.TB, dir string) (wall, used time.Duration) {
	m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)}})
	if err != nil {
		b.Fatal(err)
	}
	s := m.sites["s"]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start, cpu0 := time.Now(), testenv.SelfCPU()
	go func() { done <- m.Run(ctx) }()
	waitEmpty(s)
	wall, used = time.Since(start), testenv.SelfCPU()-cpu0
	cancel()
	<-done
	return wall, used
}

func waitEmpty(s *site) {
	for {
		s.mu.Lock()
		empty := s.ready && s.problem == "" && s.idx.files == 0
		s.mu.Unlock()
		if empty {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// indexedDrain is a Manager running on a site whose files it has indexed while they were
// fresh, with a clock the benchmark moves.
type indexedDrain struct {
	s      *site
	skew   atomic.Int64
	cancel context.CancelFunc
	done   chan error
}

func startIndexed(b *testing.B, dir string) *indexedDrain {
	d := &indexedDrain{done: make(chan error, 1)}
	m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)},
		Now: func() time.Time { return time.Now().Add(time.Duration(d.skew.Load())) }})
	if err != nil {
		b.Fatal(err)
	}
	d.s = m.sites["s"]
	var ctx context.Context
	ctx, d.cancel = context.WithCancel(context.Background())
	go func() { d.done <- m.Run(ctx) }()
	<-d.s.started
	b.Cleanup(d.stop)
	return d
}

// expire moves the daemon's clock 13 h on, wakes the drain, and times it to an empty index.
func (d *indexedDrain) expire(b *testing.B) (wall, used time.Duration) {
	d.s.mu.Lock()
	files := d.s.idx.files
	d.s.mu.Unlock()
	if files == 0 {
		b.Fatal("nothing indexed before the clock jump")
	}
	start, cpu0 := time.Now(), testenv.SelfCPU()
	d.skew.Store(int64(13 * time.Hour))
	d.s.kickDrain()
	waitEmpty(d.s)
	wall, used = time.Since(start), testenv.SelfCPU()-cpu0
	d.stop() // before the next iteration fills the same directory
	return wall, used
}

func (d *indexedDrain) stop() {
	if d.cancel != nil {
		d.cancel()
		<-d.done
		d.cancel = nil
	}
}

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
		j := x.upsert(name, fileStat{mtime: now - int64(i), size: 100, ino: uint64(i), blocks: 8, typ: unix.S_IFREG >> 12})
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

// BenchmarkLaunchDuringDrain measures launch calls (Prune with the daemon's budget of 256)
// made every 10 ms while the background drain works through 100,000 stale files, on tmpfs
// and on ext4: the drain holds the site for small time-bounded batches and yields to a
// waiting launch, and a launch deletes only a few ms' worth itself. Reports p50/p99/max.
func BenchmarkLaunchDuringDrain(b *testing.B) {
	const n = 100000
	testenv.RequireRoot(b)
	old := time.Now().Add(-13 * time.Hour)
	for _, fs := range []string{"tmpfs", "ext4"} {
		b.Run(fs, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				base := b.TempDir()
				if fs == "tmpfs" {
					base = testenv.Tmpfs(b, 1<<30, 0)
				}
				dir := filepath.Join(base, "site")
				os.Mkdir(dir, 0o755)
				makeFlat(b, dir, n, old)
				testenv.SyncFS()
				m, err := New(Options{Sites: []SiteConfig{siteCfg("s", dir)}})
				if err != nil {
					b.Fatal(err)
				}
				s := m.sites["s"]
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.StartTimer()
				go func() { done <- m.Run(ctx) }()
				<-s.started
				for {
					s.mu.Lock()
					left := s.idx.files
					s.mu.Unlock()
					if left == 0 {
						break
					}
					lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
					start := time.Now()
					if _, err := m.Prune(lctx, "", 256); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
					lcancel()
					time.Sleep(10 * time.Millisecond)
				}
				b.StopTimer()
				cancel()
				<-done
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds() * 1e3 }
			b.ReportMetric(float64(len(lat)), "launches")
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(lat[len(lat)-1].Seconds()*1e3, "max-ms")
		})
	}
}
