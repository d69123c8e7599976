package safefs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// attacker is the uid that plays another user of the machine.
const attacker = 65534

// stickyTmpfs is a throwaway tmpfs with mode 1777, as /tmp is: every user may create
// entries in it, only their owner may rename or remove them.
func stickyTmpfs(t *testing.T) string {
	t.Helper()
	dir := testenv.Tmpfs(t, 8<<20, 0)
	if err := unix.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asUser runs argv as uid (and gid) in a child process: the attacker's own actions, with
// no privilege of the test.
func asUser(t *testing.T, uid int, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", uid, strings.Join(argv, " "), err, out)
	}
}

func mustRefuse(t *testing.T, path, component, reason string) {
	t.Helper()
	r, err := OpenRoot(path)
	if err == nil {
		r.Close()
		t.Fatalf("OpenRoot(%s) succeeded, want a refusal naming %s", path, component)
	}
	var ue *UnsafeRootError
	if !errors.Is(err, ErrUnsafeRoot) || !errors.As(err, &ue) || ue.Component != component || !strings.Contains(err.Error(), reason) {
		t.Fatalf("OpenRoot(%s) = %v, want an unsafe-root error at %s saying %q", path, err, component, reason)
	}
}

// The reproduction of issue 9: another user's symlinks in a parent directory of a site and
// of a cache are followed no more.
func TestOpenRootRefusesSymlinkedAncestors(t *testing.T) {
	T := stickyTmpfs(t)
	writeFile(t, filepath.Join(T, "home", "work.txt"), "the user's work")
	writeFile(t, filepath.Join(T, "outside", "victim", "cache", "data"), "root's data")
	before := hashTree(t, T)
	asUser(t, attacker, "ln", "-s", T, filepath.Join(T, "anc2"))
	asUser(t, attacker, "ln", "-s", filepath.Join(T, "outside", "victim"), filepath.Join(T, "anc3"))
	mustRefuse(t, filepath.Join(T, "anc2", "home"), filepath.Join(T, "anc2"), "is a symlink")
	mustRefuse(t, filepath.Join(T, "anc3", "cache"), filepath.Join(T, "anc3"), "is a symlink")
	// The final component a symlink: refused as well.
	mustRefuse(t, filepath.Join(T, "anc2"), filepath.Join(T, "anc2"), "is a symlink")
	// A link deeper down, not in the first component.
	asUser(t, attacker, "mkdir", filepath.Join(T, "mine"))
	asUser(t, attacker, "ln", "-s", T, filepath.Join(T, "mine", "up"))
	mustRefuse(t, filepath.Join(T, "mine", "up", "home"), filepath.Join(T, "mine", "up"), "is a symlink")
	// A magic link: /proc/self/root leads to "/" without being a plain symlink.
	if _, err := OpenRoot("/proc/self/root" + T); err == nil {
		t.Fatal("OpenRoot through /proc/self/root succeeded")
	}
	// The real roots still open.
	r := openRoot(t, filepath.Join(T, "home"))
	if r.UID() != 0 || len(r.Chain()) != strings.Count(filepath.Join(T, "home"), "/")+1 {
		t.Fatalf("root uid %d chain %v", r.UID(), r.Chain())
	}
	os.Remove(filepath.Join(T, "anc2"))
	os.Remove(filepath.Join(T, "anc3"))
	os.RemoveAll(filepath.Join(T, "mine"))
	if hashTree(t, T) != before {
		t.Fatal("something changed on the tmpfs")
	}
}

// An ancestor that a user other than root and the root's owner can change is an unsafe
// transition, systemd's rule: owned by another user, world-writable or group-writable
// without the sticky bit.
func TestOpenRootRefusesUnsafeAncestors(t *testing.T) {
	T := stickyTmpfs(t)
	// The attacker's own directory, with a root-owned directory planted... by root.
	asUser(t, attacker, "mkdir", "-m", "0755", filepath.Join(T, "theirs"))
	os.Mkdir(filepath.Join(T, "theirs", "site"), 0o755)
	mustRefuse(t, filepath.Join(T, "theirs", "site"), filepath.Join(T, "theirs"), "owned by uid 65534")

	os.Mkdir(filepath.Join(T, "open"), 0o777)
	os.Chmod(filepath.Join(T, "open"), 0o777) // past the umask
	os.Mkdir(filepath.Join(T, "open", "site"), 0o755)
	mustRefuse(t, filepath.Join(T, "open", "site"), filepath.Join(T, "open"), "world-writable")

	os.Mkdir(filepath.Join(T, "group"), 0o775)
	os.Chmod(filepath.Join(T, "group"), 0o775)
	os.Chown(filepath.Join(T, "group"), 0, 4242)
	os.Mkdir(filepath.Join(T, "group", "site"), 0o755)
	mustRefuse(t, filepath.Join(T, "group", "site"), filepath.Join(T, "group"), "writable by group 4242")

	// Safe ways: root's group, a sticky directory, the root's owner's own directories.
	os.Chown(filepath.Join(T, "group"), 0, 0)
	openRoot(t, filepath.Join(T, "group", "site"))
	unix.Chmod(filepath.Join(T, "open"), 0o1777)
	openRoot(t, filepath.Join(T, "open", "site"))
	asUser(t, attacker, "mkdir", "-p", filepath.Join(T, "theirs", "own", "cache"))
	if r := openRoot(t, filepath.Join(T, "theirs", "own", "cache")); r.UID() != attacker {
		t.Fatalf("uid %d", r.UID())
	}
}

// A walk holds each directory while it opens the next: a swap after the walk cannot move
// the open root, and the next walk sees the swap.
func TestAncestorSwappedAfterOpen(t *testing.T) {
	T := stickyTmpfs(t)
	writeFile(t, filepath.Join(T, "a", "site", "job.out"), "job")
	writeFile(t, filepath.Join(T, "victim", "site", "precious"), "precious")
	victimBefore := hashTree(t, filepath.Join(T, "victim"))
	r := openRoot(t, filepath.Join(T, "a", "site"))
	if err := os.Rename(filepath.Join(T, "a"), filepath.Join(T, "a.old")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(T, "victim"), filepath.Join(T, "a"))
	es, err := r.ReadDir("")
	if err != nil || len(es) != 1 || es[0].Name != "job.out" {
		t.Fatalf("the open root lists %v, %v; want the original job.out", es, err)
	}
	mustRefuse(t, filepath.Join(T, "a", "site"), filepath.Join(T, "a"), "is a symlink")
	if hashTree(t, filepath.Join(T, "victim")) != victimBefore {
		t.Fatal("victim changed")
	}
}

func TestCheckGuardsByIdentity(t *testing.T) {
	testenv.RequireRoot(t)
	T := stickyTmpfs(t)
	home := filepath.Join(T, "home")
	writeFile(t, filepath.Join(home, "alice", "work.txt"), "work")
	os.MkdirAll(filepath.Join(T, "state", "sandboxd"), 0o700)
	protect := []Guarded{{Path: home, What: "the protected path " + home, Inside: true}}
	state := []Guarded{{Path: filepath.Join(T, "state", "sandboxd"), What: "the state directory"}}

	// The same directory reached through a bind mount: its text says nothing.
	alias := filepath.Join(T, "alias")
	os.Mkdir(alias, 0o755)
	bindMount(t, home, alias)
	for path, want := range map[string]string{
		filepath.Join(alias, "alice"): "lies inside the protected path",
		alias:                         "is the protected path",
		T:                             "contains the protected path",
		filepath.Join(T, "state"):     "",
	} {
		r := openRoot(t, path)
		if got := r.CheckGuards(protect); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("CheckGuards(%s) = %q, want %q", path, got, want)
		}
	}
	// A bind mount of the tmpfs's root inside home: by its text it lies inside home, by
	// its identity it is T and contains home.
	top := filepath.Join(home, "alice", "mnt")
	os.Mkdir(top, 0o755)
	bindMount(t, T, top)
	if got := openRoot(t, top).CheckGuards(protect); !strings.Contains(got, "contains the protected path") {
		t.Errorf("CheckGuards(bind of the top inside home) = %q", got)
	}
	// The guarded path itself a symlink: it guards what it names.
	link := filepath.Join(T, "plink")
	os.Symlink(home, link)
	viaLink := []Guarded{{Path: link, What: "the protected path " + link, Inside: true}}
	if got := openRoot(t, filepath.Join(home, "alice")).CheckGuards(viaLink); !strings.Contains(got, "lies inside") {
		t.Errorf("CheckGuards through a protected symlink = %q", got)
	}
	// The state dir: a root that is it or contains it is refused; one inside it is not.
	if got := openRoot(t, filepath.Join(T, "state")).CheckGuards(state); !strings.Contains(got, "contains the state directory") {
		t.Errorf("CheckGuards(state's parent) = %q", got)
	}
	os.Mkdir(filepath.Join(T, "state", "sandboxd", "x"), 0o700)
	if got := openRoot(t, filepath.Join(T, "state", "sandboxd", "x")).CheckGuards(state); got != "" {
		t.Errorf("CheckGuards(inside the state dir) = %q", got)
	}
	// A guarded path that does not exist guards nothing yet.
	if got := openRoot(t, T).CheckGuards([]Guarded{{Path: filepath.Join(T, "nope"), What: "x", Inside: true}}); got != "" {
		t.Errorf("CheckGuards(missing) = %q", got)
	}
}

func TestLocateFollowsTheKernel(t *testing.T) {
	testenv.RequireRoot(t)
	T := stickyTmpfs(t)
	os.MkdirAll(filepath.Join(T, "a", "b"), 0o755)
	os.Mkdir(filepath.Join(T, "m"), 0o755)
	bindMount(t, filepath.Join(T, "a", "b"), filepath.Join(T, "m"))
	viaBind, err := Locate(filepath.Join(T, "m"))
	if err != nil {
		t.Fatal(err)
	}
	r := openRoot(t, filepath.Join(T, "a", "b"))
	// Same directory, but found from the mount: its parent is T, not T/a.
	if viaBind[len(viaBind)-1] != r.ID() {
		t.Fatalf("Locate(bind) ends at %v, want %v", viaBind[len(viaBind)-1], r.ID())
	}
	rt := openRoot(t, T)
	if viaBind[len(viaBind)-2] != rt.ID() {
		t.Fatalf("Locate(bind)'s parent is %v, want T %v", viaBind[len(viaBind)-2], rt.ID())
	}
	if c := r.Chain(); c[len(c)-2] == rt.ID() {
		t.Fatal("the walk's chain skipped T/a")
	}
}
