package safefs

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Guarded is a directory a root must keep clear of, compared by identity (device and
// inode), never by path text: a symlinked alias, a bind mount or a ".." cannot hide it.
type Guarded struct {
	Path string // as configured; a path that does not exist guards nothing yet
	What string // names it for messages, with its key: "the protected path /home (reclaim.protect[0])"
	// Inside refuses a root lying beneath the guarded directory too (protected paths),
	// not only a root that is it or contains it (the state directory).
	Inside bool
	// System, when set, guards the system directories rather than Path: the root's real
	// location must not be or lie inside one (Root.CheckSystem).
	System bool
}

// Locate returns the identity of the directory at path and of each directory above it,
// from "/" down to it. Unlike OpenRoot it follows symlinks, as the kernel does, because a
// guarded path means whatever it names now, and it finds the ancestors by walking ".."
// from the directory itself, so they are where the directory really lies (a bind mount's
// parent is the directory it is mounted in).
func Locate(path string) ([]ID, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("locate %s: %w", path, err)
	}
	var chain []ID
	for range 4096 {
		// Device and inode need no word from a FUSE server: AT_STATX_DONT_SYNC answers
		// from the inode, so a protected mount whose daemon hangs is still located.
		var stx unix.Statx_t
		if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_INO, &stx); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("locate %s: statx: %w", path, err)
		}
		id := ID{Dev: stxDev(&stx), Ino: stx.Ino}
		if len(chain) > 0 && chain[len(chain)-1] == id {
			// ".." of the namespace's root is the root itself: the top.
			unix.Close(fd)
			slices.Reverse(chain)
			return chain, nil
		}
		chain = append(chain, id)
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("locate %s: open ..: %w", path, err)
		}
		fd = up
	}
	unix.Close(fd)
	return nil, fmt.Errorf("locate %s: more than 4096 levels", path)
}

// CheckGuards says why the root must not be worked on, "" when it may: it is a guarded
// directory, contains one (its identity is among the guarded directory's ancestors), or
// lies inside one marked Inside (the guarded directory is among the root's own chain).
// Each guarded path is located afresh, so a protected directory created, moved or
// mounted since the last check counts.
func (r *Root) CheckGuards(guards []Guarded) string {
	me := r.ID()
	for _, g := range guards {
		if g.System {
			if why := r.CheckSystem(); why != "" {
				return why
			}
			continue
		}
		chain, err := locateBounded(g.Path, locateWait)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue
			}
			// Fail closed: a root that cannot be told apart from a protected path is not
			// worked on until it can.
			return fmt.Sprintf("root %s cannot be checked against %s: %v", r.path, g.What, err)
		}
		gid := chain[len(chain)-1]
		switch {
		case gid == me:
			return fmt.Sprintf("root %s is %s (the same directory: device %d, inode %d)", r.path, g.What, me.Dev, me.Ino)
		case slices.Contains(chain, me):
			return fmt.Sprintf("root %s contains %s", r.path, g.What)
		case g.Inside && slices.Contains(r.chain, gid):
			return fmt.Sprintf("root %s lies inside %s", r.path, g.What)
		}
	}
	return ""
}

// locateWait bounds how long a check waits for a guarded path's lookup: a protected path
// on (or beneath) a FUSE mount whose daemon hangs must not stall a site's loop or a
// reclaim run.
const locateWait = 2 * time.Second

// errLocateHung says a guarded path's lookup has not returned.
var errLocateHung = errors.New("its lookup has not returned (a hung mount?)")

// lookups holds the outstanding Locate of each guarded path: at most one per path, shared
// by every check that waits for it, so a hung lookup costs one thread, not one per check.
var lookups = struct {
	sync.Mutex
	m map[string]*lookup
}{m: map[string]*lookup{}}

type lookup struct {
	done  chan struct{}
	chain []ID
	err   error
}

// locateBounded is Locate(path) waited for at most d.
func locateBounded(path string, d time.Duration) ([]ID, error) {
	lookups.Lock()
	l := lookups.m[path]
	if l == nil {
		l = &lookup{done: make(chan struct{})}
		lookups.m[path] = l
		go func() {
			l.chain, l.err = Locate(path)
			lookups.Lock()
			delete(lookups.m, path)
			lookups.Unlock()
			close(l.done)
		}()
	}
	lookups.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.done:
		return l.chain, l.err
	case <-t.C:
		return nil, fmt.Errorf("locate %s: %w", path, errLocateHung)
	}
}
