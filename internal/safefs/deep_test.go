package safefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// deepChain makes base/d/d/.../d (depth levels) with a file at every level, through
// fds, since its path is far longer than PATH_MAX.
func deepChain(t testing.TB, base string, depth int) {
	t.Helper()
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
}

func openFds(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDeepChainWithFewFds removes a 5,000-deep chain with RLIMIT_NOFILE at 64: no
// recursion to overflow, no fd per level, and a path far beyond PATH_MAX.
func TestDeepChainWithFewFds(t *testing.T) {
	const depth = 5000
	testenv.RequireRoot(t)
	root := testenv.Tmpfs(t, 64<<20, 0) // ext4 would spend seconds just building the chain
	deepChain(t, filepath.Join(root, "deep"), depth)
	r := openRoot(t, root)

	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	base := openFds(t)
	if base > 48 {
		t.Skipf("%d fds already open; cannot lower the limit to 64", base)
	}
	low := unix.Rlimit{Cur: 64, Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })

	peak := 0
	r.beforeOpen = func(string) {
		if n := openFds(t); n > peak {
			peak = n
		}
	}
	u, err := r.Size(context.Background(), "deep", 0)
	if err != nil || u.Files != depth || u.Dirs != depth+1 || u.Partial {
		t.Fatalf("Size = %+v, %v", u, err)
	}
	st, err := r.Remove(context.Background(), "deep", RemoveOptions{})
	unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != depth || st.Dirs != depth+1 {
		t.Fatalf("Stats %+v", st)
	}
	mustNotExist(t, filepath.Join(root, "deep"))
	// +1 for ReadDir's own fd on /proc/self/fd, +2 for the walk's parent and a reopen.
	if peak-base > maxOpenFds+3 {
		t.Fatalf("walk held %d fds at its peak (base %d)", peak-base, base)
	}
	t.Logf("peak fds held by the walk: %d", peak-base)
}

func TestContextStopsBetweenEntries(t *testing.T) {
	root := t.TempDir()
	for d := 0; d < 20; d++ {
		for f := 0; f < 20; f++ {
			writeFile(t, filepath.Join(root, "tree", string(rune('a'+d)), string(rune('a'+f))), "x")
		}
	}
	r := openRoot(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opens := 0
	r.beforeOpen = func(string) {
		if opens++; opens == 5 {
			cancel()
		}
	}
	st, err := r.Remove(ctx, "tree", RemoveOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Remove = %v, want context.Canceled", err)
	}
	if st.Files < 40 || st.Files >= 400 {
		t.Fatalf("Stats %+v: want the work done before the cancel, and not all of it", st)
	}
	u, _ := r.Size(context.Background(), "tree", 0)
	if u.Files+st.Files != 400 {
		t.Fatalf("%d removed + %d left != 400", st.Files, u.Files)
	}
	r.beforeOpen = nil
	// A deadline already past: nothing is done, and Size says Partial.
	dead, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if u, err := r.Size(dead, "tree", 0); err != nil || !u.Partial {
		t.Fatalf("Size past deadline = %+v, %v", u, err)
	}
	if u, err := r.Size(context.Background(), "tree", 10); err != nil || !u.Partial || u.Files+u.Dirs != 10 {
		t.Fatalf("Size with budget 10 = %+v, %v", u, err)
	}
	if _, err := r.Remove(context.Background(), "tree", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, filepath.Join(root, "tree"))
}

func TestOnlyOlderThan(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-48 * time.Hour)
	writeFile(t, filepath.Join(root, "j", "old"), "o")
	writeFile(t, filepath.Join(root, "j", "new"), "n")
	writeFile(t, filepath.Join(root, "j", "olddir", "old"), "o")
	os.Chtimes(filepath.Join(root, "j", "old"), old, old)
	os.Chtimes(filepath.Join(root, "j", "olddir", "old"), old, old)
	os.Chtimes(filepath.Join(root, "j", "olddir"), old, old)
	r := openRoot(t, root)
	st, err := r.Remove(context.Background(), "j", RemoveOptions{OnlyOlderThan: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || st.Dirs != 1 || st.Skipped != 2 { // kept: "new" and j itself
		t.Fatalf("Stats %+v", st)
	}
	if _, err := os.Stat(filepath.Join(root, "j", "new")); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, filepath.Join(root, "j", "olddir"))
}

// TestMakeWritable empties a read-only tree (like the Go module cache) as its owner:
// the test thread drops to fsuid 65534, which also drops CAP_DAC_OVERRIDE, so
// permissions apply as they would to an unprivileged daemon.
func TestMakeWritable(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Tmpfs(t, 4<<20, 0)
	site := filepath.Join(dir, "site")
	for _, p := range []string{"mod/a@v1/x.go", "mod/a@v1/sub/y.go", "mod/b@v2/z.go"} {
		writeFile(t, filepath.Join(site, p), "package x")
	}
	filepath.Walk(site, func(p string, info os.FileInfo, err error) error {
		os.Lchown(p, 65534, 65534)
		return nil
	})
	readOnly := func() {
		filepath.Walk(filepath.Join(site, "mod"), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				os.Chmod(p, 0o555)
			}
			return nil
		})
	}
	readOnly()
	r := openRoot(t, site)
	asNobody := func(opts RemoveOptions) (Stats, error) {
		runtime.LockOSThread()
		unix.Setfsuid(65534)
		st, err := r.Remove(context.Background(), "mod", opts)
		unix.Setfsuid(0)
		if prev, _ := unix.SetfsuidRetUid(0); prev != 0 {
			t.Fatalf("could not return to fsuid 0 (at %d)", prev)
		}
		runtime.UnlockOSThread()
		return st, err
	}
	st, err := asNobody(RemoveOptions{})
	if !errors.Is(err, unix.EACCES) || st.Files != 0 {
		t.Fatalf("Remove without MakeWritable = %+v, %v; want EACCES", st, err)
	}
	st, err = asNobody(RemoveOptions{MakeWritable: true})
	if err != nil || st.Files != 3 || st.Dirs != 4 {
		t.Fatalf("Remove with MakeWritable = %+v, %v", st, err)
	}
	mustNotExist(t, filepath.Join(site, "mod"))
}
