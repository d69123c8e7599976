package fusetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

func mountpoint(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Once the credential expires, lookup, readdir and create answer EACCES while the root's
// getattr still answers; a restart with renewed keys ends it.
func TestExpiredCredentialDeniesButStatWorks(t *testing.T) {
	testenv.RequireRoot(t)
	dir := mountpoint(t)
	cred := filepath.Join(t.TempDir(), "cred.json")
	if err := WriteCred(cred, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	s := Start(t, dir, Options{Credential: cred})
	if _, ok := s.Mounted(); !ok {
		t.Fatal("not mounted")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("root stat: %v, want it to answer", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "x")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("lookup: %v, want EACCES", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "y"), nil, 0o644); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("create: %v, want EACCES", err)
	}
	argv := s.RemountCommand(time.Hour)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("remount command: %v %s", err, out)
	}
	if _, ok := s.Mounted(); !ok {
		t.Fatal("no FUSE mount on top after the restart")
	}
	if err := os.WriteFile(filepath.Join(dir, "y"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(s.Backing, "y")); err != nil || string(b) != "ok" {
		t.Fatalf("backing file: %q %v", b, err)
	}
}

// Kill leaves a dead mount (ENOTCONN); Restart brings it back.
func TestKillAndRestart(t *testing.T) {
	testenv.RequireRoot(t)
	dir := mountpoint(t)
	s := Start(t, dir, Options{})
	s.Kill()
	// A request caught while the server's /dev/fuse closes gets ECONNABORTED, later ones
	// ENOTCONN: both say the daemon is dead (FIELD-NOTES; mountwatch classifies both as
	// disconnected).
	if _, err := os.Lstat(filepath.Join(dir, "x")); !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		t.Fatalf("lookup on a killed server: %v, want ENOTCONN or ECONNABORTED", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lookup after the restart: %v, want ENOENT", err)
	}
}

// A hung server traps a caller (in a child process) until the connection is aborted.
func TestHangThenAbortFreesCaller(t *testing.T) {
	testenv.RequireRoot(t)
	dir := mountpoint(t)
	s := Start(t, dir, Options{})
	s.Hang()
	cmd := exec.Command("ls", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("ls on a hung mount returned: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("ls succeeded on an aborted mount")
		}
	case <-ctx.Done():
		t.Fatal("the abort did not free the caller")
	}
}

// Every node beneath the root is behind the gate too: a lookup in a directory opened
// before the credential expired is denied once it has (the kernel asks that directory's
// node, not the root's).
func TestExpiredCredentialDeniesBelowTheRoot(t *testing.T) {
	testenv.RequireRoot(t)
	dir := mountpoint(t)
	cred := filepath.Join(t.TempDir(), "cred.json")
	if err := WriteCred(cred, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	Start(t, dir, Options{Credential: cred, Reload: true})
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub, err := os.Open(filepath.Join(dir, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := syscall.Openat(int(sub.Fd()), "absent", syscall.O_RDONLY, 0); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup below the root with a valid credential: %v, want ENOENT", err)
	}
	if err := WriteCred(cred, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Openat(int(sub.Fd()), "never-looked-up", syscall.O_RDONLY, 0); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("lookup below the root after expiry: %v, want EACCES", err)
	}
}
