package safefs

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ID is a directory's identity: its device and inode. Two paths name the same directory
// when their IDs are equal, whatever their text says (a symlinked alias, a bind mount).
type ID struct{ Dev, Ino uint64 }

func idOf(st *unix.Stat_t) ID { return ID{Dev: uint64(st.Dev), Ino: st.Ino} }

// ErrUnsafeRoot marks a root refused because of the way to it: a symlink in one of its
// components, or an ancestor that a user other than root and the root's owner could change.
var ErrUnsafeRoot = errors.New("unsafe root")

// UnsafeRootError says which component of a root's path made it unsafe, and why.
type UnsafeRootError struct {
	Path      string // the root as configured
	Component string // the path up to and including the offending component
	Reason    string // e.g. "is a symlink"
}

func (e *UnsafeRootError) Error() string {
	if e.Component == e.Path {
		return fmt.Sprintf("root %s %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("root %s: %s %s", e.Path, e.Component, e.Reason)
}

func (e *UnsafeRootError) Unwrap() error { return ErrUnsafeRoot }

// walkFlags open one component of a root's path: never a symlink (in a trailing position
// RESOLVE_NO_SYMLINKS answers ELOOP, where O_NOFOLLOW|O_DIRECTORY would answer ENOTDIR),
// never a magic link, never "..". Mount points on the way are crossed: /tmp or /home is
// often a mount of its own, and only root can mount; RESOLVE_NO_XDEV applies beneath the
// root, where deletion happens.
const walkResolve = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH

// ancestorOpenFlags: an ancestor is only a place to resolve the next name from, so O_PATH
// (no read permission needed, nothing can block).
const ancestorOpenFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// hop is one directory on the way from "/" to a root, as it was when the walk opened it.
type hop struct {
	path string
	st   unix.Stat_t
}

// walkRoot opens the directory at path, an absolute clean path, from a fd of "/", one
// component at a time, each opened beneath the fd of the one before under walkResolve: no
// component can be a symlink, and every component is the child of the very directory
// examined before it, whatever renames happen meanwhile. It returns the root's fd
// (opened with dirOpenFlags) and every directory from "/" to the root, the root last.
func walkRoot(path string) (int, []hop, error) {
	fd, err := unix.Open("/", dirOpenFlags, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("open root %s: open /: %w", path, err)
	}
	hops := make([]hop, 0, strings.Count(path, "/")+1)
	cur := "/"
	for {
		h := hop{path: cur}
		if err := unix.Fstat(fd, &h.st); err != nil {
			unix.Close(fd)
			return -1, nil, fmt.Errorf("open root %s: fstat %s: %w", path, cur, err)
		}
		if h.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return -1, nil, fmt.Errorf("open root %s: %s: %w", path, cur, unix.ENOTDIR)
		}
		hops = append(hops, h)
		if cur == path {
			return fd, hops, nil
		}
		rest := strings.TrimPrefix(path[len(cur):], "/")
		name, _, _ := strings.Cut(rest, "/")
		next := filepath.Join(cur, name)
		flags := ancestorOpenFlags
		if next == path {
			flags = dirOpenFlags
		}
		how := unix.OpenHow{Flags: uint64(flags), Resolve: walkResolve}
		var child int
		for {
			child, err = unix.Openat2(fd, name, &how)
			if err != unix.EINTR && err != unix.EAGAIN {
				break
			}
		}
		if err != nil {
			err = componentError(fd, path, next, name, err)
			unix.Close(fd)
			return -1, nil, err
		}
		unix.Close(fd)
		fd, cur = child, next
	}
}

// componentError names what stopped the walk at name (in the directory dirfd).
func componentError(dirfd int, path, comp, name string, err error) error {
	var st unix.Stat_t
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := readlinkAt(dirfd, name)
			return fmt.Errorf("open root %s: %w", path, &UnsafeRootError{Path: path, Component: comp,
				Reason: fmt.Sprintf("is a symlink (to %q, owned by uid %d): a root is never reached through a link", target, st.Uid)})
		}
	}
	if errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("open root %s: %w", path, &UnsafeRootError{Path: path, Component: comp, Reason: "is a magic link"})
	}
	return fmt.Errorf("open root %s: %s: %w", path, comp, err)
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// unsafeTransition applies systemd's rule for the way to a root (tmpfiles' and chase()'s
// "unsafe path transition", and tmpreaper's lesson of CVE-2019-3461): every ancestor must
// be owned by root or by the root's owner, and must not be writable by anyone else — not
// world-writable and not group-writable (by a group other than root's) unless the sticky
// bit is set, which keeps others from renaming or removing entries they do not own.
// Anything else lets another user swap a component for a link or another directory
// between two walks. It returns the first problem, nil when the way is safe.
func unsafeTransition(path string, hops []hop) error {
	if len(hops) == 0 {
		return nil
	}
	owner := hops[len(hops)-1].st.Uid
	for _, h := range hops[:len(hops)-1] {
		st := &h.st
		var reason string
		sticky := st.Mode&unix.S_ISVTX != 0
		switch {
		case st.Uid != 0 && st.Uid != owner:
			reason = fmt.Sprintf("is owned by uid %d, neither root nor the root's owner (uid %d), who could replace what lies beneath it", st.Uid, owner)
		case st.Mode&0o002 != 0 && !sticky:
			reason = fmt.Sprintf("is world-writable (mode %04o) without the sticky bit: any user could replace what lies beneath it", st.Mode&0o7777)
		case st.Mode&0o020 != 0 && !sticky && st.Gid != 0:
			reason = fmt.Sprintf("is writable by group %d (mode %04o) without the sticky bit: its members could replace what lies beneath it", st.Gid, st.Mode&0o7777)
		}
		if reason != "" {
			return &UnsafeRootError{Path: path, Component: h.path, Reason: "(an ancestor) " + reason}
		}
	}
	return nil
}
