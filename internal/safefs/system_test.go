package safefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// mountinfo escapes a space in a mount point as \040: the mount is still found and the
// bind of /usr/lib behind it still judged as /usr/lib; the tmpfs itself is fine.
func TestCheckSystemThroughAMountPointWithASpace(t *testing.T) {
	T := testenv.Tmpfs(t, 1<<20, 0)
	dst := filepath.Join(T, "with space\tand tab")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/usr/lib", dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if why := r.CheckSystem(); !strings.Contains(why, "is really /usr/lib (a bind mount of it), which lies inside /usr") {
		t.Errorf("CheckSystem() = %q, want it really /usr/lib", why)
	}
	ok, err := OpenRoot(T)
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if why := ok.CheckSystem(); why != "" {
		t.Errorf("CheckSystem() of a plain tmpfs = %q, want it allowed", why)
	}
}
