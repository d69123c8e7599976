package pressure

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The known way (known.go) under attack: a user who may change a directory on the way to
// a launch's site (uid 65534, owner of a directory in a sticky /tmp-like tmpfs), and root
// mounting on, moving or detaching what the site lies on. After each change the next
// MeasureSite must answer of the filesystem the path leads to then, as a user checking
// the launch's figures against df would.

const attacker = 65534

// asAttacker runs sh -c script as uid 65534.
func asAttacker(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attacker, Gid: attacker}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", attacker, script, err, out)
	}
}

// attackSetup: T, a sticky tmpfs of sizeA as /tmp is, holding the attacker's tree
// T/launcher/a/b/site (every directory theirs); B, a tmpfs of sizeB with the same tree;
// and C, a tmpfs of sizeC mounted on T/m, holding T/m/site (root's).
type attackSetup struct{ T, B, site, msite string }

const sizeC = 24 << 20

func newAttackSetup(t *testing.T) attackSetup {
	s := attackSetup{T: testenv.Tmpfs(t, sizeA, 0), B: testenv.Tmpfs(t, sizeB, 0)}
	must(t, unix.Chmod(s.T, 0o1777))
	must(t, unix.Chmod(s.B, 0o1777))
	asAttacker(t, fmt.Sprintf("mkdir -p %s/launcher/a/b/site %s/launcher/a/b/site", s.T, s.B))
	s.site = filepath.Join(s.T, "launcher", "a", "b", "site")
	m := filepath.Join(s.T, "m")
	must(t, os.Mkdir(m, 0o755))
	must(t, unix.Mount("tmpfs", m, "tmpfs", 0, fmt.Sprintf("size=%d", sizeC)))
	t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
	s.msite = filepath.Join(m, "site")
	must(t, os.Mkdir(s.msite, 0o755))
	return s
}

func TestKnownWayAttacked(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []struct {
		name     string
		path     func(s attackSetup) string
		change   func(t *testing.T, s attackSetup)
		wantPath func(s attackSetup) string // "" any
		wantSize uint64
	}{
		{"the attacker swaps the site for a symlink to another filesystem", func(s attackSetup) string { return s.site },
			func(t *testing.T, s attackSetup) {
				asAttacker(t, fmt.Sprintf("mv %[1]s %[1]s.old && ln -s %[2]s/launcher/a/b/site %[1]s", s.site, s.B))
			}, nil, sizeB},
		{"the attacker swaps a far ancestor (a) for a symlink", func(s attackSetup) string { return s.site },
			func(t *testing.T, s attackSetup) {
				a := filepath.Join(s.T, "launcher", "a")
				asAttacker(t, fmt.Sprintf("mv %[1]s %[1]s.old && ln -s %[2]s/launcher/a %[1]s", a, s.B))
			}, nil, sizeB},
		{"the attacker swaps their top directory in the sticky dir for a symlink", func(s attackSetup) string { return s.site },
			func(t *testing.T, s attackSetup) {
				l := filepath.Join(s.T, "launcher")
				asAttacker(t, fmt.Sprintf("mv %[1]s %[1]s.old && ln -s %[2]s/launcher %[1]s", l, s.B))
			}, nil, sizeB},
		{"the attacker exchanges a far ancestor with a directory leading elsewhere", func(s attackSetup) string { return s.site },
			func(t *testing.T, s attackSetup) {
				// a.new/b/site exists; the swap is by renames only (no symlink): the
				// new site is on T as well, so the figures show nothing and the held
				// fd must be of the new directory (checked below).
				a := filepath.Join(s.T, "launcher", "a")
				asAttacker(t, fmt.Sprintf("mkdir -p %[1]s.new/b/site && mv %[1]s %[1]s.old && mv %[1]s.new %[1]s", a))
			}, func(s attackSetup) string { return s.site }, sizeA},
		{"a tmpfs mounted on the site itself", func(s attackSetup) string { return s.site },
			func(t *testing.T, s attackSetup) {
				must(t, unix.Mount("tmpfs", s.site, "tmpfs", 0, "size=48m"))
				t.Cleanup(func() { unix.Unmount(s.site, unix.MNT_DETACH) })
			}, func(s attackSetup) string { return s.site }, 48 << 20},
		{"the site's filesystem moved away (mount --move)", func(s attackSetup) string { return s.msite },
			func(t *testing.T, s attackSetup) {
				n := filepath.Join(s.T, "n")
				must(t, os.Mkdir(n, 0o755))
				must(t, unix.Mount(filepath.Join(s.T, "m"), n, "", unix.MS_MOVE, ""))
				t.Cleanup(func() { unix.Unmount(n, unix.MNT_DETACH) })
			}, func(s attackSetup) string { return filepath.Join(s.T, "m") }, sizeA},
		{"the site's filesystem detached (umount -l)", func(s attackSetup) string { return s.msite },
			func(t *testing.T, s attackSetup) { must(t, unix.Unmount(filepath.Join(s.T, "m"), unix.MNT_DETACH)) },
			func(s attackSetup) string { return filepath.Join(s.T, "m") }, sizeA},
		{"the site removed and created again", func(s attackSetup) string { return s.msite },
			func(t *testing.T, s attackSetup) {
				must(t, os.Remove(s.msite)) // by path: tests only
				must(t, os.Mkdir(s.msite, 0o755))
			}, func(s attackSetup) string { return s.msite }, sizeC},
		{"the event queue overflows, then the attacker swaps the site", func(s attackSetup) string { return s.site },
			func(t *testing.T, s attackSetup) {
				// max_queued_events events on other names fill the queue; the swap's
				// own events are lost, only IN_Q_OVERFLOW says something was.
				b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
				must(t, err)
				var n int
				fmt.Sscan(strings.TrimSpace(string(b)), &n)
				dir := filepath.Join(s.T, "launcher", "a", "b")
				asAttacker(t, fmt.Sprintf("cd %s && i=0; while [ $i -lt %d ]; do : > f$i; i=$((i+1)); done; mv site site.old && ln -s %s/launcher/a/b/site site",
					dir, n+16, s.B))
			}, nil, sizeB},
	} {
		t.Run(c.name, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				if tryAttack(t, c.path, c.change, c.wantPath, c.wantSize, attempt == 50) {
					return
				}
			}
		})
	}
}

// tryAttack is one try of a case of TestKnownWayAttacked: the site is measured until its
// way is known and held, the change made, and the next MeasureSite checked. False when
// another test's mount kept the way from being known (unless last).
func tryAttack(t *testing.T, path func(attackSetup) string, change func(*testing.T, attackSetup), wantPath func(attackSetup) string,
	wantSize uint64, last bool) bool {
	s := newAttackSetup(t)
	w := New(Options{})
	defer w.mounts.close()
	ctx := context.Background()
	p := path(s)
	for range 2 {
		if _, err := w.MeasureSite(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := w.mounts.knownCounts(); h != 1 || heldFds(t, p) != 1 {
		if !last {
			return false
		}
		t.Fatalf("%s: %d measurements on the known way, %d fds held, want 1 and 1", p, h, heldFds(t, p))
	}
	change(t, s)
	fig, err := w.MeasureSite(ctx, p)
	if err != nil {
		t.Fatalf("after the change: %v", err)
	}
	q := p
	if wantPath != nil {
		q = wantPath(s)
	}
	var sf unix.Statfs_t
	must(t, unix.Statfs(q, &sf))
	if wantPath != nil && fig.Path != wantPath(s) {
		t.Errorf("measured %s, want %s (%+v)", fig.Path, wantPath(s), fig)
	}
	if fig.SizeBytes != wantSize || fig.SizeBytes != sf.Blocks*uint64(sf.Bsize) {
		t.Errorf("measured a filesystem of %d bytes, want %d (statfs of %s now says %d): %+v", fig.SizeBytes, wantSize, q,
			sf.Blocks*uint64(sf.Bsize), fig)
	}
	// No fd is left on a directory the path no longer leads to.
	if n := heldUnder(t, s.T, p); n != 0 {
		t.Errorf("%d fds still held on directories under %s other than %s", n, s.T, p)
	}
	return true
}

// heldUnder counts this process's fds on paths under dir (or deleted ones) except on keep.
func heldUnder(t *testing.T, dir, keep string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || l == keep || !strings.HasPrefix(l, dir+"/") {
			continue
		}
		n++
	}
	return n
}

// TestKnownWayLearnedAcrossAForget: a call that made its watches, then lost them when
// every known way was forgotten (an event read by another call or the tick) and another
// call made a new inotify instance, must not learn its way: no watch of the new instance
// would see a change on it, and its held fd would be measured after the site was
// swapped. The interleaving of the two calls (inline.go's measureInline for site, a
// concurrent call for other) is made step by step.
func TestKnownWayLearnedAcrossAForget(t *testing.T) {
	testenv.RequireRoot(t)
	for attempt := 0; ; attempt++ {
		if tryLearnAcrossAForget(t, attempt == 50) {
			return
		}
	}
}

func tryLearnAcrossAForget(t *testing.T, last bool) bool {
	s := setup{a: testenv.Tmpfs(t, sizeA, 100), b: testenv.Tmpfs(t, sizeB, 100)}
	s.site = filepath.Join(s.a, "x", "site")
	other := filepath.Join(s.a, "y", "other")
	must(t, os.MkdirAll(s.site, 0o755))
	must(t, os.MkdirAll(other, 0o755))
	must(t, os.Mkdir(filepath.Join(s.b, "site"), 0o755))
	w := New(Options{})
	defer w.mounts.close()
	ctx := context.Background()
	if _, err := w.MeasureSite(ctx, other); err != nil { // other's way watched
		t.Fatal(err)
	}
	if !w.mounts.fresh() {
		t.Fatal("mount table not current")
	}
	gen := tableAt(w)
	// The site's call: its watches, then (before its lookup ends) other's name changes,
	// the tick reads that and forgets, and other's next call makes a new instance.
	deepest, found, ino := w.mounts.watchWay(s.site)
	must(t, os.Rename(other, other+".2")) // by path: tests only
	must(t, os.Rename(other+".2", other)) // by path: tests only
	w.mounts.tickKnown()
	if _, err := w.MeasureSite(ctx, other); err != nil {
		t.Fatal(err)
	}
	// The rest of the site's call (measureInline after watchWay).
	mnt, ok := w.mounts.localMount(s.site)
	fd, err := unix.Openat2(unix.AT_FDCWD, s.site, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	must(t, err)
	var stx unix.Statx_t
	must(t, unix.Statx(fd, "", unix.AT_EMPTY_PATH, 0, &stx))
	var sf unix.Statfs_t
	must(t, unix.Fstatfs(fd, &sf))
	if !ok || tableAt(w) != gen {
		unix.Close(fd)
		if !last {
			return false // another test's mount: the table was reloaded
		}
		t.Fatal("the mount table changed in every try")
	}
	if !w.mounts.learn(s.site, true, s.site, mnt, stx.Dev_major, stx.Dev_minor, sf.Fsid, fd, deepest, found, ino) {
		unix.Close(fd)
	}
	// The attacker's swap: the site becomes a symlink to B.
	must(t, os.Rename(s.site, s.site+".old")) // by path: tests only
	must(t, os.Symlink(filepath.Join(s.b, "site"), s.site))
	fig, err := w.MeasureSite(ctx, s.site)
	if err != nil {
		t.Fatal(err)
	}
	if fig.SizeBytes != sizeB {
		t.Errorf("after the site became a symlink to a %d-byte tmpfs, MeasureSite says %d bytes (%s on %s): measured on a way learnt without watches",
			sizeB, fig.SizeBytes, fig.Path, fig.Mountpoint)
	}
	return true
}
