package safefs

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// PathWalk is what WalkPath found of a path.
type PathWalk struct {
	Path string // the path, cleaned
	// Exists: every component exists. Otherwise Deepest is the last component that does,
	// and the rest is only text (nothing there yet can be a link).
	Exists  bool
	Deepest string
	// ID is the identity of Deepest (zero when its filesystem would not say: a FUSE mount
	// of another user without allow_other).
	ID ID
	// FSType is the statfs type of the filesystem holding Deepest's directory entry (its
	// parent's): PROC_SUPER_MAGIC for anything beneath a procfs, wherever mounted.
	FSType int64
}

// WalkPath resolves an absolute path from "/" one component at a time, as OpenRoot does,
// without following a symlink or a magic link in any component, the last one included,
// and without opening anything for reading: every component is opened O_PATH and the
// last one is examined with statx(AT_STATX_DONT_SYNC), so a hung FUSE mount at the path
// answers no request and cannot stall the caller. A component that does not exist ends
// the walk (Exists false). A symlink on the way is refused with an *UnsafeRootError naming
// it (wrapping ErrUnsafeRoot).
func WalkPath(path string) (PathWalk, error) {
	if !filepath.IsAbs(path) {
		return PathWalk{}, fmt.Errorf("%q is not an absolute path", path)
	}
	if strings.IndexByte(path, 0) >= 0 {
		return PathWalk{}, fmt.Errorf("%q contains a NUL byte", path)
	}
	path = filepath.Clean(path)
	pw := PathWalk{Path: path, Deepest: "/"}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return pw, fmt.Errorf("open /: %w", err)
	}
	defer func() { unix.Close(fd) }()
	cur := "/"
	for cur != path {
		rest := strings.TrimPrefix(path[len(cur):], "/")
		name, _, _ := strings.Cut(rest, "/")
		next := filepath.Join(cur, name)
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(fd, &sfs); err != nil {
			return pw, fmt.Errorf("statfs %s: %w", cur, err)
		}
		pw.FSType = int64(sfs.Type)
		flags := uint64(ancestorOpenFlags)
		if next == path {
			flags = unix.O_PATH | unix.O_CLOEXEC // a file is examined too, and a symlink answers ELOOP
		}
		how := unix.OpenHow{Flags: flags, Resolve: walkResolve}
		var child int
		for {
			child, err = unix.Openat2(fd, name, &how)
			if err != unix.EINTR && err != unix.EAGAIN {
				break
			}
		}
		if errors.Is(err, unix.ENOENT) {
			return pw, nil
		}
		if err != nil {
			var st unix.Stat_t
			if (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV)) &&
				unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				target, _ := readlinkAt(fd, name)
				return pw, &UnsafeRootError{Path: path, Component: next,
					Reason: fmt.Sprintf("is a symlink (to %q): the path must be reached without one", target)}
			}
			return pw, fmt.Errorf("%s: %w", next, err)
		}
		unix.Close(fd)
		fd, cur, pw.Deepest = child, next, next
	}
	pw.Exists = true
	var stx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, 0, &stx) == nil {
		pw.ID = ID{Dev: stxDev(&stx), Ino: stx.Ino}
	}
	return pw, nil
}

// RootID is the identity of "/" (zero when it cannot be read).
func RootID() ID {
	var st unix.Stat_t
	if unix.Stat("/", &st) != nil {
		return ID{}
	}
	return idOf(&st)
}

// KernelFS names the kernel's own filesystem the path lies in ("procfs", "sysfs",
// "cgroup2"; "" for any other): such a path is never a place for user data.
func (pw PathWalk) KernelFS() string {
	switch pw.FSType {
	case unix.PROC_SUPER_MAGIC:
		return "procfs"
	case unix.SYSFS_MAGIC:
		return "sysfs"
	case unix.CGROUP2_SUPER_MAGIC, unix.CGROUP_SUPER_MAGIC:
		return "cgroupfs"
	}
	return ""
}
