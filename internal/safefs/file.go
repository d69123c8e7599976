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
