package safefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is returned for a name that is not a regular file where one is required.
var ErrNotRegular = errors.New("not a regular file")

// OpenParent opens the directory holding the file at path (absolute) as a Root, by the
// same walk as OpenRoot, and returns the file's name in it: sandboxd's own files (the
// reserve file, state documents) are reached as safely as the roots it deletes beneath,
// so a swapped parent cannot turn an unlink or a rename into one somewhere else.
func OpenParent(path string) (*Root, string, error) {
	if !filepath.IsAbs(path) {
		return nil, "", fmt.Errorf("open parent of %q: path is not absolute", path)
	}
	path = filepath.Clean(path)
	dir, base := filepath.Dir(path), filepath.Base(path)
	if base == "/" || base == "." {
		return nil, "", fmt.Errorf("open parent of %s: not a file path", path)
	}
	r, err := OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	return r, base, nil
}

// component checks that name is one plain component of the root.
func (r *Root) component(name string) error {
	if name == "" || name == "." || name == ".." || strings.IndexByte(name, '/') >= 0 || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("name %q is not one component of %s", name, r.path)
	}
	if r.fd < 0 {
		return errors.New("root is closed")
	}
	return nil
}

// RemoveFile unlinks name, one component of the root, when it is a regular file; a link,
// a directory or anything else is refused with ErrNotRegular, a missing name is ENOENT.
// It returns the st_blocks*512 the file held.
func (r *Root) RemoveFile(name string) (int64, error) {
	if err := r.component(name); err != nil {
		return 0, fmt.Errorf("remove: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(r.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, fmt.Errorf("remove %s: %w", r.display(name), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("remove %s: %w", r.display(name), ErrNotRegular)
	}
	if err := unix.Unlinkat(r.fd, name, 0); err != nil {
		return 0, fmt.Errorf("remove %s: %w", r.display(name), err)
	}
	return st.Blocks * 512, nil
}

// CreateFile creates the regular file name, one component of the root, which must not
// exist (O_EXCL: not even as a dangling link), for writing.
func (r *Root) CreateFile(name string, perm uint32) (*os.File, error) {
	if err := r.component(name); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	fd, err := unix.Openat(r.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", r.display(name), err)
	}
	return os.NewFile(uintptr(fd), r.display(name)), nil
}

// ReplaceFile renames oldName over newName, both one component of the root: the atomic
// last step of writing a file through a temp file.
func (r *Root) ReplaceFile(oldName, newName string) error {
	if err := r.component(oldName); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	if err := r.component(newName); err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	if err := unix.Renameat(r.fd, oldName, r.fd, newName); err != nil {
		return fmt.Errorf("rename %s to %s: %w", r.display(oldName), r.display(newName), err)
	}
	return nil
}

// ReadFile reads the regular file name, one component of the root, never following a
// link and never blocking on a FIFO.
func (r *Root) ReadFile(name string) ([]byte, error) {
	if err := r.component(name); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	fd, err := unix.Openat(r.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.display(name), err)
	}
	f := os.NewFile(uintptr(fd), r.display(name))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.display(name), err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w", r.display(name), ErrNotRegular)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.display(name), err)
	}
	return b, nil
}

// Sync fsyncs the root directory (after a rename into it).
func (r *Root) Sync() error {
	if r.fd < 0 {
		return errors.New("root is closed")
	}
	return unix.Fsync(r.fd)
}

// OpenParentToWrite opens the directory holding the file at path like OpenParent, by the
// same walk (no symlink in any component, each component the child of the very directory
// examined before it) and refusing ancestors that anyone or a group may write (without
// the sticky bit), but allowing an ancestor owned by one other user. It is for a file
// sandboxd only creates (O_EXCL|O_NOFOLLOW) and renames over beneath the returned fd:
// the node_exporter textfile, whose directory Debian keeps in /var/lib/prometheus, owned
// by the prometheus user. That one user can at most redirect such a write into a
// directory of their own tree (they cannot move in a directory whose parent they cannot
// write), which they could fill themselves; a world-writable ancestor would let anyone
// move any directory under it into place. Deletions by name keep OpenParent's rule.
func OpenParentToWrite(path string) (*Root, string, error) {
	if !filepath.IsAbs(path) || strings.IndexByte(path, 0) >= 0 {
		return nil, "", fmt.Errorf("open parent of %q: path is not absolute", path)
	}
	path = filepath.Clean(path)
	dir, base := filepath.Dir(path), filepath.Base(path)
	if base == "/" || base == "." {
		return nil, "", fmt.Errorf("open parent of %s: not a file path", path)
	}
	fd, hops, err := walkRoot(dir)
	if err != nil {
		return nil, "", err
	}
	for _, h := range hops[:len(hops)-1] {
		st := &h.st
		sticky := st.Mode&unix.S_ISVTX != 0
		var reason string
		switch {
		case st.Mode&0o002 != 0 && !sticky:
			reason = fmt.Sprintf("is world-writable (mode %04o) without the sticky bit: any user could replace what lies beneath it", st.Mode&0o7777)
		case st.Mode&0o020 != 0 && !sticky && st.Gid != 0:
			reason = fmt.Sprintf("is writable by group %d (mode %04o) without the sticky bit: its members could replace what lies beneath it", st.Gid, st.Mode&0o7777)
		}
		if reason != "" {
			unix.Close(fd)
			return nil, "", fmt.Errorf("open root %s: %w", dir, &UnsafeRootError{Path: dir, Component: h.path, Reason: "(an ancestor) " + reason})
		}
	}
	st := &hops[len(hops)-1].st
	chain := make([]ID, len(hops))
	for i := range hops {
		chain[i] = idOf(&hops[i].st)
	}
	return &Root{fd: fd, path: dir, dev: uint64(st.Dev), ino: st.Ino, uid: st.Uid, gid: st.Gid, chain: chain}, base, nil
}
