package safefs

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNamesAreCheckedBeforeAnySyscall(t *testing.T) {
	r := openRoot(t, t.TempDir())
	for _, name := range []string{"/etc", "..", "a/../b", "a/..", "../x", "a\x00b"} {
		if _, err := r.Remove(context.Background(), name, RemoveOptions{}); err == nil {
			t.Errorf("Remove(%q) succeeded", name)
		}
		if _, err := r.ReadDir(name); err == nil {
			t.Errorf("ReadDir(%q) succeeded", name)
		}
		if _, err := r.Lstat(name); err == nil {
			t.Errorf("Lstat(%q) succeeded", name)
		}
		if _, err := r.Size(context.Background(), name, 0); err == nil {
			t.Errorf("Size(%q) succeeded", name)
		}
		if err := r.Rename(name, "x"); err == nil {
			t.Errorf("Rename(%q) succeeded", name)
		}
	}
	for _, name := range []string{"", ".", "./", ".//."} {
		_, err := r.Remove(context.Background(), name, RemoveOptions{})
		if err == nil || !strings.Contains(err.Error(), "root itself") {
			t.Errorf("Remove(%q) = %v, want a refusal to remove the root", name, err)
		}
	}
	if _, err := os.Stat(r.Path()); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRoot(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o755)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRoot(link); err == nil || !strings.Contains(err.Error(), link) {
		t.Fatalf("OpenRoot(symlink) = %v, want an error naming %s", err, link)
	}
	if _, err := OpenRoot("relative/dir"); err == nil {
		t.Fatal("OpenRoot(relative) succeeded")
	}
	if _, err := OpenRoot(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("OpenRoot(missing) = %v", err)
	}
	r := openRoot(t, real+"/")
	if r.Path() != real || r.Fd() < 0 {
		t.Fatalf("Path %q Fd %d", r.Path(), r.Fd())
	}
	var st unix.Stat_t
	unix.Stat(real, &st)
	if r.Dev() != uint64(st.Dev) {
		t.Fatalf("Dev %d, want %d", r.Dev(), st.Dev)
	}
}

// mixedTree builds every kind of entry Remove must handle, including names that are not
// text, and returns how many non-directories and directories it made.
func mixedTree(t *testing.T, base string) (files, dirs int64) {
	t.Helper()
	names := []string{"plain", "a\nb", "\xff\xfe", " lead space", "-rf", "*"}
	for _, d := range []string{"", "d1", "d1/d2", "d1/\xff dir"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
		if d != "" {
			dirs++
		}
		for _, n := range names {
			writeFile(t, filepath.Join(base, d, n), "content "+n)
			files++
		}
	}
	if err := unix.Mkfifo(filepath.Join(base, "d1", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(base, "d1", "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	os.Symlink("plain", filepath.Join(base, "d1", "rel-link"))
	os.Symlink("/nonexistent/dangling", filepath.Join(base, "dangling"))
	return files + 4, dirs
}

func TestRemoveMixedTree(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "job")
	files, dirs := mixedTree(t, tree)
	r := openRoot(t, root)
	want, err := r.Size(context.Background(), "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want.Files != files || want.Dirs != dirs+1 || want.Partial {
		t.Fatalf("Size = %+v, want %d files %d dirs", want, files, dirs+1)
	}
	st, err := r.Remove(context.Background(), "job", RemoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, tree)
	if st.Files != files || st.Dirs != dirs+1 || st.Skipped != 0 || st.Bytes != want.Bytes {
		t.Fatalf("Stats = %+v, want %d files %d dirs %d bytes", st, files, dirs+1, want.Bytes)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("the root itself went: %v", err)
	}
	var sum Stats
	sum.Add(st)
	sum.Add(Stats{Files: 1, Errors: []error{errors.New("x")}})
	if sum.Files != files+1 || sum.Bytes != st.Bytes || len(sum.Errors) != 1 {
		t.Fatalf("Add: %+v", sum)
	}
}

func TestRemoveSingleEntries(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "x.out"), "out")
	unix.Mkfifo(filepath.Join(root, "x.fifo"), 0o600)
	os.Symlink(filepath.Join(root, "x.out"), filepath.Join(root, "x.link"))
	r := openRoot(t, root)
	for _, n := range []string{"x.fifo", "x.link", "x.out"} {
		st, err := r.Remove(context.Background(), n, RemoveOptions{})
		if err != nil || st.Files != 1 {
			t.Fatalf("Remove(%s) = %+v, %v", n, st, err)
		}
		mustNotExist(t, filepath.Join(root, n))
	}
	_, err := r.Remove(context.Background(), "gone", RemoveOptions{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Remove(missing) = %v, want ErrNotExist", err)
	}
}

func TestReadDirAndLstatKeepRawNames(t *testing.T) {
	root := t.TempDir()
	names := map[string]bool{"a\nb": true, "\xff\xfe": true, "d": true, "l": true}
	writeFile(t, filepath.Join(root, "a\nb"), "12345")
	writeFile(t, filepath.Join(root, "\xff\xfe"), "")
	os.Mkdir(filepath.Join(root, "d"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(root, "l"))
	r := openRoot(t, root)
	ents, err := r.ReadDir("")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(names) {
		t.Fatalf("ReadDir: %d entries, want %d", len(ents), len(names))
	}
	for _, e := range ents {
		if !names[e.Name] {
			t.Errorf("unexpected name %q", e.Name)
		}
		switch e.Name {
		case "l":
			if e.Type != unix.S_IFLNK {
				t.Errorf("symlink reported as type %o (followed?)", e.Type)
			}
		case "d":
			if !e.IsDir() || e.Dev != r.Dev() {
				t.Errorf("dir entry %+v", e)
			}
		case "a\nb":
			if e.Size != 5 || e.Nlink != 1 || e.Mtime.IsZero() {
				t.Errorf("file entry %+v", e)
			}
		}
	}
	e, err := r.Lstat("l")
	if err != nil || e.Type != unix.S_IFLNK {
		t.Fatalf("Lstat(l) = %+v, %v", e, err)
	}
	if _, err := r.ReadDir("l"); err == nil {
		t.Fatal("ReadDir through a symlink succeeded")
	}
}

func TestRenameNoReplaceAndMkdir(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a"), "a")
	writeFile(t, filepath.Join(root, "b"), "b")
	r := openRoot(t, root)
	if err := r.Mkdir(".trash", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.Rename("a", "b"); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("Rename onto an existing entry = %v, want EEXIST", err)
	}
	if err := r.Rename("a", ".trash/a"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, ".trash", "a")); string(b) != "a" {
		t.Fatalf("trash content %q", b)
	}
	os.Symlink("/tmp", filepath.Join(root, "lnk"))
	if err := r.Rename("b", "lnk/b"); err == nil {
		t.Fatal("Rename through a symlink succeeded")
	}
	if err := r.Mkdir("lnk/x", 0o755); err == nil {
		t.Fatal("Mkdir through a symlink succeeded")
	}
}

func TestCheckOwner(t *testing.T) {
	testenvRoot(t)
	base := t.TempDir()
	mk := func(name string, mode uint32, uid int) *Root {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return openRoot(t, p)
	}
	cases := []struct {
		name    string
		mode    uint32
		uid     int
		allowed []uint32
		want    string // substring; "" = fine
	}{
		{"root-755", 0o755, 0, nil, ""},
		{"tmp-like", 0o1777, 0, nil, ""},
		{"site-owner", 0o755, 1000, []uint32{1000}, ""},
		{"wrong-owner", 0o755, 1000, []uint32{1001}, "is owned by uid 1000, not root or site owner (uid 1001)"},
		{"stranger", 0o755, 1000, nil, "is owned by uid 1000, not root"},
		{"world-writable", 0o777, 0, nil, "is group- and world-writable (mode 0777) without the sticky bit"},
		{"group-writable", 0o775, 0, nil, "is group-writable (mode 0775) without the sticky bit"},
		{"both-bad", 0o757, 1000, nil, "owned by uid 1000, not root and is world-writable (mode 0757)"},
	}
	for _, c := range cases {
		r := mk(c.name, c.mode, c.uid)
		got := r.CheckOwner(c.allowed...)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: CheckOwner = %q, want %q", c.name, got, c.want)
		}
		if got != "" && !strings.Contains(got, r.Path()) {
			t.Errorf("%s: reason %q does not name the root", c.name, got)
		}
	}
}
