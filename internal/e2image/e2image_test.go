package e2image

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// fullDisk is a 64 MiB ext4 image, loop-mounted, with an 8 MiB reserve at
// /.sandboxd-reserve, filled to ENOSPC by `yes`, as a VM's overlay disk stopped at 100%.
func fullDisk(t *testing.T) (img, dir string, unmount func() error) {
	img = testenv.Ext4Image(t, 64<<20)
	dir, unmount = testenv.LoopMount(t, img)
	if out, err := exec.Command("fallocate", "-l", "8MiB", filepath.Join(dir, ".sandboxd-reserve")).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v %s", err, out)
	}
	out, err := exec.Command("sh", "-c", `exec yes AAAA > "$1"`, "sh", filepath.Join(dir, "work")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("fill: want ENOSPC: %v %s", err, out)
	}
	exec.Command("sync", "-f", dir).Run()
	return img, dir, unmount
}

func tools(t *testing.T) Tools {
	tl, err := Find()
	if err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	return tl
}

// TestRecoverRefusesAnImageInUse: a mounted image (a loop device backs it), one a process
// holds open, and one locked as a VMM locks its disk are refused, each saying how it knows.
func TestRecoverRefusesAnImageInUse(t *testing.T) {
	tl := tools(t)
	img, _, unmount := fullDisk(t)
	ctx := context.Background()
	_, err := tl.Recover(ctx, img, nil, 64<<20, "", "/proc", "/sys")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "backs /dev/loop") {
		t.Fatalf("recover of a mounted image: %v; want in use, naming the loop device", err)
	}
	if err := unmount(); err != nil {
		t.Fatal(err)
	}

	holder := exec.Command("sh", "-c", `exec 9<"$1"; echo ready; exec sleep 30`, "sh", img)
	stdout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	io.ReadFull(stdout, make([]byte, 6))
	_, err = tl.Recover(ctx, img, nil, 64<<20, "", "/proc", "/sys")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "has it open as fd 9") {
		t.Fatalf("recover of an image a process holds open: %v", err)
	}
	holder.Process.Kill()
	holder.Wait()

	flock := testenv.RequireCommand(t, "flock")
	locker := exec.Command(flock, "-x", img, "sh", "-c", "echo ready; exec sleep 30")
	stdout, _ = locker.StdoutPipe()
	if err := locker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locker.Process.Kill(); locker.Wait() })
	io.ReadFull(stdout, make([]byte, 6))
	// flock(1) keeps its fd, and its child inherits it: the fd and the lock both show.
	_, err = tl.Recover(ctx, img, nil, 64<<20, "", "/proc", "/sys")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("recover of a locked image: %v", err)
	}
}

// TestCheckAndRecoverAHardStoppedImage: the image copied while mounted is what a VM killed
// at 100% leaves (its journal needs recovery). check says so, the reserve and its size,
// changing nothing; recover replays the journal, removes the reserve (leaving its 1 KiB
// marker, so the freed figure is a block short of 8 MiB) and reports the
// room; the image then mounts and takes init's write, and the work is still there.
func TestCheckAndRecoverAHardStoppedImage(t *testing.T) {
	tl := tools(t)
	img, _, unmount := fullDisk(t)
	crash := filepath.Join(t.TempDir(), "crashed.img")
	if out, err := exec.Command("cp", "--sparse=always", img, crash).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before, _ := os.ReadFile(crash)
	rep, err := tl.Check(ctx, crash, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Journal != "needs recovery" || rep.Reserve != "/.sandboxd-reserve" || rep.ReserveSize != 8<<20 ||
		!strings.Contains(rep.Line, "journal needs recovery") || !strings.Contains(rep.Line, "holds 8.0 MiB") {
		t.Fatalf("check of a hard-stopped image: %+v", rep)
	}
	if after, _ := os.ReadFile(crash); string(after) != string(before) {
		t.Fatal("check changed the image")
	}

	rec, err := tl.Recover(ctx, crash, nil, 64<<20, "[openshell.drivers.vm] overlay_disk_mib", "/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Replayed || rec.Removed != "/.sandboxd-reserve" || rec.FreedBytes < 8<<20-4096 || rec.After.Journal != "clean" ||
		!strings.Contains(rec.Line, "freed 8.0 MiB") || !strings.Contains(rec.Line, "overlay_disk_mib") {
		t.Fatalf("recover: %+v", rec)
	}
	dir, unmount2 := testenv.LoopMount(t, crash)
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatalf("init's write on the recovered image: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "work")); err != nil || !strings.HasPrefix(string(b[:10]), "AAAA\nAAAA\n") {
		t.Fatalf("the work on the recovered image: %v", err)
	}
	if err := unmount2(); err != nil {
		t.Fatal(err)
	}

	// A second recover finds no reserve: it frees nothing, says how far short the image is
	// of what the VM needs and what sizes the disk (exit 12 in the CLI).
	rec, err = tl.Recover(ctx, crash, nil, 64<<20, "[openshell.drivers.vm] overlay_disk_mib", "/proc", "/sys")
	if err != nil || !rec.NothingToFree || !strings.Contains(rec.Line, "no sandboxd reserve inside") ||
		!strings.Contains(rec.Line, "raising [openshell.drivers.vm] overlay_disk_mib") {
		t.Fatalf("second recover: %+v, %v", rec, err)
	}
}
