// Package safefs owns deletion that cannot leave its root. Every operation works beneath an
// open directory fd: paths are resolved by the kernel with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), entries are examined with statx(AT_SYMLINK_NOFOLLOW)
// and removed with unlinkat(dirfd, name), so a symlink is never followed, a mount point is
// never crossed and nothing outside the root can be reached, even when the tree changes while
// it is being walked. This is systemd-tmpfiles' dir_cleanup discipline, with the kernel
// enforcing the "beneath, same mount, no links" part (Linux >= 5.6; statx mount-root
// attributes need >= 5.8).
package safefs

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveFlags keep every lookup beneath the starting fd, off symlinks (also in intermediate
// components) and on the starting mount: a bind mount of the same device is refused too,
// which a st_dev comparison alone would miss.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV

// dirOpenFlags: O_NONBLOCK so that even a FIFO swapped in for a directory could never block
// the open (O_DIRECTORY already refuses it with ENOTDIR before any open happens).
const dirOpenFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// Root is an open directory that every operation stays beneath. Its methods are safe for
// concurrent use as long as Close is not called concurrently with them.
type Root struct {
	fd    int
	path  string
	dev   uint64
	ino   uint64
	uid   uint32
	gid   uint32
	chain []ID // every directory from "/" to the root, the root last, as the walk met them

	// beforeOpen, when set (tests only), runs just before a walk opens the subdirectory rel
	// (relative to the root), so a test can swap it for a symlink at the worst moment.
	beforeOpen func(rel string)
}

// OpenRoot opens the directory at path, which must be absolute, resolving it from "/" one
// component at a time without following a symlink in any component (not only the last),
// and refuses it when the way to it is unsafe (see unsafeTransition): a root is never
// reached through a directory another user can swap. Refusals wrap ErrUnsafeRoot.
func OpenRoot(path string) (*Root, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("open root %q: path is not absolute", path)
	}
	if strings.IndexByte(path, 0) >= 0 {
		return nil, fmt.Errorf("open root %q: path contains a NUL byte", path)
	}
	path = filepath.Clean(path)
	fd, hops, err := walkRoot(path)
	if err != nil {
		return nil, err
	}
	if err := unsafeTransition(path, hops); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open root %s: %w", path, err)
	}
	st := &hops[len(hops)-1].st
	chain := make([]ID, len(hops))
	for i := range hops {
		chain[i] = idOf(&hops[i].st)
	}
	return &Root{fd: fd, path: path, dev: uint64(st.Dev), ino: st.Ino, uid: st.Uid, gid: st.Gid, chain: chain}, nil
}

// ID is the root directory's identity.
func (r *Root) ID() ID { return ID{Dev: r.dev, Ino: r.ino} }

// UID is the root directory's owner when it was opened.
func (r *Root) UID() uint32 { return r.uid }

// GID is the root directory's group when it was opened.
func (r *Root) GID() uint32 { return r.gid }

// Chain is the identity of every directory from "/" to the root (the root last), as the
// walk that opened it met them: the directories the root really lies beneath.
func (r *Root) Chain() []ID { return slices.Clone(r.chain) }

// Close releases the root's fd.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("close root %s: %w", r.path, err)
	}
	return nil
}

// Path is the absolute path the root was opened at (for messages; never used to resolve).
func (r *Root) Path() string { return r.path }

// Dev is the root's st_dev.
func (r *Root) Dev() uint64 { return r.dev }

// Fd is the root's directory fd, owned by the Root.
func (r *Root) Fd() int { return r.fd }

// display names rel beneath the root for messages.
func (r *Root) display(rel string) string {
	if rel == "" {
		return r.path
	}
	return r.path + "/" + rel
}

// cleanName checks a caller's relative name before any syscall: no absolute names, no ".."
// components, no NUL bytes. "" and "." mean the root; redundant slashes and "." components
// are dropped.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("name %q is absolute, want a name relative to the root", name)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("name %q contains a NUL byte", name)
	}
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("name %q has a \"..\" component", name)
		}
		out = append(out, p)
	}
	return strings.Join(out, "/"), nil
}

// splitName splits a cleaned, non-empty name into its parent ("" = root) and last component.
func splitName(name string) (parent, base string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", name
	}
	return name[:i], name[i+1:]
}

// openDirAt opens the directory rel beneath dirfd under the resolve rules.
func openDirAt(dirfd int, rel string) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: dirOpenFlags, Resolve: resolveFlags}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			// EAGAIN: a concurrent rename raced the RESOLVE_BENEATH check; retry as the
			// openat2(2) man page advises.
			continue
		}
		return fd, err
	}
}

// openDir opens rel (cleaned; "" = root) beneath the root. The caller closes the fd.
func (r *Root) openDir(rel string) (int, error) {
	if r.fd < 0 {
		return -1, errors.New("root is closed")
	}
	return openDirAt(r.fd, rel)
}

// openParent opens the parent directory of a cleaned non-empty name.
func (r *Root) openParent(name string) (fd int, base string, err error) {
	parent, base := splitName(name)
	fd, err = r.openDir(parent)
	if err != nil {
		return -1, "", fmt.Errorf("open %s: %w", r.display(parent), err)
	}
	return fd, base, nil
}
