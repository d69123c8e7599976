package safefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stats is what a Remove did.
type Stats struct {
	Files   int64   // non-directories unlinked (files, symlinks as links, FIFOs, sockets, devices)
	Dirs    int64   // directories removed
	Bytes   int64   // freed: st_blocks*512 of the unlinked files that had one link
	Skipped int64   // left in place on purpose: mount points, other devices, newer than OnlyOlderThan
	Errors  []error // per-entry failures, capped at maxErrors (+1 "omitted" marker)
}

// Add folds o into s (for callers that remove many entries per run), keeping the cap on
// Errors.
func (s *Stats) Add(o Stats) {
	s.Files += o.Files
	s.Dirs += o.Dirs
	s.Bytes += o.Bytes
	s.Skipped += o.Skipped
	for _, err := range o.Errors {
		if len(s.Errors) > maxErrors {
			break
		}
		s.Errors = append(s.Errors, err)
	}
}

// RemoveOptions tune a Remove.
type RemoveOptions struct {
	// MakeWritable gives directories beneath u+rwx before emptying them (the Go module
	// cache is read-only).
	MakeWritable bool
	// OnlyOlderThan, when set, keeps entries (and directories) whose mtime is not before it.
	OnlyOlderThan time.Time
}

// keeps reports whether OnlyOlderThan keeps an entry of this mtime.
func (o RemoveOptions) keeps(mtime time.Time) bool {
	return !o.OnlyOlderThan.IsZero() && !mtime.Before(o.OnlyOlderThan)
}

// Remove removes name (a file, a symlink as a link, a FIFO, socket or device node, or a
// whole directory tree) beneath the root; it never removes the root itself. It never
// follows a symlink, never crosses a mount point (those are counted in Skipped), holds at
// most maxOpenFds+2 fds at any depth, and stops between entries when ctx ends: Stats then
// holds what was freed so far and the error wraps ctx.Err(). Per-entry failures do not stop
// it; they are in Stats.Errors and summarised in the error.
func (r *Root) Remove(ctx context.Context, name string, opts RemoveOptions) (Stats, error) {
	return r.remove(ctx, name, opts, false)
}

// RemoveDir is Remove for a name the caller knows to be a directory (reclaim's trash
// entries): it saves the first statx by opening the name as a directory at once. Should
// it be anything else by now, it is removed as Remove would remove it.
func (r *Root) RemoveDir(ctx context.Context, name string, opts RemoveOptions) (Stats, error) {
	return r.remove(ctx, name, opts, true)
}

func (r *Root) remove(ctx context.Context, name string, opts RemoveOptions, expectDir bool) (Stats, error) {
	rel, err := cleanName(name)
	if err != nil {
		return Stats{}, fmt.Errorf("remove: %w", err)
	}
	if rel == "" {
		return Stats{}, fmt.Errorf("remove %s: refusing to remove the root itself", r.path)
	}
	pfd, base := r.fd, rel
	if strings.IndexByte(rel, '/') >= 0 {
		// A nested name's parent is opened under the resolve rules. A single component
		// is used at the root fd itself: cleanName refused "..", and statx/unlinkat on
		// one component cannot leave the directory, so the open would add nothing.
		if pfd, base, err = r.openParent(rel); err != nil {
			return Stats{}, fmt.Errorf("remove: %w", err)
		}
		defer unix.Close(pfd)
	} else if r.fd < 0 {
		return Stats{}, fmt.Errorf("remove %s: root is closed", r.display(rel))
	}
	return r.removeAt(ctx, pfd, rel, base, opts, expectDir)
}

// removeAt is Remove of base in the open directory pfd, rel naming it beneath the root.
// expectDir skips the first statx: the name is opened as a directory at once, and only if
// that fails because it is none is it examined as a file.
func (r *Root) removeAt(ctx context.Context, pfd int, rel, base string, opts RemoveOptions, expectDir bool) (Stats, error) {
	w := newWalker(ctx, r, true)
	w.opts = opts
	w.pfd = pfd
	if err := ctx.Err(); err != nil {
		return w.stats, fmt.Errorf("remove %s: %w", r.display(rel), err)
	}
	err := w.start(rel, base, expectDir)
	if err == nil {
		err = w.run()
	}
	w.closeAll()
	if err != nil {
		if w.stats.Files+w.stats.Dirs > 0 {
			return w.stats, fmt.Errorf("remove %s: stopped after %d files, %d dirs: %w", r.display(rel), w.stats.Files, w.stats.Dirs, err)
		}
		return w.stats, fmt.Errorf("remove %s: %w", r.display(rel), err)
	}
	if n := len(w.stats.Errors); n > 0 {
		return w.stats, fmt.Errorf("remove %s: %d entries failed, first: %w", r.display(rel), n, w.stats.Errors[0])
	}
	return w.stats, nil
}

// start handles the top name in w.pfd: a non-directory is dealt with at once, a directory
// is opened and becomes frame 0.
func (w *walker) start(rel, base string, expectDir bool) error {
	raw := append([]byte(base), 0)
	if !expectDir {
		if err := statxAt(w.pfd, &raw[0], statxFlags, &w.stx); err != nil {
			return err
		}
		if stxDev(&w.stx) != w.r.dev || isMountRoot(&w.stx) {
			w.stats.Skipped++
			return ErrMountPoint
		}
		if w.stx.Mode&unix.S_IFMT != unix.S_IFDIR {
			w.statted(-1, w.pfd, &raw[0], raw)
			return w.firstError()
		}
	}
	// A directory: opened straight away (for an expected one, the open is the first
	// look): O_DIRECTORY|O_NOFOLLOW and RESOLVE_NO_XDEV refuse anything else, and the
	// fstatx below checks the device and mount-root attribute of what was opened.
	if w.r.beforeOpen != nil {
		w.r.beforeOpen(rel)
	}
	fd, err := openDirAt(w.pfd, base)
	switch {
	case errors.Is(err, unix.EXDEV):
		w.stats.Skipped++
		return ErrMountPoint
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		if w.nonDir(-1, w.pfd, &raw[0], raw) {
			return errors.New("changed while opening it")
		}
		return w.firstError()
	case err != nil:
		return err
	}
	var stx unix.Statx_t
	if err := fstatx(fd, &stx); err != nil {
		unix.Close(fd)
		return err
	}
	if stxDev(&stx) != w.r.dev || isMountRoot(&stx) {
		unix.Close(fd)
		w.stats.Skipped++
		return ErrMountPoint
	}
	return w.push(fd, rel, &stx)
}

func (w *walker) firstError() error {
	if len(w.stats.Errors) > 0 {
		err := w.stats.Errors[0]
		w.stats.Errors = nil // reported as the call's error instead
		return err
	}
	return nil
}
