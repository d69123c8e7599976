package retention

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// indexed reports whether the site's index holds name.
func indexed(h *harness, site, name string) bool {
	s := h.m.sites[site]
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.idx.jobs[jobID(name)]
	return j != nil && j.find(name) >= 0
}

// gonesMuted reports whether the site's watch has IN_DELETE off, as the kernel says
// (/proc/self/fdinfo of the gone instance lists its watch and mask), and checks that the
// watch's own record agrees.
func gonesMuted(t *testing.T, h *harness, site string) bool {
	t.Helper()
	s := h.m.sites[site]
	s.mu.Lock()
	w := s.raw
	s.mu.Unlock()
	if w == nil {
		t.Fatal("the site has no raw watch")
	}
	return watchMuted(t, w)
}

func watchMuted(t *testing.T, w *rawWatch) bool {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", w.gone))
	if err != nil {
		t.Fatal(err)
	}
	var mask uint64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "inotify wd:") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "mask:"); ok {
				mask, err = strconv.ParseUint(v, 16, 32)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if mask == 0 {
		t.Fatalf("no inotify watch in the gone instance's fdinfo:\n%s", b)
	}
	muted := mask&unix.IN_DELETE == 0
	if muted != w.muted {
		t.Fatalf("kernel mask %#x, but the watch records muted=%v", mask, w.muted)
	}
	return muted
}

// TestLongDrainMutesItsOwnDeletes (issue 13 item 2): an unthrottled drain longer than
// muteGoneAfter takes IN_DELETE off the site's watch, so that its own unlinks do not
// come back as an event each. What another process deletes meanwhile goes unseen by
// events, and the rescan that ends the mute finds it gone; after the drain, deletions
// are seen by events again (well before the 5-minute reconcile).
func TestLongDrainMutesItsOwnDeletes(t *testing.T) {
	dir := testenv.Tmpfs(t, 256<<20, 0)
	files := staleSite(t, dir, muteGoneAfter/7+100)
	young := makeJob(t, dir, "young", deadPid(t), time.Now()) // not expired: kept
	sc := siteCfg("s", dir)
	sc.DrainRate = 0
	var mutes atomic.Int32
	opts := Options{Sites: []SiteConfig{sc}}
	opts.afterMute = func(w *rawWatch) {
		mutes.Add(1)
		if !watchMuted(t, w) {
			t.Error("afterMute, but the kernel still sends IN_DELETE")
		}
		// Another process deletes a young file while the drain is muted: no event says so.
		if err := os.Remove(filepath.Join(dir, "young.out")); err != nil {
			t.Error(err)
		}
	}
	h := run(t, opts)
	waitFor(t, "the drain", func() bool { return len(drainEvents(h)) > 0 })
	if got := drainEvents(h)[0].Fields["files"]; got != int64(files) {
		t.Fatalf("drain deleted %v files, want %d", got, files)
	}
	if mutes.Load() != 1 {
		t.Fatalf("the drain muted %d times, want once", mutes.Load())
	}
	waitFor(t, "the watch unmuted", func() bool { return !gonesMuted(t, h, "s") })
	waitFor(t, "young.out, deleted by another while muted, found gone", func() bool { return !indexed(h, "s", "young.out") })
	for _, n := range young {
		if n != "young.out" && (!exists(dir, n) || !indexed(h, "s", n)) {
			t.Errorf("%s: kept on disk %v, indexed %v; want both", n, exists(dir, n), indexed(h, "s", n))
		}
	}
	// Unmuted: a deletion now is an event, applied at once.
	if err := os.Remove(filepath.Join(dir, "young.err")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "young.err's deletion seen", func() bool { return !indexed(h, "s", "young.err") })
}

// TestShortOrThrottledDrainKeepsDeleteEvents: a drain shorter than muteGoneAfter, or at
// drain_rate, never mutes; one that was muted at full speed (pressure) unmutes as soon as
// it is back at its rate, while it goes on.
func TestShortOrThrottledDrainKeepsDeleteEvents(t *testing.T) {
	t.Run("short", func(t *testing.T) {
		dir := testenv.Tmpfs(t, 64<<20, 0)
		staleSite(t, dir, 200)
		sc := siteCfg("s", dir)
		sc.DrainRate = 0
		var mutes atomic.Int32
		opts := Options{Sites: []SiteConfig{sc}}
		opts.afterMute = func(*rawWatch) { mutes.Add(1) }
		h := run(t, opts)
		waitFor(t, "the drain", func() bool { return len(drainEvents(h)) > 0 })
		if mutes.Load() != 0 || gonesMuted(t, h, "s") {
			t.Fatalf("a drain of 1,400 files muted (%d)", mutes.Load())
		}
	})
	t.Run("pressure then rate", func(t *testing.T) {
		dir := testenv.Tmpfs(t, 256<<20, 0)
		staleSite(t, dir, muteGoneAfter/7+300)
		sc := siteCfg("s", dir)
		sc.DrainRate = 5000
		var pressure atomic.Bool
		pressure.Store(true)
		var mutes atomic.Int32
		opts := Options{Sites: []SiteConfig{sc}, FullSpeed: func(string) bool { return pressure.Load() }}
		opts.afterMute = func(*rawWatch) {
			mutes.Add(1)
			pressure.Store(false) // the drain goes on at 5,000 files/s
		}
		h := run(t, opts)
		waitFor(t, "the mute", func() bool { return mutes.Load() == 1 })
		waitFor(t, "the unmute while the drain goes on at its rate", func() bool { return !gonesMuted(t, h, "s") })
		if len(drainEvents(h)) != 0 {
			t.Fatal("the drain ended before it was back at its rate; the test proves nothing")
		}
		waitFor(t, "the drain", func() bool { return len(drainEvents(h)) > 0 })
		if mutes.Load() != 1 {
			t.Errorf("muted %d times, want once", mutes.Load())
		}
	})
}

// groupByJob keeps every name, groups them by job id, and orders the jobs by their first
// name in the listing.
func TestGroupByJob(t *testing.T) {
	ents := []safefs.NameIno{{Name: "b.out", Ino: 9}, {Name: "a.pid", Ino: 3}, {Name: "b", Ino: 10},
		{Name: "c.x.y", Ino: 1}, {Name: "a.out", Ino: 4}, {Name: "b.pid", Ino: 8}}
	heads, next := groupByJob(ents)
	var got [][]string
	for _, h := range heads {
		var names []string
		for i := h; i >= 0; i = next[i] {
			names = append(names, ents[i].Name)
		}
		got = append(got, names)
	}
	want := [][]string{{"b.out", "b", "b.pid"}, {"a.pid", "a.out"}, {"c.x.y"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("groupByJob = %q, want %q", got, want)
	}
	if h, n := groupByJob(nil); len(h) != 0 || len(n) != 0 {
		t.Fatalf("groupByJob(nil) = %v, %v", h, n)
	}
}

// Inode order is used where it means something (gnulib fts' rule): not on tmpfs, on a
// disk filesystem.
func TestInodeOrderHelps(t *testing.T) {
	tmp := testenv.Tmpfs(t, 1<<20, 0)
	fd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if inodeOrderHelps(fd) {
		t.Error("inode order on tmpfs")
	}
	disk := t.TempDir()
	var st unix.Statfs_t
	if unix.Statfs(disk, &st) != nil || st.Type != unix.EXT4_SUPER_MAGIC {
		t.Skipf("%s is not on ext4", disk)
	}
	dfd, err := unix.Open(disk, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if !inodeOrderHelps(dfd) {
		t.Error("no inode order on ext4")
	}
}

// Reading a pid file (the scan's liveness) leaves its atime alone: under relatime a read
// of a file whose atime is older than its mtime writes the inode, which on ext4 is a
// journal write per job beside the drain's unlinks.
func TestScanLeavesPidFileAtime(t *testing.T) {
	dir := testenv.Tmpfs(t, 1<<20, 0)
	makeJob(t, dir, "j1", deadPid(t), time.Now())
	pid := filepath.Join(dir, "j1.pid")
	old := time.Now().Add(-13 * time.Hour)
	if err := unix.UtimesNano(pid, []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(time.Now().UnixNano())}); err != nil {
		t.Fatal(err)
	}
	atime := func() int64 {
		var st unix.Stat_t
		if err := unix.Lstat(pid, &st); err != nil {
			t.Fatal(err)
		}
		return st.Atim.Nano()
	}
	before := atime()
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", dir)}})
	waitFor(t, "the pid read", func() bool {
		s := h.m.sites["s"]
		s.mu.Lock()
		defer s.mu.Unlock()
		j := s.idx.jobs["j1"]
		return j != nil && j.pid != 0
	})
	if after := atime(); after != before {
		t.Fatalf("the scan moved j1.pid's atime from %v to %v", time.Unix(0, before), time.Unix(0, after))
	}
	// The control: a plain read does move it, so the check above can fail.
	if _, err := os.ReadFile(pid); err != nil {
		t.Fatal(err)
	}
	if atime() == before {
		t.Skip("this mount does not update atime on read (noatime): nothing to prove")
	}
}
