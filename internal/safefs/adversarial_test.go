package safefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

func TestSymlinksAreRemovedAsLinks(t *testing.T) {
	out, outFile := outside(t)
	before := hashTree(t, out)
	root := t.TempDir()
	tree := filepath.Join(root, "job")
	writeFile(t, filepath.Join(tree, "f"), "x")
	os.Symlink(outFile, filepath.Join(tree, "to-file"))
	os.Symlink(out, filepath.Join(tree, "to-dir"))
	os.MkdirAll(filepath.Join(tree, "inner"), 0o755)
	os.Symlink(filepath.Join(out, "sub"), filepath.Join(tree, "inner", "to-sub"))
	r := openRoot(t, root)
	// A name whose intermediate component is a symlink is refused, not followed.
	if _, err := r.Remove(context.Background(), "job/to-dir/keep.txt", RemoveOptions{}); err == nil {
		t.Fatal("Remove through a symlinked directory succeeded")
	}
	if _, err := r.Size(context.Background(), "job/to-dir", 0); err != nil {
		t.Fatalf("Size of a symlink: %v", err)
	}
	st, err := r.Remove(context.Background(), "job", RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, tree)
	if st.Files != 4 || st.Dirs != 2 {
		t.Fatalf("Stats %+v, want 4 files (1 file + 3 links) and 2 dirs", st)
	}
	if after := hashTree(t, out); after != before {
		t.Fatal("the outside directory changed")
	}
	// The top name itself a symlink to a directory: the link goes, the directory stays.
	os.Symlink(out, filepath.Join(root, "top-link"))
	if st, err := r.Remove(context.Background(), "top-link", RemoveOptions{}); err != nil || st.Files != 1 {
		t.Fatalf("Remove(top-link) = %+v, %v", st, err)
	}
	if after := hashTree(t, out); after != before {
		t.Fatal("the outside directory changed")
	}
}

func TestMountsAreNotCrossed(t *testing.T) {
	testenv.RequireRoot(t)
	out, outFile := outside(t)
	before := hashTree(t, out)
	root := t.TempDir()
	tree := filepath.Join(root, "job")
	writeFile(t, filepath.Join(tree, "a", "f"), "x")
	// A bind mount of a directory on the same device: st_dev is equal, only the mount
	// table (RESOLVE_NO_XDEV, STATX_ATTR_MOUNT_ROOT) tells.
	bind := filepath.Join(tree, "a", "bind")
	os.Mkdir(bind, 0o755)
	bindMount(t, out, bind)
	// A tmpfs inside the tree: another device.
	tmp := testenv.Tmpfs(t, 1<<20, 0)
	writeFile(t, filepath.Join(tmp, "t.txt"), "tmpfs data")
	tmpBefore := hashTree(t, tmp)
	tmpMnt := filepath.Join(tree, "b", "tmpfs")
	os.MkdirAll(tmpMnt, 0o755)
	bindMount(t, tmp, tmpMnt)
	// A bind-mounted file.
	fileMnt := filepath.Join(tree, "c", "passwd")
	writeFile(t, fileMnt, "placeholder")
	bindMount(t, outFile, fileMnt)

	r := openRoot(t, root)
	var stx unix.Statx_t
	unix.Statx(unix.AT_FDCWD, bind, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx)
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		t.Log("this kernel does not report STATX_ATTR_MOUNT_ROOT; IsMountPoint falls back to mount ids")
	}
	var st unix.Stat_t
	unix.Lstat(bind, &st)
	pfd, _ := unix.Open(filepath.Dir(bind), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if !IsMountPoint(pfd, "bind", st) {
		t.Error("IsMountPoint misses a same-device bind mount")
	}
	unix.Lstat(filepath.Join(tree, "a", "f"), &st)
	if IsMountPoint(pfd, "f", st) {
		t.Error("IsMountPoint calls a plain file a mount point")
	}
	unix.Close(pfd)

	u, err := r.Size(context.Background(), "job", 0)
	if err != nil || u.Files != 1 || u.Dirs != 4 {
		t.Fatalf("Size = %+v, %v; want only the 1 file and 4 dirs of the tree itself", u, err)
	}
	for _, name := range []string{"job/a/bind", "job/b/tmpfs", "job/c/passwd"} {
		if _, err := r.Remove(context.Background(), name, RemoveOptions{}); !errors.Is(err, ErrMountPoint) {
			t.Errorf("Remove(%s) = %v, want ErrMountPoint", name, err)
		}
	}
	// Names that pass through a mount point are refused by RESOLVE_NO_XDEV.
	if _, err := r.Remove(context.Background(), "job/a/bind/keep.txt", RemoveOptions{}); !errors.Is(err, unix.EXDEV) {
		t.Errorf("Remove through a bind mount = %v, want EXDEV", err)
	}
	if _, err := r.ReadDir("job/b/tmpfs"); !errors.Is(err, unix.EXDEV) {
		t.Errorf("ReadDir of a mounted tmpfs = %v, want EXDEV", err)
	}
	stats, err := r.Remove(context.Background(), "job", RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if stats.Skipped != 3 || stats.Files != 1 {
		t.Fatalf("Stats %+v, want 3 skipped mounts and 1 file removed", stats)
	}
	mustNotExist(t, filepath.Join(tree, "a", "f"))
	for _, m := range []string{bind, tmpMnt, fileMnt} {
		if !isMounted(t, m) {
			t.Errorf("%s is no longer mounted", m)
		}
	}
	if hashTree(t, out) != before || hashTree(t, tmp) != tmpBefore {
		t.Fatal("content behind a mount changed")
	}
}

func TestSwapForSymlinkBetweenListingAndOpen(t *testing.T) {
	out, _ := outside(t)
	before := hashTree(t, out)
	root := t.TempDir()
	tree := filepath.Join(root, "job")
	writeFile(t, filepath.Join(tree, "sub", "inner", "f"), "x")
	writeFile(t, filepath.Join(tree, "other", "g"), "y")
	r := openRoot(t, root)
	swapped := 0
	r.beforeOpen = func(rel string) {
		if rel != "job/sub" && rel != "top" {
			return
		}
		p := filepath.Join(root, rel)
		if err := os.RemoveAll(p); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(out, p); err != nil {
			t.Error(err)
		}
		swapped++
	}
	st, err := r.Remove(context.Background(), "job", RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if swapped != 1 {
		t.Fatalf("hook swapped %d times", swapped)
	}
	mustNotExist(t, tree)
	if st.Files != 2 { // other/g and the planted link, as a link
		t.Fatalf("Stats %+v", st)
	}
	// The same at the top: listed as a directory, a symlink by the time it is opened.
	os.Mkdir(filepath.Join(root, "top"), 0o755)
	if _, err := r.Remove(context.Background(), "top", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if hashTree(t, out) != before {
		t.Fatal("the outside directory changed")
	}
}

// TestEvictedAncestorSwapped replaces a shallow directory (whose fd the walk has already
// closed) with a symlink to the outside while the walk is deep: climbing back must not
// follow it; the walk stops with an error and the outside is intact.
func TestEvictedAncestorSwapped(t *testing.T) {
	for _, mode := range []string{"symlink", "directory"} {
		t.Run(mode, func(t *testing.T) { testEvictedAncestorSwapped(t, mode) })
	}
}

func testEvictedAncestorSwapped(t *testing.T, mode string) {
	out, _ := outside(t)
	root := t.TempDir()
	p := filepath.Join(root, "job")
	for i := 0; i < 3*maxOpenFds; i++ {
		p = filepath.Join(p, "d")
	}
	writeFile(t, filepath.Join(p, "leaf"), "x")
	// Make the outside look like the tree so a followed link would find names to delete.
	writeFile(t, filepath.Join(out, "d", "d", "victim"), "v")
	before := hashTree(t, out)
	r := openRoot(t, root)
	r.beforeOpen = func(rel string) {
		if filepath.Base(filepath.Dir(rel)) != "d" || len(rel) < len("job")+2*(3*maxOpenFds) {
			return
		}
		// Deepest open: swap job/d for a link to the outside.
		moved := filepath.Join(root, "moved")
		if _, err := os.Lstat(moved); err == nil {
			return
		}
		if err := os.Rename(filepath.Join(root, "job", "d"), moved); err != nil {
			t.Error(err)
		}
		if mode == "directory" {
			// A look-alike directory in its place: same names, another inode.
			err := os.MkdirAll(filepath.Join(root, "job", strings.Repeat("d/", 3*maxOpenFds)), 0o755)
			if err != nil {
				t.Error(err)
			}
			return
		}
		if err := os.Symlink(out, filepath.Join(root, "job", "d")); err != nil {
			t.Error(err)
		}
	}
	_, err := r.Remove(context.Background(), "job", RemoveOptions{})
	if err == nil {
		t.Fatal("Remove did not notice its ancestor was swapped")
	}
	t.Logf("Remove: %v", err)
	if hashTree(t, out) != before {
		t.Fatal("the outside directory changed")
	}
}

func TestDeviceNodesAndFIFOsAreNeverOpened(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "job"), 0o755)
	if err := unix.Mkfifo(filepath.Join(root, "job", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A node for /dev/null and one for a block device: unlinking them touches no device.
	if err := unix.Mknod(filepath.Join(root, "job", "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(root, "job", "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))); err != nil {
		t.Fatal(err)
	}
	r := openRoot(t, root)
	st, err := r.Remove(context.Background(), "job", RemoveOptions{})
	if err != nil || st.Files != 3 || st.Dirs != 1 {
		t.Fatalf("Remove = %+v, %v", st, err)
	}
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Fatal(err)
	}
}

func TestSizeCountsSingleLinkFilesOnly(t *testing.T) {
	root := t.TempDir()
	out, outFile := outside(t)
	writeFile(t, outFile, string(make([]byte, 64<<10)))
	before := hashTree(t, out)
	tree := filepath.Join(root, "store")
	writeFile(t, filepath.Join(tree, "own"), string(make([]byte, 32<<10)))
	if err := os.Link(outFile, filepath.Join(tree, "linked")); err != nil {
		t.Fatal(err)
	}
	r := openRoot(t, root)
	var st unix.Stat_t
	unix.Stat(filepath.Join(tree, "own"), &st)
	own := st.Blocks * 512
	u, err := r.Size(context.Background(), "store", 0)
	if err != nil {
		t.Fatal(err)
	}
	if u.Bytes != own || u.Files != 2 || u.Dirs != 1 {
		t.Fatalf("Size = %+v, want %d bytes (the hard-linked file frees nothing)", u, own)
	}
	if u, _ := r.Size(context.Background(), "store/linked", 0); u.Bytes != 0 || u.Files != 1 {
		t.Fatalf("Size(linked) = %+v", u)
	}
	s, err := r.Remove(context.Background(), "store", RemoveOptions{})
	if err != nil || s.Bytes != own {
		t.Fatalf("Remove = %+v, %v; want %d bytes freed", s, err, own)
	}
	if hashTree(t, out) != before {
		t.Fatal("the hard-linked outside file changed")
	}
	if u, err := r.Size(context.Background(), "", 2); err != nil || u.Partial {
		t.Fatalf("Size(root) = %+v, %v", u, err)
	}
}
