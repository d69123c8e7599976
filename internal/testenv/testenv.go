// Package testenv gives tests the real OS resources they need (root, tmpfs mounts of a
// fixed size) and enforces the project rule: a test that needs root skips with a clear
// message when not root, except under CI=true, where skipping it is a failure.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireRoot skips t when not root, or fails it under CI=true.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs root (tmpfs mounts, FUSE, other uids) and CI=true forbids skipping it")
	}
	t.Skip("skipping: this test needs root (tmpfs mounts, FUSE, other uids); run as root or under CI=true")
}

// HasRoot is for a test whose last part needs root: true as root; otherwise it logs that
// the part is left out and returns false, or, under CI=true, fails t.
func HasRoot(t testing.TB) bool {
	t.Helper()
	if os.Geteuid() == 0 {
		return true
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the rest of this test needs root and CI=true forbids leaving it out")
	}
	t.Log("not root: the part of this test that needs root is left out")
	return false
}

// RequireCommand skips (or under CI=true fails) when a program the test drives is absent.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs %s, which .ci/run installs; not found: %v", name, err)
	}
	t.Skipf("skipping: %s not installed (make deps installs it)", name)
	return ""
}

// Unavailable skips t because the machine lacks what it needs (the message says what),
// or, under CI=true, where the machine is set up for every test, fails it: no test is
// skipped quietly in CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true forbids skipping", msg)
	}
	t.Skip("skipping: " + msg)
}

// Tmpfs mounts a tmpfs of size bytes and at most inodes inodes (0: kernel default) on a
// fresh directory under t.TempDir() and unmounts it when the test ends, also on failure.
func Tmpfs(t testing.TB, size int64, inodes int) string {
	t.Helper()
	RequireRoot(t)
	dir, err := os.MkdirTemp("", "sandboxd-tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []string{fmt.Sprintf("size=%d", size), "mode=0755"}
	if inodes > 0 {
		opts = append(opts, fmt.Sprintf("nr_inodes=%d", inodes))
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, strings.Join(opts, ",")); err != nil {
		os.Remove(dir) // by path: tests only, never linked into sandboxd; the MkdirTemp above
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
		os.Remove(dir) // by path: as above
	})
	return dir
}

// Fill writes a file of n bytes at path (fully allocated, not sparse) and returns the
// error of the write, so tests can fill a filesystem to ENOSPC.
func Fill(path string, n int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for n > 0 {
		c := int64(len(buf))
		if n < c {
			c = n
		}
		w, err := f.Write(buf[:c])
		n -= int64(w)
		if err != nil {
			return err
		}
	}
	return f.Sync()
}
