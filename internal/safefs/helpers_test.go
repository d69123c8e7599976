package safefs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// hashTree fingerprints everything under dir without following links: names, types,
// modes, file contents and link targets. Tests compare it before and after to prove a
// walk left a place untouched.
func hashTree(t testing.TB, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%q %v\n", p, info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %q\n", target)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func openRoot(t testing.TB, dir string) *Root {
	t.Helper()
	r, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// outside makes a directory with a few files next to (not inside) the root, to be
// checked for survival.
func outside(t testing.TB) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "keep.txt"), "precious")
	writeFile(t, filepath.Join(dir, "sub", "deep.txt"), "also precious")
	return dir, filepath.Join(dir, "keep.txt")
}

func mustNotExist(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("%s still exists (lstat err %v)", path, err)
	}
}

func bindMount(t testing.TB, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if unix.Unmount(dst, 0) != nil {
			unix.Unmount(dst, unix.MNT_DETACH)
		}
	})
}

func isMounted(t testing.TB, dir string) bool {
	t.Helper()
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		t.Fatalf("statx %s: %v", dir, err)
	}
	return isMountRoot(&stx)
}
