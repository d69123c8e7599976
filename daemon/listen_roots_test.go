package daemon

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// staleSocket binds a socket at path and leaves it behind as a crash would.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

func isSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// A socket directory reached through a symlink another user made in a sticky shared dir:
// the stale socket of another service in the directory the link points to is neither
// removed nor replaced, and the error says which component and why.
func TestListenUnixNeverThroughASymlinkedParent(t *testing.T) {
	shared, victim, _ := sharedTmp(t)
	theirs := filepath.Join(victim, "s.sock")
	staleSocket(t, theirs)
	asNobody(t, "ln", "-s", victim, filepath.Join(shared, "run"))
	ln, err := ListenUnix(filepath.Join(shared, "run", "s.sock"), 0o660, "")
	if err == nil {
		ln.Close()
	}
	if !errors.Is(err, safefs.ErrUnsafeRoot) || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("listen through a symlinked parent: %v, want a refusal naming the link", err)
	}
	if fi, _ := os.Lstat(theirs); !isSocket(theirs) || fi.Mode().Perm() == 0o660 {
		t.Errorf("the other service's socket in %s was replaced", victim)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 2 { // sandboxd.prom and s.sock
		t.Errorf("entries left in %s: %v", victim, ents)
	}
}

// A world-writable socket directory without the sticky bit (or one beneath such a dir):
// any user could swap the socket or the directory, so sandboxd refuses it at start.
func TestListenUnixRefusesAWorldWritableNonStickyDir(t *testing.T) {
	shared, _, _ := sharedTmp(t)
	open := filepath.Join(shared, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	for _, path := range []string{filepath.Join(open, "s.sock"), filepath.Join(open, "sub", "s.sock")} {
		ln, err := ListenUnix(path, 0o660, "")
		if err == nil {
			ln.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "world-writable") {
			t.Errorf("listen at %s: %v, want a refusal saying the directory is world-writable", path, err)
		}
		if isSocket(path) {
			t.Errorf("a socket was made at %s", path)
		}
	}
}

// A socket directory another user owns (they could swap the socket or the directory at
// will) is refused at start; and when the directory is moved and replaced by a symlink
// to one holding another service's socket of the same name while sandboxd listens (only
// root can do that to a safe directory), Close removes only the socket it bound, beneath
// the directory it bound it in, never the other service's, nor a successor's.
func TestListenUnixSwappedParent(t *testing.T) {
	shared, victim, _ := sharedTmp(t)
	theirs := filepath.Join(victim, "s.sock")
	staleSocket(t, theirs)
	owned := filepath.Join(shared, "owned")
	asNobody(t, "mkdir", owned)
	ln, err := ListenUnix(filepath.Join(owned, "s.sock"), 0o660, "")
	if err == nil {
		ln.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "is owned by uid 65534") {
		t.Errorf("listen in a directory uid 65534 owns: %v, want a refusal naming the owner", err)
	}

	dir := filepath.Join(shared, "run")
	os.Mkdir(dir, 0o755)
	path := filepath.Join(dir, "s.sock")
	ln, err = ListenUnix(path, 0o660, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	moved := filepath.Join(shared, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	os.Symlink(victim, dir)
	ln.Close()
	if !isSocket(theirs) {
		t.Error("Close removed the other service's socket through the swapped directory")
	}
	if isSocket(filepath.Join(moved, "s.sock")) {
		t.Error("Close left its own socket behind in the directory it bound it in")
	}
	os.Remove(dir)
	os.Rename(moved, dir)
	ln2, err := ListenUnix(path, 0o660, "")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	staleSocket(t, path) // a successor's socket at the path, not the one ln2 bound
	ln2.Close()
	if !isSocket(path) {
		t.Error("Close removed a socket it did not bind")
	}
}
