package retention

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// drainEvents are the closing prune events of drains (progress reports left out).
func drainEvents(h *harness) []api.Event {
	var out []api.Event
	for _, e := range h.events.kinds(api.EventPrune) {
		if e.Fields["trigger"] == "drain" && e.Fields["progress"] == nil {
			out = append(out, e)
		}
	}
	return out
}

// staleSite writes n expired jobs of seven entries and answers how many entries that is.
func staleSite(t *testing.T, dir string, n int) int {
	old := time.Now().Add(-13 * time.Hour)
	total := 0
	for i := 0; i < n; i++ {
		total += len(makeJob(t, dir, fmt.Sprintf("j%04d", i), deadPid(t), old))
	}
	return total
}

// TestDrainIsOneEvent (issue 13 item 3): a backlog of hundreds of jobs drained in many
// batches leaves one prune event with the totals, the job count and the first and last
// job, not one event per batch.
func TestDrainIsOneEvent(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 0)
	files := staleSite(t, dir, 300) // 2,100 entries: 5 batches of 512 at least
	began := time.Now()
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}})
	waitFor(t, "the drain", func() bool { return len(drainEvents(h)) > 0 })
	time.Sleep(200 * time.Millisecond) // a second event would come now
	evs := drainEvents(h)
	if len(evs) != 1 {
		t.Fatalf("%d drain events, want 1: %+v", len(evs), evs)
	}
	e := evs[0]
	f := e.Fields
	if f["files"] != int64(files) || f["jobs_total"] != 300 || f["first_job"] == "" || f["last_job"] == "" ||
		f["drain_rate"] != 0 || f["full_speed"] != false || f["duration_seconds"] == nil || f["started_at"] == nil {
		t.Errorf("drain event fields %+v; want files %d, 300 jobs, first and last job, rate 0", f, files)
	}
	// The span the event gives is the drain's: it starts no earlier than the manager and
	// ends no later than the event that closes it (started_at was once taken after the
	// first batch while the duration counted from before it, so the span ran past its end).
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(f["started_at"]))
	dur, _ := f["duration_seconds"].(float64)
	if end := at.Add(time.Duration(dur * float64(time.Second))); err != nil || at.Before(began) || end.After(e.Time) {
		t.Errorf("drain span %v + %.6fs (ends %v) is not within [%v, the event's time %v] (%v)", f["started_at"], dur, end, began, e.Time, err)
	}
	if !strings.Contains(e.Message, "2,100 files") || !strings.Contains(e.Message, "300 jobs") || !strings.Contains(e.Message, "no rate limit") {
		t.Errorf("drain event message %q lacks the totals", e.Message)
	}
	if n := len(h.events.kinds(api.EventPrune)); n != 1 {
		t.Errorf("%d prune events in all, want the drain's one", n)
	}
	if got := h.m.PrunedTotals()["s"][ReasonAge]; got != int64(files) {
		t.Errorf("pruned %d, want %d", got, files)
	}
}

// TestDrainRateAndPressure (issue 13 item 2): with drain_rate set the drain takes at
// least files/rate (a lower bound, which load cannot break: it is what the rate
// promises) and says so; while the site's filesystem is under pressure (FullSpeed) it
// ignores the rate and says that.
func TestDrainRateAndPressure(t *testing.T) {
	for _, pressure := range []bool{false, true} {
		t.Run(fmt.Sprintf("pressure=%v", pressure), func(t *testing.T) {
			dir := testenv.Tmpfs(t, 64<<20, 0)
			files := staleSite(t, dir, 100) // 700 entries
			sc := siteCfg("s", dir)
			sc.DrainRate = 1000
			var asked atomic.Value
			h := run(t, Options{Sites: []SiteConfig{sc}, FullSpeed: func(path string) bool {
				asked.Store(path)
				return pressure
			}})
			waitFor(t, "the drain", func() bool { return len(drainEvents(h)) > 0 })
			f := drainEvents(h)[0].Fields
			if f["files"] != int64(files) || f["drain_rate"] != 1000 || f["full_speed"] != pressure {
				t.Fatalf("drain event %+v; want %d files, rate 1000, full_speed %v", f, files, pressure)
			}
			if asked.Load() != dir {
				t.Errorf("FullSpeed asked about %v, want the site path %s", asked.Load(), dir)
			}
			if !pressure {
				// The first batch (125 entries) goes at once; the rest at 1,000 files/s.
				if min := float64(files-drainBatch(1000)) / 1000; f["duration_seconds"].(float64) < min*0.9 {
					t.Errorf("drain of %d files at 1,000 files/s took %.3fs, less than %.3fs", files, f["duration_seconds"], min)
				}
			}
		})
	}
}

// TestDrainReportsProgress: a drain longer than drainProgressEvery reports how far it got
// (progress events, at most one per period) before its one closing event.
func TestDrainReportsProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~12 s: a drain longer than the progress period")
	}
	dir := testenv.Tmpfs(t, 64<<20, 0)
	files := staleSite(t, dir, 250) // 1,750 entries at 150 files/s: ~11.7 s
	sc := siteCfg("s", dir)
	sc.DrainRate = 150
	h := run(t, Options{Sites: []SiteConfig{sc}})
	waitFor(t, "the drain", func() bool { return len(drainEvents(h)) > 0 })
	var progress []api.Event
	for _, e := range h.events.kinds(api.EventPrune) {
		if e.Fields["progress"] == true {
			progress = append(progress, e)
		}
	}
	if len(progress) != 1 || !strings.Contains(progress[0].Message, "so far") || progress[0].Fields["pending"] == nil {
		t.Fatalf("progress events %+v; want one (a drain of ~11.7 s, one per 10 s)", progress)
	}
	if f := drainEvents(h)[0].Fields; f["files"] != int64(files) {
		t.Errorf("closing event files %v, want %d", f["files"], files)
	}
}

// TestDrainEndsAtAMountPoint: a job whose directory became a mount point after it was
// indexed (a sandbox mounting into its own job directory) expires; the drain prunes its
// files, leaves the mount point and what it shows alone, says so in its one event, and
// ends. It used to skip the mount point without an error, so the job stayed expired in
// the index and every batch claimed it again: the drain never ended and spun at about
// 10,000 batches a second for as long as the mount stayed.
func TestDrainEndsAtAMountPoint(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 64<<20, 0)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "data"), []byte("mounted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := siteCfg("s", dir)
	// Young enough to be indexed and kept, old enough to expire within the test.
	names := oldDirJob(t, dir, "bound", time.Now().Add(-cfg.MaxAge+time.Second))
	h := run(t, Options{Sites: []SiteConfig{cfg}})
	s, err := h.m.site("s")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the job indexed", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.idx.jobs["bound"] != nil
	})
	mnt := filepath.Join(dir, "bound")
	if err := unix.Mount(outside, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	waitFor(t, "the drain to end", func() bool { return len(drainEvents(h)) > 0 })
	f := drainEvents(h)[0].Fields
	if errs, _ := f["errors"].([]string); len(errs) != 1 || !strings.Contains(errs[0], "a mount point") ||
		f["files"] != int64(len(names)-1) {
		t.Errorf("drain event %+v; want the job's %d files and one error naming the mount point", f, len(names)-1)
	}
	for _, n := range names[:len(names)-1] {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s of the expired job survived", n)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "data")); err != nil || string(b) != "mounted\n" {
		t.Fatalf("the mount point in the site: %q, %v (it must not be removed)", b, err)
	}
}
