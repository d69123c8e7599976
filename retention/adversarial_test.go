package retention

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// fingerprint hashes every name, mode, link target and content under dir.
func fingerprint(t *testing.T, dir string) string {
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(h, "err %s %v\n", p, err)
			return nil
		}
		fi, _ := os.Lstat(p)
		fmt.Fprintf(h, "%s %v\n", p, fi.Mode())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintf(h, "-> %s\n", target)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// lage sets an entry's times without following a symlink.
func lage(t *testing.T, p string, at time.Time) {
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(at.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

// TestAdversarialSite: a site holding expired jobs made of a symlink to a file outside, a
// symlink to a directory outside, a directory with a bind mount and a tmpfs inside, a
// FIFO, and a 5,000-deep directory chain. Pruning removes the links as links, never
// crosses the mounts, never blocks on the FIFO, survives the depth, and leaves
// everything outside the site exactly as it was.
func TestAdversarialSite(t *testing.T) {
	root := testenv.Tmpfs(t, 64<<20, 0)
	site := filepath.Join(root, "site")
	outside := filepath.Join(root, "outside")
	os.MkdirAll(filepath.Join(outside, "dir", "sub"), 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("user data"), 0o600)
	os.WriteFile(filepath.Join(outside, "dir", "sub", "f"), []byte("more user data"), 0o644)
	bindSrc := filepath.Join(root, "bindsrc")
	os.MkdirAll(bindSrc, 0o755)
	os.WriteFile(filepath.Join(bindSrc, "mounted"), []byte("behind a bind mount"), 0o644)
	os.Mkdir(site, 0o755)
	old := time.Now().Add(-13 * time.Hour)

	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(site, "ln1.out"))
	os.Symlink(filepath.Join(outside, "dir"), filepath.Join(site, "ln2"))
	if err := unix.Mkfifo(filepath.Join(site, "ff.pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	mdir := filepath.Join(site, "mnt")
	os.MkdirAll(filepath.Join(mdir, "bind"), 0o755)
	os.MkdirAll(filepath.Join(mdir, "tmp"), 0o755)
	os.WriteFile(filepath.Join(mdir, "own.log"), []byte("x"), 0o644)
	if err := unix.Mount(bindSrc, filepath.Join(mdir, "bind"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(mdir, "bind"), unix.MNT_DETACH) })
	if err := unix.Mount("tmpfs", filepath.Join(mdir, "tmp"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(mdir, "tmp"), unix.MNT_DETACH) })
	os.WriteFile(filepath.Join(mdir, "tmp", "inner"), []byte("on another fs"), 0o644)
	// A chain deeper than any stack, built with relative mkdirat so no path gets too long.
	deep := filepath.Join(site, "deep")
	os.Mkdir(deep, 0o755)
	fd, err := unix.Open(deep, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	for i := 0; i < 5000; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		// A stale job's tree is old all the way down (a fresh file inside keeps it).
		if err := unix.UtimesNanoAt(fd, ".", ts, 0); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, "d", unix.O_DIRECTORY|unix.O_RDONLY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	unix.UtimesNanoAt(fd, ".", ts, 0)
	unix.Close(fd)
	for _, n := range []string{"ln1.out", "ln2", "ff.pipe", "mnt/own.log", "mnt", "deep"} {
		lage(t, filepath.Join(site, n), old)
	}

	beforeOutside, beforeBind := fingerprint(t, outside), fingerprint(t, bindSrc)
	h := run(t, Options{Sites: []SiteConfig{siteCfg("s", site)}})
	pruneNow(t, h.m, "s")
	waitFor(t, "the expired entries pruned", func() bool {
		return !exists(site, "ln1.out") && !exists(site, "ln2") && !exists(site, "ff.pipe") && !exists(site, "deep")
	})
	if fingerprint(t, outside) != beforeOutside {
		t.Fatal("something outside the site changed")
	}
	if fingerprint(t, bindSrc) != beforeBind {
		t.Fatal("the bind mount's source changed: the prune crossed a mount")
	}
	if b, err := os.ReadFile(filepath.Join(mdir, "tmp", "inner")); err != nil || string(b) != "on another fs" {
		t.Fatalf("the tmpfs inside the site was crossed: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mdir, "bind", "mounted"), &st); err != nil {
		t.Fatalf("the bind mount inside the site is gone: %v", err)
	}
	if exists(site, "mnt/own.log") {
		t.Error("the job directory's own file beside the mounts was not pruned")
	}
}
