package safefs

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// run drives the stack until it is empty: descend into the next queued subdirectory of
// the deepest frame, or, when it has none left, pop it and remove it from its parent.
func (w *walker) run() error {
	for len(w.frames) > 0 {
		top := len(w.frames) - 1
		f := &w.frames[top]
		if n := len(f.subdirs); n > 0 {
			name := f.subdirs[n-1]
			f.subdirs = f.subdirs[:n-1]
			if err := w.tick(); err != nil {
				return err
			}
			if err := w.descend(top, name); err != nil {
				return err
			}
			continue
		}
		if err := w.pop(); err != nil {
			return err
		}
	}
	return nil
}

// descend opens subdirectory name of frame idx (the deepest) and pushes it. A mount point
// (EXDEV from RESOLVE_NO_XDEV) is skipped; an entry that is no longer a directory (swapped
// for a symlink since it was listed: ELOOP from RESOLVE_NO_SYMLINKS|O_NOFOLLOW) is handled
// as the link or file it now is.
func (w *walker) descend(idx int, name string) error {
	if w.r.beforeOpen != nil {
		w.r.beforeOpen(w.relPath(idx, name))
	}
	pfd := w.frames[idx].fd
	fd, err := openDirAt(pfd, name)
	switch {
	case err == nil:
	case errors.Is(err, unix.EXDEV):
		w.stats.Skipped++
		w.keep(idx)
		return nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		raw := append([]byte(name), 0)
		if w.nonDir(idx, pfd, &raw[0], raw) {
			// A directory again: it is being swapped back and forth; leave it.
			w.fail(fmt.Errorf("open %s: changed while walking", w.r.display(w.relPath(idx, name))))
			w.keep(idx)
		}
		return nil
	case errors.Is(err, unix.ENOENT):
		return nil
	default:
		w.fail(fmt.Errorf("open %s: %w", w.r.display(w.relPath(idx, name)), err))
		w.keep(idx)
		return nil
	}
	var stx unix.Statx_t
	if err := fstatx(fd, &stx); err != nil {
		unix.Close(fd)
		w.fail(fmt.Errorf("statx %s: %w", w.r.display(w.relPath(idx, name)), err))
		w.keep(idx)
		return nil
	}
	if stxDev(&stx) != w.r.dev || isMountRoot(&stx) {
		// RESOLVE_NO_XDEV already refuses mount points; this catches a btrfs subvolume
		// (own st_dev, no mount), which systemd-tmpfiles skips too.
		unix.Close(fd)
		w.stats.Skipped++
		w.keep(idx)
		return nil
	}
	return w.push(fd, name, &stx)
}

// pop closes the deepest frame and, when removing, rmdirs it from its parent (reopening
// the parent if its fd was evicted).
func (w *walker) pop() error {
	top := len(w.frames) - 1
	child := w.frames[top]
	if child.fd >= 0 {
		unix.Close(child.fd)
	}
	w.frames = w.frames[:top]
	pfd := w.pfd
	if top > 0 {
		if top-1 < w.lowOpen {
			if err := w.reopen(top - 1); err != nil {
				return err
			}
		}
		pfd = w.frames[top-1].fd
	}
	if !w.remove {
		return nil
	}
	if child.young {
		w.stats.Skipped++
		w.keep(top - 1)
		return nil
	}
	base := child.name
	if top == 0 {
		// Frame 0's name is its whole path beneath the root, but w.pfd is its parent:
		// rmdir by the last component (a nested name used to leave its emptied top dir).
		_, base = splitName(child.name)
	}
	err := unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
	switch {
	case err == nil:
		w.stats.Dirs++
	case errors.Is(err, unix.ENOENT):
	case errors.Is(err, unix.ENOTEMPTY) && child.kept:
		w.keep(top - 1) // expected: something beneath was left on purpose or reported
	default:
		w.keep(top - 1)
		name := child.name
		if top > 0 {
			name = w.relPath(top-1, child.name)
		}
		w.fail(fmt.Errorf("rmdir %s: %w", w.r.display(name), err))
	}
	return nil
}

// reopen gives frames lo..t (t the deepest, all evicted) fresh fds: one walk from the
// root by name, in PATH_MAX-sized chunks, under the resolve rules; each reopened
// directory must be the inode that was listed, or the walk stops.
func (w *walker) reopen(t int) error {
	lo := max(0, t-maxOpenFds+2) // leave room to descend again without evicting at once
	parts := make([]string, 0, lo+8)
	if w.frames[0].name != "" {
		parts = append(parts, strings.Split(w.frames[0].name, "/")...)
	}
	for i := 1; i <= lo; i++ {
		parts = append(parts, w.frames[i].name)
	}
	fd, err := openChain(w.r.fd, parts)
	for i := lo; ; i++ {
		if err == nil {
			err = w.verify(fd, i)
		}
		if err != nil {
			return fmt.Errorf("reopen %s: %w", w.r.display(w.relPath(i, "")), err)
		}
		w.frames[i].fd = fd
		if i == t {
			break
		}
		fd, err = openDirAt(fd, w.frames[i+1].name)
	}
	w.lowOpen = lo
	return nil
}

// verify checks that fd is still the directory frame i listed.
func (w *walker) verify(fd, i int) error {
	var stx unix.Statx_t
	if err := fstatx(fd, &stx); err != nil {
		unix.Close(fd)
		return err
	}
	if stxDev(&stx) != w.frames[i].dev || stx.Ino != w.frames[i].ino {
		unix.Close(fd)
		return errors.New("directory was replaced during the walk")
	}
	return nil
}

// openChain opens the directory at parts beneath dirfd, several components per openat2
// call but never more than fit in PATH_MAX, so depth is no limit.
func openChain(dirfd int, parts []string) (int, error) {
	const chunk = 3000
	cur := dirfd
	var b strings.Builder
	flush := func() error {
		fd, err := openDirAt(cur, b.String())
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return err
		}
		cur = fd
		b.Reset()
		return nil
	}
	for _, p := range parts {
		if b.Len() > 0 && b.Len()+1+len(p) > chunk {
			if err := flush(); err != nil {
				return -1, err
			}
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(p)
	}
	if err := flush(); err != nil {
		return -1, err
	}
	return cur, nil
}
