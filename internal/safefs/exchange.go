package safefs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotOwn is returned by OpenOwnFile for a name that holds a file sandboxd did not make
// for itself: another user's, or one with a second hard link (a link to a file elsewhere).
var ErrNotOwn = errors.New("not a file of this process's user with a single link")

// OpenOwnFile opens name, one component of the root, for reading and writing in place,
// creating it (O_EXCL, perm) when it does not exist. It never follows a link, never
// blocks on a FIFO, and refuses anything but a regular file of the effective user with
// one link (ErrNotRegular, ErrNotOwn): a file rewritten in place must be one sandboxd
// made, not a link another user planted to have root write into a file of theirs.
// created says whether this call made it.
func (r *Root) OpenOwnFile(name string, perm uint32) (f *os.File, created bool, err error) {
	if err := r.component(name); err != nil {
		return nil, false, fmt.Errorf("open: %w", err)
	}
	const flags = unix.O_RDWR | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	fd, err := unix.Openat(r.fd, name, flags, 0)
	if err == unix.ENOENT {
		fd, err = unix.Openat(r.fd, name, flags|unix.O_CREAT|unix.O_EXCL, perm)
		created = err == nil
		if created {
			err = unix.Fchmod(fd, perm) // perm less the umask would not do for another reader
		}
	}
	if err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		return nil, false, fmt.Errorf("open %s: %w", r.display(name), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, false, fmt.Errorf("open %s: %w", r.display(name), err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = ErrNotRegular
	case st.Uid != uint32(unix.Geteuid()) || st.Nlink != 1:
		err = fmt.Errorf("%w (uid %d, %d links)", ErrNotOwn, st.Uid, st.Nlink)
	}
	if err != nil {
		unix.Close(fd)
		return nil, false, fmt.Errorf("open %s: %w", r.display(name), err)
	}
	return os.NewFile(uintptr(fd), r.display(name)), created, nil
}

// Exchange swaps the entries a and b, both one component of the root and both existing,
// atomically (renameat2 RENAME_EXCHANGE, Linux 3.15; tmpfs since 3.17): a reader opening
// either name sees one whole file or the other. It allocates nothing, so it works on a
// full filesystem.
func (r *Root) Exchange(a, b string) error {
	if err := r.component(a); err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	if err := r.component(b); err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	if err := unix.Renameat2(r.fd, a, r.fd, b, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("exchange %s and %s: %w", r.display(a), r.display(b), err)
	}
	return nil
}
