package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Ext4Image makes an ext4 image file of size bytes in a fresh temp dir (mkfs.ext4, 1 KiB
// blocks, no root-reserved blocks so a full disk is 0 B for everyone) and returns its path;
// the file goes with the test.
func Ext4Image(t testing.TB, size int64) string {
	t.Helper()
	mkfs := RequireCommand(t, "mkfs.ext4")
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, "-q", "-F", "-b", "1024", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", img, err, out)
	}
	return img
}

// LoopMount mounts the ext4 image on a fresh directory through a loop device (mount -o
// loop: the device is detached when the filesystem is unmounted) and returns the
// directory and an unmount function; the test's cleanup unmounts it too when the test
// did not (also on failure), so neither the mount nor the loop device stays behind.
func LoopMount(t testing.TB, image string) (dir string, unmount func() error) {
	t.Helper()
	RequireRoot(t)
	mount := RequireCommand(t, "mount")
	dir, err := os.MkdirTemp("", "sandboxd-ext4-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mount, "-t", "ext4", "-o", "loop", image, dir).CombinedOutput(); err != nil {
		os.Remove(dir) // by path: tests only; the MkdirTemp above
		t.Fatalf("mount -o loop %s: %v\n%s", image, err, out)
	}
	mounted := true
	unmount = func() error {
		if !mounted {
			return nil
		}
		if err := unix.Unmount(dir, 0); err != nil {
			return err
		}
		mounted = false
		detachLoops(image)
		os.Remove(dir) // by path: as above
		return nil
	}
	t.Cleanup(func() {
		if mounted {
			if unmount() != nil {
				unix.Unmount(dir, unix.MNT_DETACH)
				mounted = false
				detachLoops(image)
				os.Remove(dir) // by path: as above
			}
		}
	})
	return dir, unmount
}

// detachLoops detaches any loop device still backed by image (autoclear does it on the
// last unmount; a lazy unmount may leave it to us).
func detachLoops(image string) {
	out, err := exec.Command("losetup", "-j", image).Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if dev, _, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
			exec.Command("losetup", "-d", dev).Run()
		}
	}
}
