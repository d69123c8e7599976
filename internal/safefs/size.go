package safefs

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Usage estimates what removing a name would free.
type Usage struct {
	Bytes   int64 // st_blocks*512 of non-directories with one link
	Files   int64 // non-directories
	Dirs    int64 // directories, the named one included (not the root for "")
	Partial bool  // the walk stopped at ctx's end or the entry budget: a lower bound
}

// Size walks name ("" or "." = the root) under the same rules as Remove and changes
// nothing. It stops at ctx's end or after maxEntries entries (0 = no limit) with Partial
// set and a nil error: a partial figure is still an answer.
func (r *Root) Size(ctx context.Context, name string, maxEntries int64) (Usage, error) {
	rel, err := cleanName(name)
	if err != nil {
		return Usage{}, fmt.Errorf("size: %w", err)
	}
	w := newWalker(ctx, r, false)
	w.max = maxEntries
	var fd int
	if rel == "" {
		if fd, err = r.openDir(""); err != nil {
			return Usage{}, fmt.Errorf("size %s: %w", r.path, err)
		}
	} else {
		pfd, base, err := r.openParent(rel)
		if err != nil {
			return Usage{}, fmt.Errorf("size: %w", err)
		}
		defer unix.Close(pfd)
		if err := unix.Statx(pfd, base, statxFlags, statxMask, &w.stx); err != nil {
			return Usage{}, fmt.Errorf("size %s: %w", r.display(rel), err)
		}
		if stxDev(&w.stx) != r.dev || isMountRoot(&w.stx) {
			return Usage{}, fmt.Errorf("size %s: %w", r.display(rel), ErrMountPoint)
		}
		if w.stx.Mode&unix.S_IFMT != unix.S_IFDIR {
			return Usage{Files: 1, Bytes: stxFreed(&w.stx)}, nil
		}
		fd, err = openDirAt(pfd, base)
		if err != nil {
			if errors.Is(err, unix.EXDEV) {
				err = ErrMountPoint
			}
			return Usage{}, fmt.Errorf("size %s: %w", r.display(rel), err)
		}
	}
	var stx unix.Statx_t
	if err := fstatx(fd, &stx); err != nil {
		unix.Close(fd)
		return Usage{}, fmt.Errorf("size %s: %w", r.display(rel), err)
	}
	err = w.push(fd, rel, &stx)
	if rel == "" {
		w.usage.Dirs-- // the root is not something removing "" could free
	}
	if err == nil {
		err = w.run()
	}
	w.closeAll()
	switch {
	case err == nil:
	case errors.Is(err, errStop), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		w.usage.Partial = true
	default:
		return w.usage, fmt.Errorf("size %s: %w", r.display(rel), err)
	}
	if len(w.stats.Errors) > 0 {
		// Unreadable parts make the figure a lower bound, not a failure.
		w.usage.Partial = true
	}
	return w.usage, nil
}
