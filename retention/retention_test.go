package retention

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestAcceptance is the scenario: 16,381 stale files in groups of 7, 50 fresh jobs,
// and 12 running ones whose files are all 13 h old (10 with a live launch script writing
// to their .out, one held only by flock, one only by a POSIX lock). The launch call does
// bounded work and leaves a backlog; the drain clears it; only the stale files go.
func TestAcceptance(t *testing.T) {
	dir := testenv.Tmpfs(t, 256<<20, 0)
	old := time.Now().Add(-13 * time.Hour)
	dead := deadPid(t)
	var stale []string
	for i := 0; len(stale) < 16381; i++ {
		names := makeJob(t, dir, fmt.Sprintf("s%05d", i), dead, old)
		if n := 16381 - len(stale); n < len(names) {
			for _, x := range names[n:] { // the last group is partial
				os.RemoveAll(filepath.Join(dir, x))
			}
			names = names[:n]
		}
		stale = append(stale, names...)
	}
	var keep []string
	for i := 0; i < 50; i++ {
		keep = append(keep, makeJob(t, dir, fmt.Sprintf("f%03d", i), dead, time.Now())...)
	}
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("r%03d", i)
		names := makeJob(t, dir, id, dead, old)
		startJob(t, dir, id)
		ageAll(t, dir, names, old)
		keep = append(keep, names...)
	}
	lockOnly := func(id string, lock func(fd int) error) {
		names := makeJob(t, dir, id, dead, old)
		f, err := os.OpenFile(filepath.Join(dir, id+".status"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := lock(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, names...)
	}
	lockOnly("flk", func(fd int) error { return unix.Flock(fd, unix.LOCK_EX) })
	lockOnly("psx", func(fd int) error {
		return unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0})
	})

	sc := siteCfg("aura-bg", dir)
	sc.DrainRate = 5000
	h := run(t, Options{Sites: []SiteConfig{sc}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the cap is 256 files, not the deadline
	r, err := h.m.Prune(ctx, "", 256)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if r.Files > 256 || r.Pending == 0 || r.Problem != "" {
		t.Fatalf("launch prune: %+v; want at most 256 files, a backlog, no problem", r)
	}
	waitFor(t, "the drain to finish", func() bool {
		s, _ := h.m.Site("aura-bg")
		return s.PendingPrune == 0 && s.Files == int64(len(keep))
	})
	for _, n := range stale {
		if exists(dir, n) {
			t.Fatalf("stale %s survived", n)
		}
	}
	for _, n := range keep {
		if !exists(dir, n) {
			t.Fatalf("%s of a fresh or running job was pruned", n)
		}
	}
	s, _ := h.m.Site("aura-bg")
	if s.PrunedTotal != int64(len(stale)) || s.RunningJobs != 12 {
		t.Errorf("site after drain: %+v; want pruned_total %d, 12 running", s, len(stale))
	}
	if tot := h.m.PrunedTotals()["aura-bg"][ReasonAge]; tot != int64(len(stale)) {
		t.Errorf("pruned age total %d, want %d", tot, len(stale))
	}
	if len(h.events.kinds("prune")) == 0 {
		t.Error("no prune events")
	}
}
