package safefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A Dir reaches only its own direct entries: no nested names, no "..", no symlinked dir.
func TestDirRefusesNamesThatLeaveIt(t *testing.T) {
	root := t.TempDir()
	out, outFile := outside(t)
	before := hashTree(t, out)
	writeFile(t, filepath.Join(root, "site", "a.out"), "x")
	os.Symlink(out, filepath.Join(root, "link"))
	r := openRoot(t, root)
	if _, err := r.OpenDir("link"); err == nil {
		t.Fatal("OpenDir through a symlink succeeded")
	}
	if _, err := r.OpenDir("../x"); err == nil {
		t.Fatal("OpenDir of ../x succeeded")
	}
	d, err := r.OpenDir("site")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	for _, name := range []string{"", ".", "..", "../link", "a/b", outFile, "x\x00y"} {
		if _, err := d.Remove(ctx, name, RemoveOptions{}); err == nil {
			t.Errorf("Dir.Remove(%q) succeeded", name)
		}
		if _, err := d.Lstat(name); err == nil {
			t.Errorf("Dir.Lstat(%q) succeeded", name)
		}
		if _, err := d.RemoveEntry(ctx, Entry{Name: name}, RemoveOptions{}); err == nil {
			t.Errorf("Dir.RemoveEntry(%q) succeeded", name)
		}
	}
	if hashTree(t, out) != before {
		t.Fatal("outside changed")
	}
}

// RemoveEntry trusts the caller's Lstat only as far as the kernel backs it: a name
// swapped for a directory (holding a link out) or for a symlink after the Lstat is removed
// as what it now is, never followed.
func TestDirRemoveEntrySwappedAfterLstat(t *testing.T) {
	root := t.TempDir()
	out, _ := outside(t)
	before := hashTree(t, out)
	site := filepath.Join(root, "site")
	writeFile(t, filepath.Join(site, "a.out"), "aaaa")
	writeFile(t, filepath.Join(site, "b.out"), "bbbb")
	writeFile(t, filepath.Join(site, "c.out"), "cccc")
	r := openRoot(t, root)
	d, err := r.OpenDir("site")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ea, _ := d.Lstat("a.out")
	eb, _ := d.Lstat("b.out")
	ec, err := d.Lstat("c.out")
	if err != nil || ec.IsDir() || ec.Name != "c.out" || ec.Blocks == 0 {
		t.Fatalf("Lstat = %+v, %v", ec, err)
	}
	// a.out becomes a directory with a symlink to the outside in it.
	os.Remove(filepath.Join(site, "a.out"))
	os.Mkdir(filepath.Join(site, "a.out"), 0o755)
	os.Symlink(out, filepath.Join(site, "a.out", "escape"))
	// b.out becomes a symlink to the outside directory.
	os.Remove(filepath.Join(site, "b.out"))
	os.Symlink(out, filepath.Join(site, "b.out"))
	ctx := context.Background()
	st, err := d.RemoveEntry(ctx, ea, RemoveOptions{})
	if err != nil || st.Dirs != 1 || st.Files != 1 {
		t.Fatalf("RemoveEntry(dir swapped in) = %+v, %v", st, err)
	}
	if st, err := d.RemoveEntry(ctx, eb, RemoveOptions{}); err != nil || st.Files != 1 {
		t.Fatalf("RemoveEntry(symlink swapped in) = %+v, %v", st, err)
	}
	st, err = d.RemoveEntry(ctx, ec, RemoveOptions{})
	if err != nil || st.Files != 1 || st.Bytes != ec.Blocks*512 {
		t.Fatalf("RemoveEntry(file) = %+v, %v; want 1 file, %d bytes", st, err, ec.Blocks*512)
	}
	// Gone already: nothing done, no error.
	if st, err := d.RemoveEntry(ctx, ec, RemoveOptions{}); err != nil || st.Files != 0 {
		t.Fatalf("RemoveEntry(gone) = %+v, %v", st, err)
	}
	if ents, _ := os.ReadDir(site); len(ents) != 0 {
		t.Fatalf("site not empty: %v", ents)
	}
	if hashTree(t, out) != before {
		t.Fatal("outside changed")
	}
}

// OnlyOlderThan keeps a young entry; a hard-linked file frees nothing; Dir.Remove removes
// a file and a whole tree.
func TestDirRemoveRules(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "site")
	writeFile(t, filepath.Join(site, "young"), "y")
	writeFile(t, filepath.Join(site, "linked"), "l")
	os.Link(filepath.Join(site, "linked"), filepath.Join(root, "other-name"))
	writeFile(t, filepath.Join(site, "tree", "x", "f"), "f")
	writeFile(t, filepath.Join(site, "plain"), "p")
	writeFile(t, filepath.Join(site, "nested", "g"), "g")
	r := openRoot(t, root)
	// Root.Remove of a nested directory name removes the directory itself too.
	if st, err := r.Remove(context.Background(), "site/nested", RemoveOptions{}); err != nil || st.Dirs != 1 || st.Files != 1 {
		t.Fatalf("Remove(site/nested) = %+v, %v", st, err)
	}
	mustNotExist(t, filepath.Join(site, "nested"))
	d, err := r.OpenDir("site")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	e, _ := d.Lstat("young")
	if st, err := d.RemoveEntry(ctx, e, RemoveOptions{OnlyOlderThan: time.Now().Add(-time.Hour)}); err != nil || st.Skipped != 1 || st.Files != 0 {
		t.Fatalf("young: %+v, %v", st, err)
	}
	e, _ = d.Lstat("linked")
	if st, err := d.RemoveEntry(ctx, e, RemoveOptions{}); err != nil || st.Files != 1 || st.Bytes != 0 {
		t.Fatalf("linked: %+v, %v; want 1 file, 0 bytes", st, err)
	}
	if st, err := d.Remove(ctx, "tree", RemoveOptions{}); err != nil || st.Files != 1 || st.Dirs != 2 {
		t.Fatalf("tree: %+v, %v", st, err)
	}
	if st, err := d.Remove(ctx, "plain", RemoveOptions{}); err != nil || st.Files != 1 || st.Bytes == 0 {
		t.Fatalf("plain: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(site, "young")); err != nil {
		t.Fatal("young entry removed")
	}
	if _, err := os.Stat(filepath.Join(root, "other-name")); err != nil {
		t.Fatal("other hard link lost")
	}
}

// A bind-mounted file stays mounted: Lstat says MountRoot, RemoveEntry skips it, and even
// an Entry that claims a plain file is refused by unlinkat (EBUSY).
func TestDirRemoveEntryMountPoint(t *testing.T) {
	testenvRoot(t)
	root := t.TempDir()
	_, outFile := outside(t)
	site := filepath.Join(root, "site")
	writeFile(t, filepath.Join(site, "passwd"), "placeholder")
	bindMount(t, outFile, filepath.Join(site, "passwd"))
	r := openRoot(t, root)
	d, err := r.OpenDir("site")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	e, err := d.Lstat("passwd")
	if err != nil {
		t.Fatal(err)
	}
	if !e.MountRoot && e.Dev == r.Dev() {
		t.Skip("kernel reports no STATX_ATTR_MOUNT_ROOT")
	}
	if st, err := d.RemoveEntry(ctx, e, RemoveOptions{}); !errors.Is(err, ErrMountPoint) || st.Skipped != 1 {
		t.Fatalf("RemoveEntry(mount) = %+v, %v", st, err)
	}
	e.MountRoot, e.Dev = false, r.Dev() // a stale description: the kernel still refuses
	if st, err := d.RemoveEntry(ctx, e, RemoveOptions{}); !errors.Is(err, ErrMountPoint) || st.Skipped != 1 {
		t.Fatalf("RemoveEntry(stale mount) = %+v, %v", st, err)
	}
	if st, err := d.Remove(ctx, "passwd", RemoveOptions{}); !errors.Is(err, ErrMountPoint) {
		t.Fatalf("Remove(mount) = %+v, %v", st, err)
	}
	if !isMounted(t, filepath.Join(site, "passwd")) {
		t.Fatal("bind mount gone")
	}
	if b, _ := os.ReadFile(outFile); string(b) != "precious" {
		t.Fatalf("outside file changed: %q", b)
	}
}

func TestReadNames(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a", "x"), "x")
	writeFile(t, filepath.Join(root, "b"), "b")
	os.Symlink("/etc", filepath.Join(root, "l"))
	r := openRoot(t, root)
	names, err := r.ReadNames("")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "l"}) {
		t.Fatalf("ReadNames = %q", names)
	}
	if _, err := r.ReadNames("l"); err == nil {
		t.Fatal("ReadNames through a symlink succeeded")
	}
}

// RemoveDir opens first and looks later: a name that is no directory (any more) is removed
// as what it is, a link as a link, and a mount point is refused.
func TestRemoveDirOnWhatIsNotADirectory(t *testing.T) {
	root := t.TempDir()
	out, outFile := outside(t)
	before := hashTree(t, out)
	writeFile(t, filepath.Join(root, "tree", "a", "f"), "f")
	writeFile(t, filepath.Join(root, "file"), "x")
	os.Symlink(out, filepath.Join(root, "dirlink"))
	os.Symlink(outFile, filepath.Join(root, "filelink"))
	r := openRoot(t, root)
	ctx := context.Background()
	if st, err := r.RemoveDir(ctx, "tree", RemoveOptions{}); err != nil || st.Dirs != 2 || st.Files != 1 {
		t.Fatalf("RemoveDir(tree) = %+v, %v", st, err)
	}
	for _, n := range []string{"file", "dirlink", "filelink"} {
		if st, err := r.RemoveDir(ctx, n, RemoveOptions{}); err != nil || st.Files != 1 {
			t.Fatalf("RemoveDir(%s) = %+v, %v", n, st, err)
		}
		mustNotExist(t, filepath.Join(root, n))
	}
	if _, err := r.RemoveDir(ctx, "gone", RemoveOptions{}); err == nil {
		t.Fatal("RemoveDir of a missing name succeeded")
	}
	if hashTree(t, out) != before {
		t.Fatal("outside changed")
	}
	if !testenv.HasRoot(t) {
		return
	}
	mnt := filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	bindMount(t, out, mnt)
	if _, err := r.RemoveDir(ctx, "mnt", RemoveOptions{}); !errors.Is(err, ErrMountPoint) {
		t.Fatalf("RemoveDir(mount point) = %v, want ErrMountPoint", err)
	}
	if hashTree(t, out) != before || !isMounted(t, mnt) {
		t.Fatal("mount crossed")
	}
}

// An empty directory goes by one rmdir; one with something in it, one the age rule keeps,
// and one another user swapped for a link to their victim's empty directory since the
// lstat go to the tree walk, which keeps the young, and never follows the link.
func TestDirRemoveEntryEmptyDirectory(t *testing.T) {
	T := stickyTmpfs(t) // a site others may write to, as /tmp
	site := filepath.Join(T, "site")
	if err := os.Mkdir(site, 0o1777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(site, 0o1777)
	victim := filepath.Join(T, "victim-empty")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"empty", "full", "young", "swapped"} {
		asUser(t, attacker, "mkdir", filepath.Join(site, n))
	}
	asUser(t, attacker, "touch", filepath.Join(site, "full", "inner"))
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{"empty", "full", "swapped"} {
		os.Chtimes(filepath.Join(site, n, "inner"), old, old)
		if err := os.Chtimes(filepath.Join(site, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	r := openRoot(t, T)
	d, err := r.OpenDir("site")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ents := map[string]Entry{}
	for _, n := range []string{"empty", "full", "young", "swapped"} {
		if ents[n], err = d.Lstat(n); err != nil || !ents[n].IsDir() {
			t.Fatalf("Lstat(%s) = %+v, %v", n, ents[n], err)
		}
	}
	asUser(t, attacker, "rmdir", filepath.Join(site, "swapped"))
	asUser(t, attacker, "ln", "-s", victim, filepath.Join(site, "swapped"))
	ctx := context.Background()
	opts := RemoveOptions{OnlyOlderThan: time.Now().Add(-time.Minute)}
	if st, err := d.RemoveEntry(ctx, ents["empty"], opts); err != nil || st.Dirs != 1 || st.Files != 0 {
		t.Errorf("RemoveEntry(empty) = %+v, %v; want one directory", st, err)
	}
	if st, err := d.RemoveEntry(ctx, ents["full"], opts); err != nil || st.Dirs != 1 || st.Files != 1 {
		t.Errorf("RemoveEntry(full, old inside) = %+v, %v; want the file and the directory", st, err)
	}
	if st, err := d.RemoveEntry(ctx, ents["young"], opts); err != nil || st.Dirs != 0 || st.Skipped == 0 {
		t.Errorf("RemoveEntry(young) = %+v, %v; want it kept", st, err)
	}
	if st, err := d.RemoveEntry(ctx, ents["swapped"], opts); err != nil || st.Dirs != 0 {
		t.Errorf("RemoveEntry(swapped for a link) = %+v, %v; want no directory removed", st, err)
	}
	for _, n := range []string{"empty", "full"} {
		mustNotExist(t, filepath.Join(site, n))
	}
	if fi, err := os.Stat(filepath.Join(site, "young")); err != nil || !fi.IsDir() {
		t.Errorf("young directory: %v, %v", fi, err)
	}
	if fi, err := os.Lstat(victim); err != nil || !fi.IsDir() {
		t.Fatalf("the victim's empty directory, behind the swapped-in link: %v, %v", fi, err)
	}
}

// ReadNameInos gives every name with the inode lstat sees, also past one arena block of
// names, and the names stay as they were (the strings share their blocks).
func TestReadNameInos(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20, 0)
	want := map[string]uint64{}
	for i := 0; i < 5000; i++ { // 5,000 names of 18-20 bytes: two arena blocks
		n := fmt.Sprintf("job%06d.callback.json", i)
		writeFile(t, filepath.Join(dir, n), "")
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, n), &st); err != nil {
			t.Fatal(err)
		}
		want[n] = st.Ino
	}
	r := openRoot(t, dir)
	got, err := r.ReadNameInos("")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d names, want %d", len(got), len(want))
	}
	for _, e := range got {
		if ino, ok := want[e.Name]; !ok || ino != e.Ino {
			t.Fatalf("name %q ino %d; want ino %d (known %v)", e.Name, e.Ino, ino, ok)
		}
		delete(want, e.Name)
	}
	if _, err := r.ReadNameInos("nonexistent"); err == nil {
		t.Fatal("ReadNameInos of a missing directory succeeded")
	}
}

// An empty directory that is a mount point is not removed, even described as an ordinary
// one (a stale lstat): rmdir answers EBUSY and the walk refuses the mount.
func TestDirRemoveEntryEmptyMountPoint(t *testing.T) {
	testenvRoot(t)
	root := t.TempDir()
	site := filepath.Join(root, "site")
	victim := filepath.Join(root, "victim")
	for _, d := range []string{filepath.Join(site, "mnt"), victim} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := openRoot(t, root)
	d, err := r.OpenDir("site")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e, err := d.Lstat("mnt") // before the mount: an ordinary empty directory
	if err != nil {
		t.Fatal(err)
	}
	bindMount(t, victim, filepath.Join(site, "mnt"))
	st, err := d.RemoveEntry(context.Background(), e, RemoveOptions{})
	if !errors.Is(err, ErrMountPoint) || st.Dirs != 0 {
		t.Fatalf("RemoveEntry(empty mount point) = %+v, %v; want ErrMountPoint", st, err)
	}
	if !isMounted(t, filepath.Join(site, "mnt")) {
		t.Fatal("the mount is gone")
	}
}
