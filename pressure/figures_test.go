package pressure

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

func TestFiguresMatchStatfsOnTmpfs(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 2000)
	if err := testenv.Fill(filepath.Join(dir, "f"), 5<<20); err != nil {
		t.Fatal(err)
	}
	w := New(Options{Filesystems: []FSConfig{{Path: dir}}})
	fig := sample(t, w)

	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if fig.SizeBytes != 64<<20 {
		t.Errorf("size_bytes = %d, want exactly %d", fig.SizeBytes, 64<<20)
	}
	if want := sf.Bavail * uint64(sf.Frsize); fig.AvailBytes != want {
		t.Errorf("avail_bytes = %d, want %d", fig.AvailBytes, want)
	}
	if want := sf.Bfree * uint64(sf.Frsize); fig.FreeBytes != want {
		t.Errorf("free_bytes = %d, want %d", fig.FreeBytes, want)
	}
	if fig.Files != 2000 || fig.FilesFree != sf.Ffree {
		t.Errorf("files = %d/%d free, want 2000/%d", fig.Files, fig.FilesFree, sf.Ffree)
	}
	if want := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)); fig.Devno != want {
		t.Errorf("devno = %q, want %q", fig.Devno, want)
	}
	// The mount source, as node_exporter's device label has it.
	if fig.Device != "tmpfs" {
		t.Errorf("device = %q, want the mount source tmpfs", fig.Device)
	}
	if fig.Mountpoint != dir || fig.FSType != "tmpfs" {
		t.Errorf("mountpoint, fstype = %q, %q; want %q, tmpfs", fig.Mountpoint, fig.FSType, dir)
	}
	if fig.UsedRatio <= 0 || fig.UsedRatio >= 1 {
		t.Errorf("used_ratio = %v", fig.UsedRatio)
	}
	if fig.SampledAt.IsZero() || fig.Stale || !w.Ready() {
		t.Errorf("sampled_at %v stale %v ready %v", fig.SampledAt, fig.Stale, w.Ready())
	}

	bare, err := Statfs(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if bare.SizeBytes != fig.SizeBytes || bare.Mountpoint != dir || bare.Device != fig.Device || bare.Devno != fig.Devno {
		t.Errorf("Statfs = %+v, want the figures of %s", bare, dir)
	}
	if bare.ReclaimThresholdBytes != 0 {
		t.Errorf("bare figures carry a threshold: %+v", bare)
	}
}

// A mountpoint with a space shows as \040 in mountinfo; the object must show the real path.
func TestMountpointWithSpace(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "with space")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fig, err := Statfs(sub)
	if err != nil {
		t.Fatal(err)
	}
	if fig.Mountpoint != dir || fig.SizeBytes != 1<<20 {
		t.Errorf("mountpoint %q size %d, want %q 1MiB", fig.Mountpoint, fig.SizeBytes, dir)
	}
}

func TestNoInodeLimitMeansNoInodeConditions(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,nr_inodes=0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	inodes, _ := units.ParseCountThreshold("50%")
	w := New(Options{Filesystems: []FSConfig{{
		Path: dir, ReclaimBelowInodes: inodes,
		ReplaceBelowInodes: units.Threshold{Amount: 1 << 40},
	}}})
	fig := sample(t, w)
	if fig.Files != 0 {
		t.Fatalf("tmpfs nr_inodes=0 reports files=%d, want 0 (no limit)", fig.Files)
	}
	if fig.ReclaimThresholdFiles != 0 || fig.ReplaceThresholdFiles != 0 {
		t.Errorf("inode thresholds %d/%d on a filesystem with no inode limit", fig.ReclaimThresholdFiles, fig.ReplaceThresholdFiles)
	}
	for _, c := range w.Conditions() {
		if c.Status {
			t.Errorf("condition %s true on a filesystem with no inode limit: %s", c.Type, c.Message)
		}
	}
	if c := cond(t, w, api.CondInodePressure, dir); c.Reason != "NoInodeLimit" {
		t.Errorf("InodePressure reason %q", c.Reason)
	}
}

func TestPercentThresholds(t *testing.T) {
	dir := testenv.Tmpfs(t, 64<<20, 2000)
	reclaim, _ := units.ParseBytesThreshold("25%")
	replace, _ := units.ParseBytesThreshold("12.5%")
	ri, _ := units.ParseCountThreshold("5%")
	pi, _ := units.ParseCountThreshold("1%")
	w := New(Options{Filesystems: []FSConfig{{
		Path: dir, ReclaimBelow: reclaim, ReplaceBelow: replace,
		ReclaimBelowInodes: ri, ReplaceBelowInodes: pi,
	}}, ReserveBytes: func(fs string) uint64 { // what reclaim says the file holds, not a configured size
		if fs == dir {
			return 1 << 20
		}
		return 0
	}})
	fig := sample(t, w)
	if fig.ReclaimThresholdBytes != 16<<20 || fig.ReplaceThresholdBytes != 8<<20 {
		t.Errorf("byte thresholds %d/%d, want 16MiB/8MiB", fig.ReclaimThresholdBytes, fig.ReplaceThresholdBytes)
	}
	if fig.ReclaimThresholdFiles != 100 || fig.ReplaceThresholdFiles != 20 {
		t.Errorf("inode thresholds %d/%d, want 100/20", fig.ReclaimThresholdFiles, fig.ReplaceThresholdFiles)
	}
	if fig.ReclaimThresholdWhy != "reclaim_below 25% (16.0 MiB)" {
		t.Errorf("reason %q", fig.ReclaimThresholdWhy)
	}
	if fig.ReserveBytes != 1<<20 {
		t.Errorf("reserve_bytes %d", fig.ReserveBytes)
	}
}

// No NaN or Inf may reach encoding/json, whatever the filesystem reports.
func TestZeroSizeFiguresMarshal(t *testing.T) {
	fig := figures(&unix.Statfs_t{})
	fig.Path = "/zero"
	r := resolveThresholds(FSConfig{ReclaimBelow: units.Threshold{Pct: 10, Percent: true}}, 0, 0, 0, 0)
	for _, s := range evaluate(fig, r, 3600e9) {
		if s.raw {
			t.Errorf("%s true on a filesystem that reports no capacity", s.typ)
		}
	}
	if _, err := json.Marshal([]api.Filesystem{fig}); err != nil {
		t.Fatal(err)
	}
	if fig.UsedRatio != 0 {
		t.Errorf("used_ratio %v for size 0", fig.UsedRatio)
	}
}

// The package has no observe mode because it changes nothing: sampling, measuring and
// marking leave the watched filesystem exactly as they found it.
func TestWatchingChangesNothing(t *testing.T) {
	dir := testenv.Tmpfs(t, 8<<20, 100)
	if err := testenv.Fill(filepath.Join(dir, "f"), 1<<20); err != nil {
		t.Fatal(err)
	}
	var before unix.Statfs_t
	if err := unix.Statfs(dir, &before); err != nil {
		t.Fatal(err)
	}
	w := New(Options{Filesystems: []FSConfig{{Path: dir, ReclaimBelow: units.Threshold{Amount: 64 << 20}}}})
	t.Cleanup(w.mounts.close) // its mountinfo poll and inotify fd: Run is not called
	for i := 0; i < 3; i++ {
		sample(t, w)
	}
	if _, err := w.Measure(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	w.MarkReplace(dir, "test")
	var after unix.Statfs_t
	if err := unix.Statfs(dir, &after); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || after.Bavail != before.Bavail || after.Ffree != before.Ffree {
		t.Errorf("watching changed the filesystem: %d entries, avail %d→%d, ffree %d→%d",
			len(ents), before.Bavail, after.Bavail, before.Ffree, after.Ffree)
	}
}
