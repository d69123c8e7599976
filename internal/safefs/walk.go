package safefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// maxOpenFds bounds the directory fds a walk holds, whatever the depth: the deepest
// frames keep theirs, shallower ones are closed and reopened from the root (by name,
// under the resolve rules, and checked to be the same inode) when the walk climbs back.
const maxOpenFds = 16

// maxErrors caps Stats.Errors: a tree of a million unreadable files must not become a
// million errors in memory.
const maxErrors = 32

// ErrMountPoint is returned (wrapped) when the name given to Remove or Size is itself a
// mount point or on another device: it is not crossed.
var ErrMountPoint = errors.New("is a mount point or on another device; not crossed")

// errStop ends a walk that reached its entry budget.
var errStop = errors.New("entry budget reached")

// frame is one directory on the walk's stack.
type frame struct {
	fd       int    // -1 while evicted
	name     string // component in the parent; frame 0: its whole name beneath the root
	dev, ino uint64 // to check a reopened directory is still the one listed
	young    bool   // its own mtime is not older than OnlyOlderThan: kept
	kept     bool   // something beneath it was left in place, so rmdir may fail
	subdirs  []string
}

// walker is one Remove or Size: an explicit stack instead of recursion, so a
// 5,000-deep chain needs neither goroutine stack nor one fd per level.
type walker struct {
	r       *Root
	ctx     context.Context
	remove  bool
	opts    RemoveOptions
	frames  []frame
	lowOpen int     // frames[lowOpen:] hold open fds
	pfd     int     // parent of frame 0 (remove only)
	buf     *[]byte // getdents batch, taken from bufPool on the first list and returned by closeAll
	stx     unix.Statx_t

	stats Stats // remove
	usage Usage // size
	max   int64 // size: entry budget, 0 = none
}

func newWalker(ctx context.Context, r *Root, remove bool) *walker {
	return &walker{r: r, ctx: ctx, remove: remove, pfd: -1}
}

// bufPool holds getdents buffers: removing a plain file lists nothing and must not pay for
// 32 KiB (a drain of 100,000 files allocated 3 GiB that way), and walks reuse buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, direntBufSize); return &b }}

// fail records an error without stopping the walk.
func (w *walker) fail(err error) {
	switch n := len(w.stats.Errors); {
	case n < maxErrors:
		w.stats.Errors = append(w.stats.Errors, err)
	case n == maxErrors:
		w.stats.Errors = append(w.stats.Errors, errors.New("further errors omitted"))
	}
}

// relPath names child of frame idx beneath the root, for messages and the test hook.
func (w *walker) relPath(idx int, child string) string {
	var b strings.Builder
	b.WriteString(w.frames[0].name)
	for i := 1; i <= idx; i++ {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(w.frames[i].name)
	}
	if child != "" {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(child)
	}
	return b.String()
}

// tick checks the context before every entry (ctx.Err is a few ns next to a statx or an
// unlink); a deadline stops the walk between entries.
func (w *walker) tick() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.max > 0 && w.usage.Files+w.usage.Dirs >= w.max {
		return errStop
	}
	return nil
}

// closeAll releases every fd the walk holds, and its buffer.
func (w *walker) closeAll() {
	if w.buf != nil {
		bufPool.Put(w.buf)
		w.buf = nil
	}
	for i := range w.frames {
		if w.frames[i].fd >= 0 {
			unix.Close(w.frames[i].fd)
			w.frames[i].fd = -1
		}
	}
	w.frames = w.frames[:0]
}

// push adds an opened directory and lists it, evicting the shallowest open fd beyond the bound.
func (w *walker) push(fd int, name string, stx *unix.Statx_t) error {
	young := w.remove && w.opts.keeps(stxTime(stx.Mtime))
	w.frames = append(w.frames, frame{fd: fd, name: name, dev: stxDev(stx), ino: stx.Ino, young: young})
	if len(w.frames)-w.lowOpen > maxOpenFds {
		unix.Close(w.frames[w.lowOpen].fd)
		w.frames[w.lowOpen].fd = -1
		w.lowOpen++
	}
	if !w.remove {
		w.usage.Dirs++
	} else if w.opts.MakeWritable && stx.Mode&0o700 != 0o700 {
		// A read-only directory (the Go module cache makes them 0555) cannot lose its
		// children until its owner may write it again.
		if err := unix.Fchmod(fd, uint32(stx.Mode&0o7777|0o700)); err != nil {
			w.fail(fmt.Errorf("chmod u+w %s: %w", w.r.display(w.relPath(len(w.frames)-1, "")), err))
		}
	}
	return w.list(len(w.frames) - 1)
}

// list reads the whole directory of frame idx in getdents batches: non-directories are
// handled at once (unlinked, or counted), subdirectories queued on the frame.
func (w *walker) list(idx int) error {
	fd := w.frames[idx].fd
	if w.buf == nil {
		w.buf = bufPool.Get().(*[]byte)
	}
	buf := *w.buf
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.fail(fmt.Errorf("read dir %s: getdents: %w", w.r.display(w.relPath(idx, "")), err))
			w.frames[idx].kept = true
			return nil
		}
		if n <= 0 {
			return nil
		}
		it := direntIter{buf: buf[:n]}
		for {
			dtype, name, ok := it.next()
			if !ok {
				break
			}
			if err := w.tick(); err != nil {
				return err
			}
			if dtype == unix.DT_DIR {
				w.frames[idx].subdirs = append(w.frames[idx].subdirs, string(name[:len(name)-1]))
				continue
			}
			// Files need no open and unlinkat cannot cross anything; statx still runs,
			// for the bytes freed and to skip a bind-mounted file. DT_UNKNOWN learns its
			// type here too.
			if isDir := w.nonDir(idx, fd, &name[0], name); isDir {
				w.frames[idx].subdirs = append(w.frames[idx].subdirs, string(name[:len(name)-1]))
			}
		}
	}
}

// nonDir handles one entry that getdents did not call a directory: skip it if it is a
// mount (a bind-mounted file) or too young, else unlink it (as a link, never following
// it) or count it. It reports true when the entry is a directory after all.
func (w *walker) nonDir(idx, dirfd int, name *byte, raw []byte) bool {
	if err := statxAt(dirfd, name, statxFlags, &w.stx); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			w.fail(fmt.Errorf("statx %s: %w", w.r.display(w.nameOf(idx, raw)), err))
			w.keep(idx)
		}
		return false
	}
	return w.statted(idx, dirfd, name, raw)
}

// statted is nonDir once w.stx holds the entry's statx (the caller's own, when it just
// made one: Remove of a plain file states it once, not twice).
func (w *walker) statted(idx, dirfd int, name *byte, raw []byte) bool {
	stx := &w.stx
	if stx.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true
	}
	if stxDev(stx) != w.r.dev || isMountRoot(stx) {
		w.stats.Skipped++
		w.keep(idx)
		return false
	}
	if !w.remove {
		w.usage.Files++
		w.usage.Bytes += stxFreed(stx)
		return false
	}
	if w.opts.keeps(stxTime(stx.Mtime)) {
		w.stats.Skipped++
		w.keep(idx)
		return false
	}
	freed := stxFreed(stx)
	if err := unlinkAt(dirfd, name, 0); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			w.fail(fmt.Errorf("unlink %s: %w", w.r.display(w.nameOf(idx, raw)), err))
			w.keep(idx)
		}
		return false
	}
	w.stats.Files++
	w.stats.Bytes += freed
	return false
}

// nameOf names a raw (NUL-terminated) child of frame idx; idx -1 means the top name itself.
func (w *walker) nameOf(idx int, raw []byte) string {
	if idx < 0 {
		return string(raw[:len(raw)-1])
	}
	return w.relPath(idx, string(raw[:len(raw)-1]))
}

func (w *walker) keep(idx int) {
	if idx >= 0 && idx < len(w.frames) {
		w.frames[idx].kept = true
	}
}
