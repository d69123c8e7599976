package pressure

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/units"
)

func TestMeasureAndFilesystemFor(t *testing.T) {
	watched := testenv.Tmpfs(t, 32<<20, 500)
	other := testenv.Tmpfs(t, 8<<20, 100)
	sub := filepath.Join(watched, "site")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	w := New(Options{Filesystems: []FSConfig{{Path: watched, ReclaimBelow: units.Threshold{Amount: 4 << 20}}}})
	t.Cleanup(w.mounts.close) // its mountinfo poll and inotify fd: Run is not called
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Before any loop step: Measure samples the watched filesystem itself.
	fig, err := w.Measure(ctx, watched)
	if err != nil {
		t.Fatal(err)
	}
	if fig.Path != watched || fig.ReclaimThresholdBytes != 4<<20 || fig.SizeBytes != 32<<20 {
		t.Fatalf("Measure(watched) = %+v", fig)
	}
	if !w.Ready() {
		t.Error("a Measure of the watched path did not count as its first sample")
	}

	// A path on the watched filesystem answers with its object and sees new writes at once.
	if err := testenv.Fill(filepath.Join(sub, "x"), 3<<20); err != nil {
		t.Fatal(err)
	}
	fig2, err := w.Measure(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if fig2.Path != watched || fig2.AvailBytes > fig.AvailBytes-3<<20 || fig2.ReclaimThresholdBytes == 0 {
		t.Fatalf("Measure(sub) = %+v, want the watched object 3 MiB fuller", fig2)
	}
	if snap, _ := w.Filesystem(watched); snap.AvailBytes != fig2.AvailBytes {
		t.Errorf("Measure did not feed the watched figures: %d vs %d", snap.AvailBytes, fig2.AvailBytes)
	}
	if got, ok := w.FilesystemFor(sub); !ok || got.Path != watched {
		t.Errorf("FilesystemFor(sub) = %+v, %v", got, ok)
	}

	// Elsewhere: bare figures, no thresholds, not a watched filesystem.
	bare, err := w.Measure(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if bare.Path != other || bare.SizeBytes != 8<<20 || bare.ReclaimThresholdBytes != 0 {
		t.Errorf("Measure(other) = %+v", bare)
	}
	if _, ok := w.FilesystemFor(other); ok {
		t.Error("FilesystemFor(other) claims a watched filesystem")
	}
	if _, err := w.Measure(ctx, filepath.Join(other, "missing")); err == nil {
		t.Error("Measure of a missing path did not fail")
	}

	// Concurrent Measures of one filesystem all answer, one statfs at a time.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := w.Measure(ctx, sub); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A sample that fails (the path is gone) is reported on the filesystem and still counts
// as its first sample, so one bad entry cannot keep the daemon unready.
func TestSampleErrorIsReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	w := New(Options{Filesystems: []FSConfig{{Path: dir}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.sampleOnce(ctx)
	fig, _ := w.Filesystem(dir)
	if fig.Error == "" || !w.Ready() {
		t.Fatalf("missing path: %+v ready %v", fig, w.Ready())
	}
}

func BenchmarkStatfs(b *testing.B) {
	dir := b.TempDir()
	var sf unix.Statfs_t
	for b.Loop() {
		if err := unix.Statfs(dir, &sf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMeasure(b *testing.B) {
	dir := b.TempDir()
	w := New(Options{Filesystems: []FSConfig{{Path: dir}}})
	ctx := context.Background()
	for b.Loop() {
		if _, err := w.Measure(ctx, dir); err != nil {
			b.Fatal(err)
		}
	}
}
