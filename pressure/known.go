package pressure

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// A launch measures its site's filesystem fresh, and asks about the same path call after
// call. The inline measurement (inline.go) is five syscalls: the mountinfo poll, openat2
// of the path (no symlinks), statx of the fd (its device), fstatfs, close. Three of them
// only find again what the last call found: that the path leads, through no symlink, to
// the mount the table says. So for a launch's site (MeasureSite) that finding is kept (the
// path's way is known) with the directory held open, and the next measurement of the path
// is the poll and an fstatfs of the held fd (issue 27), as long as nothing could have
// changed where the path leads:
//
//   - the mount table is the one the way was found under: a mount or unmount anywhere
//     in the namespace reloads it (fresh), and a reload forgets every known way;
//   - no directory on the way changed by name: every directory from "/" to the one that
//     holds the path's last component (for a path not created yet, to its nearest
//     existing ancestor) has an inotify watch, and an event for the name that leads on
//     (created, deleted, renamed from or to: a component replaced by a symlink, or by
//     another directory), or for the watched directory itself (deleted, moved, its
//     filesystem unmounted), or a lost event (queue overflow) forgets every known way.
//     Events for other names are read and let be.
//
// Then the path still leads to the directory held, through no symlink, the same mounts,
// all local: its fstatfs measures the filesystem the path leads to now, with no lookup
// that could wait on a server. The kernel queues an event before the
// rename, unlink or mkdir that makes it returns, and the inotify fd is polled in the same
// ppoll as mountinfo, so a change made before a call is seen by that call; the watches are
// added before the lookup that finds the way, so a change made meanwhile is seen too. An
// fstatfs that answers with another f_fsid than the way was found with forgets it as well.
// The fstatfs is as fresh as the inline path's (TestLaunchSeesAFillOfAMomentAgo).
//
// The site is held with an O_PATH fd, as the retention component holds the site's root
// while it cleans it. Any other path is measured the inline way at every call and holds
// nothing: a statfs by name on a kept way would follow a symlink put on the way between
// the poll and the statfs, before its event is read (into a FUSE mount that never answers,
// stalling every measurement behind the table's lock), and holding every path open would
// keep the watched filesystems busy. A held site's fd goes with its way (the next call or sampling tick after a change
// on it, a mount table reload, the end of Run, the second sampling tick no call asked
// about it: a site dropped from the configuration), and an unmount drops the watches on
// the filesystem (IN_UNMOUNT, IN_IGNORED).

// knownMask is what the watches on the way report: the name-level changes of their
// entries, and the directory itself going (IN_IGNORED, IN_UNMOUNT and IN_Q_OVERFLOW come
// unasked). IN_ONLYDIR and IN_DONT_FOLLOW: a component that is no directory (a symlink)
// gets no watch, and the way is not known.
const knownMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// knownAll is the events that forget every known way whatever their name.
const knownAll = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_UNMOUNT | unix.IN_Q_OVERFLOW

// knownWays is the mount table's known ways; the mount table's mu guards it.
type knownWays struct {
	ino      int                       // inotify fd (non-blocking); -1 when none
	failedOf time.Time                 // the table under which inotify_init1 failed: not tried again under it
	of       time.Time                 // the table (loadedAt) the ways were found under
	gen      uint64                    // counts forgets: watches made under another gen are gone with its inotify fd
	names    map[int32]map[string]bool // watch descriptor -> the names in its directory on a way
	ways     map[knownKey]*knownWay
	hits     uint64 // measurements made on a known way (tests)
	forgets  uint64 // times every known way was forgotten (tests)
}

type knownKey struct {
	path     string
	existing bool // MeasureExisting's: the path's nearest existing ancestor
}

// knownWay is what the inline path found of a path: the path it measures (at), and the
// mount and device it is on.
type knownWay struct {
	at           string // with existing, the path's nearest existing ancestor
	mnt          mountinfo.Entry
	major, minor uint32
	devno        string
	fsid         unix.Fsid // statfs's f_fsid when found: a statfs on the way that says another is of another filesystem
	fd           int       // at held open (MeasureSite): measured by fstatfs, not by name
	asked        bool      // measured since the last sampling tick (a held way not asked is let go)
}

// forgetLocked forgets every known way, closes the fds held and the inotify fd (its
// watches go with it).
func (k *knownWays) forgetLocked() {
	for _, w := range k.ways {
		if w.fd >= 0 {
			unix.Close(w.fd)
		}
	}
	if k.ino >= 0 {
		unix.Close(k.ino)
		k.forgets++
	}
	k.gen++
	k.ino, k.names, k.ways = -1, nil, nil
}

// readEventsLocked reads the queued events and forgets every known way when one of them
// may change where a path leads.
func (k *knownWays) readEventsLocked() {
	var buf [4096]byte
	for k.ino >= 0 {
		n, err := unix.Read(k.ino, buf[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				k.forgetLocked() // the queue cannot be read: nothing known can be trusted
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+int(ev.Len))]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&knownAll != 0 || k.names[ev.Wd][string(name)] {
				k.forgetLocked()
				return
			}
		}
	}
}

// measureKnown measures path on its known way, with an fstatfs of the fd held; ok false when its
// way is not known (the caller measures it the inline way, which may learn it). The
// caller has polled (fresh) just before.
func (t *mountTable) measureKnown(path string, existing bool, now time.Time) (fig api.Filesystem, dev uint64, at string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := &t.known
	if k.of != t.loadedAt {
		k.forgetLocked() // found under another table: a mount changed since
		return api.Filesystem{}, 0, "", false
	}
	w := k.ways[knownKey{path, existing}]
	if w == nil {
		return api.Filesystem{}, 0, "", false
	}
	var sf unix.Statfs_t
	if err := retryEINTR(func() error { return unix.Fstatfs(w.fd, &sf) }); err != nil || sf.Fsid != w.fsid {
		// It did not answer as it did, or of another filesystem (a mount made between the
		// poll and the statfs): find the way again.
		k.forgetLocked()
		return api.Filesystem{}, 0, "", false
	}
	k.hits++
	w.asked = true
	fig = figures(&sf)
	fig.Path, fig.Devno = w.at, w.devno
	fig.Mountpoint, fig.FSType, fig.Device = w.mnt.MountPoint, w.mnt.FSType, w.mnt.Source
	fig.SampledAt = now
	return fig, unix.Mkdev(w.major, w.minor), w.at, true
}

// watchWay adds a watch on every directory on path's way, from "/" down, for the name
// that leads on, until one cannot be watched (it does not exist, is no directory, or
// inotify is not there). It returns the deepest directory watched ("" for none), the
// table the watches were made under and the gen of the inotify fd they were made on.
// Called before the lookup that finds the way.
func (t *mountTable) watchWay(path string) (deepest string, of time.Time, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := &t.known
	of = t.loadedAt
	if !t.pollOpened || t.pollFD < 0 || !filepath.IsAbs(path) || path == "/" {
		return "", of, k.gen
	}
	if k.of != of {
		k.forgetLocked()
		k.of = of
	}
	if k.ino < 0 {
		if k.failedOf == of {
			return "", of, k.gen
		}
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			k.failedOf = of
			return "", of, k.gen
		}
		k.ino = fd
	}
	gen = k.gen
	dir, rest := "/", path[1:]
	for rest != "" {
		name, after, _ := strings.Cut(rest, "/")
		wd, err := unix.InotifyAddWatch(k.ino, dir, knownMask)
		if err != nil {
			break
		}
		if k.names == nil {
			k.names = map[int32]map[string]bool{}
		}
		if k.names[int32(wd)] == nil {
			k.names[int32(wd)] = map[string]bool{}
		}
		k.names[int32(wd)][name] = true
		deepest = dir
		dir, rest = filepath.Join(dir, name), after
	}
	return deepest, of, gen
}

// learn keeps what the inline path found of path (measuring at, on mount mnt, device
// major:minor, statfs's fsid, which must not be zero; fd, at held open, or -1) as its
// known way when the watches made under the table of found, on the inotify fd of gen,
// cover the way: every directory down to the one that holds at's last component, and
// with at an ancestor of path, at itself (a component created in it would change at). It
// says whether it kept the way (else the caller closes fd).
func (t *mountTable) learn(path string, existing bool, at string, mnt mountinfo.Entry, major, minor uint32, fsid unix.Fsid, fd int,
	deepest string, found time.Time, gen uint64) bool {
	want := filepath.Dir(at)
	if at != path {
		want = at
	}
	if deepest == "" || deepest != want || fsid == (unix.Fsid{}) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := &t.known
	// Forgotten since the watches were made (their inotify fd closed; another call may
	// have made a new one, on which this way has no watch): not kept.
	if found != t.loadedAt || k.of != found || k.gen != gen || k.ino < 0 || t.pollFD < 0 {
		return false
	}
	if k.ways == nil {
		k.ways = map[knownKey]*knownWay{}
	}
	key := knownKey{path, existing}
	if old := k.ways[key]; old != nil && old.fd >= 0 {
		unix.Close(old.fd)
	}
	k.ways[key] = &knownWay{at: at, mnt: mnt, major: major, minor: minor, fsid: fsid, fd: fd, asked: true,
		devno: strconv.FormatUint(uint64(major), 10) + ":" + strconv.FormatUint(uint64(minor), 10)}
	return true
}

// tickKnown is the sampling tick's part: it reads the events queued for the known ways
// (see readEventsLocked), and lets go of every held way not asked since the last tick. A
// site no launch asks about any more (dropped from the configuration) is not held open,
// nor its filesystem busy for a plain umount, past the tick after next; nothing else
// would close it while its way stays the same.
func (t *mountTable) tickKnown() {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := &t.known
	k.readEventsLocked()
	for key, w := range k.ways {
		switch {
		case w.fd < 0:
		case w.asked:
			w.asked = false
		default:
			unix.Close(w.fd)
			delete(k.ways, key)
		}
	}
}

// knownCounts is how many measurements were made on a known way, and how many times every
// known way was forgotten (tests).
func (t *mountTable) knownCounts() (hits, forgets uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.known.hits, t.known.forgets
}
