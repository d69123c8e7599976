package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// `config check` judges where a root really is, not only its text: a bind mount of
// /usr/share, of /usr/lib and of / itself, a mount of proc and one of sysfs elsewhere are refused; a plain directory on
// a tmpfs is not. Nothing is deleted: Check only opens the roots (and the bind is read-only).
func TestCheckRefusesSystemDirsBehindMounts(t *testing.T) {
	T := testenv.Tmpfs(t, 1<<20, 0)
	for _, d := range []string{"usrshare", "usrlib", "whole", "proc", "sys", "ok/site"} {
		if err := os.MkdirAll(filepath.Join(T, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount := func(src, dst, fstype string, flags uintptr) {
		t.Helper()
		if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
			t.Fatalf("mount %s at %s: %v", src, dst, err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	mount("/usr/share", filepath.Join(T, "usrshare"), "", unix.MS_BIND)
	if err := unix.Mount("", filepath.Join(T, "usrshare"), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	mount("/usr/lib", filepath.Join(T, "usrlib"), "", unix.MS_BIND)
	if err := unix.Mount("", filepath.Join(T, "usrlib"), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	// The whole root filesystem mounted a second time (what /proc/self/root shows, as a
	// chroot's bind of / does): its /usr is still /usr.
	mount("/", filepath.Join(T, "whole"), "", unix.MS_BIND)
	if err := unix.Mount("", filepath.Join(T, "whole"), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	mount("proc", filepath.Join(T, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
	mount("sysfs", filepath.Join(T, "sys"), "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY)

	src := fmt.Sprintf(`version = 1
[reclaim]
protect = []
[[site]]
name = "usr"
path = "%[1]s/usrshare"
[[site]]
name = "proc"
path = "%[1]s/proc/1"
[[site]]
name = "fine"
path = "%[1]s/ok/site"
[[reclaim.cache]]
name = "sys"
path = "%[1]s/sys/fs"
[[reclaim.cache]]
name = "usr"
path = "%[1]s/usrlib"
[[reclaim.cache]]
name = "whole"
path = "%[1]s/whole/usr/share"
`, T)
	f := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Check(f)
	if err == nil {
		t.Fatal("Check accepted roots behind mounts of system directories")
	}
	msg := err.Error()
	for _, want := range []string{
		":6: site[0].path: root " + T + "/usrshare is really /usr/share (a bind mount of it), which lies inside /usr: a system directory",
		":9: site[1].path: root " + T + "/proc/1 is on the kernel's proc filesystem",
		":15: reclaim.cache[0].path: root " + T + "/sys/fs is on the kernel's sysfs filesystem",
		":18: reclaim.cache[1].path: root " + T + "/usrlib is really /usr/lib",
		":21: reclaim.cache[2].path: root " + T + "/whole/usr/share is really /usr/share",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("Check's error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "site[2]") {
		t.Errorf("the plain site on a tmpfs was refused:\n%s", msg)
	}
}
