package safefs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkOpenRoot measures what a root's open costs since issue 9, side by side with
// what it replaced and with the kernel's one-call alternative, on a root 6 components deep
// (/tmp/<tempdir>/<n>/site/launcher/bg, the depth of a home's cache):
//   - walk: OpenRoot, one openat2 and one fstat per component plus the ancestor checks;
//   - nofollow: the old open(path, O_NOFOLLOW|O_DIRECTORY), which guards the last
//     component only;
//   - openat2: one openat2(RESOLVE_NO_SYMLINKS) from "/", which refuses links everywhere
//     but gives no ancestor to check for ownership or mode.
func BenchmarkOpenRoot(b *testing.B) {
	path := filepath.Join(b.TempDir(), "site", "launcher", "bg")
	if err := os.MkdirAll(path, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			r, err := OpenRoot(path)
			if err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
	b.Run("nofollow", func(b *testing.B) {
		for b.Loop() {
			fd, err := unix.Open(path, dirOpenFlags, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	b.Run("openat2", func(b *testing.B) {
		root, err := unix.Open("/", dirOpenFlags, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(root)
		how := unix.OpenHow{Flags: uint64(dirOpenFlags), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		for b.Loop() {
			fd, err := unix.Openat2(root, path[1:], &how)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
}
