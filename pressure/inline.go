package pressure

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// A measurement runs on a goroutine of its own so that a statfs a hung filesystem never
// answers (a FUSE server that stopped, an NFS server gone) cannot hold the caller past its
// deadline. That hand-off is a cross-thread wake-up or two, tens of µs on a VM, for a
// statfs that on a local filesystem answers from memory in a few. So Measure measures on
// the caller's goroutine (inline) when nothing the measurement touches can wait on a
// server:
//
//   - every mount whose mountpoint holds the path by name (the path lookup crosses them)
//     is of a local type (localTypes), or an overlay whose every layer lies on one: a
//     lookup or statfs there is answered by the kernel from memory or a local disk;
//   - the mount table is current: /proc/self/mountinfo polls POLLPRI after every mount
//     or unmount in the daemon's namespace, and a change reloads the table first, so a
//     FUSE mount put on the way a moment ago is seen before the lookup;
//   - the lookup follows no symlink (openat2 RESOLVE_NO_SYMLINKS): a symlink could lead
//     anywhere, through a mount the table check did not look at;
//   - the opened path is on the mount the table says (statx AT_STATX_DONT_SYNC, which
//     never asks a FUSE or NFS server, gives its device) before fstatfs is called on it;
//     an fd stays on the filesystem it was opened on, whatever is mounted later.
//
// Anything else (a FUSE, NFS, CIFS or unknown type on the way, a symlink, a device that
// does not match, an error) hands the call to a goroutine as before, where the error is
// measured and worded as it always was.

// localTypes are the filesystem types (mountinfo's names) whose lookup, statx and statfs
// the kernel answers without a server: from memory (tmpfs) or a local block device's
// in-memory counters (ext2/3/4, xfs, btrfs).
var localTypes = map[string]bool{"ext2": true, "ext3": true, "ext4": true, "xfs": true, "btrfs": true, "tmpfs": true}

// localChainCap bounds the per-table cache of chain verdicts (the paths measured are the
// configured ones and the sites': a few).
const localChainCap = 256

// localMount is the mount that holds path by name when every mount on the way to it is
// local (see above), with ok; the verdict is cached until the table is reloaded. The
// caller has checked that the table is current (fresh).
func (t *mountTable) localMount(path string) (mountinfo.Entry, bool) {
	entries, at, _ := t.snapshotAt(false)
	t.mu.Lock()
	if v, ok := t.chains[path]; ok && t.chainsOf == at {
		t.mu.Unlock()
		return v.entry, v.ok
	}
	t.mu.Unlock()
	e, ok := localChain(entries, path)
	// Kept only while the table the verdict was found in is the current one: a verdict
	// of the table before a mount, kept as the next one's, would let a lookup go inline
	// through the new mount.
	t.mu.Lock()
	if t.loadedAt == at {
		if t.chainsOf != at || t.chains == nil || len(t.chains) >= localChainCap {
			t.chains, t.chainsOf = map[string]chainVerdict{}, at
		}
		t.chains[path] = chainVerdict{e, ok}
	}
	t.mu.Unlock()
	return e, ok
}

type chainVerdict struct {
	entry mountinfo.Entry
	ok    bool
}

// localChain is localMount on entries, uncached.
func localChain(entries []mountinfo.Entry, path string) (mountinfo.Entry, bool) {
	deepest, found := mountinfo.Deepest(entries, path, nil)
	if !found {
		return mountinfo.Entry{}, false
	}
	for _, e := range entries {
		if mountinfo.Under(path, e.MountPoint) && !localEntry(entries, e) {
			return mountinfo.Entry{}, false
		}
	}
	return deepest, true
}

// localEntry says whether a lookup or statfs on mount e can only be answered by the
// kernel: a local type, or an overlay whose upper and lower layers all lie, by name, on
// mounts of a local type (overlay's lookup goes down to every layer, its statfs to the
// upper one). An overlay whose layers this namespace cannot see (a container's root,
// its layers named in the host's namespace) is not known to be local.
func localEntry(entries []mountinfo.Entry, e mountinfo.Entry) bool {
	if localTypes[e.FSType] {
		return true
	}
	if e.FSType != "overlay" {
		return false
	}
	var layers []string
	for k, v := range e.SuperOpts {
		switch k {
		case "upperdir":
			layers = append(layers, v)
		case "lowerdir":
			if strings.Contains(v, `\`) {
				return false // an escaped ':' in a layer's name: not parsed here
			}
			layers = append(layers, strings.Split(v, ":")...)
		case "lowerdir+", "datadir+":
			return false // the new mount API's layers (one per option): not parsed here
		}
	}
	if len(layers) == 0 {
		return false
	}
	for _, l := range layers {
		if !filepath.IsAbs(l) {
			return false
		}
		for _, le := range entries {
			if mountinfo.Under(l, le.MountPoint) && !localTypes[le.FSType] {
				return false
			}
		}
		if _, ok := mountinfo.Deepest(entries, l, nil); !ok {
			return false
		}
	}
	return true
}

// close releases the poll fd; a later fresh says false (the table is not known current:
// measurements hand off). Called when the Watcher's Run ends, so a daemon that is stopped
// and built again in one process (tests, a restart in place) leaves no fd behind.
func (t *mountTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pollOpened && t.pollFD >= 0 {
		unix.Close(t.pollFD)
	}
	t.pollOpened, t.pollFD = true, -1
	t.known.forgetLocked()
}

// fresh polls mountinfo for a change since the last poll (the kernel raises POLLPRI on
// every mount or unmount in the namespace, once per poller) and, on one, reloads the
// table now. It says false when the table cannot be known current: mountinfo does not
// open, or is not the real one (a test's ProcRoot).
func (t *mountTable) fresh() bool {
	if t.path != "/proc/self/mountinfo" {
		return false
	}
	t.mu.Lock()
	if !t.pollOpened {
		t.pollOpened, t.pollFD = true, -1
		if fd, err := unix.Open(t.path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			t.pollFD = fd
			t.loadedAt = time.Time{} // changes before the open were not polled: reload
		}
	}
	fd := t.pollFD
	if fd < 0 {
		t.mu.Unlock()
		return false
	}
	// The known ways' inotify fd is polled in the same call (known.go).
	fds := [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}, {Fd: int32(t.known.ino), Events: unix.POLLIN}}
	nfds := 1
	if t.known.ino >= 0 {
		nfds = 2
	}
	n, err := unix.Poll(fds[:nfds], 0)
	if err != nil && !errors.Is(err, unix.EINTR) {
		t.known.forgetLocked()
		t.mu.Unlock()
		return false
	}
	if err != nil || (n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0) {
		t.loadedAt = time.Time{} // changed (or unknown after EINTR): reload below
		t.known.forgetLocked()
	} else if nfds == 2 && fds[1].Revents != 0 {
		t.known.readEventsLocked()
	}
	t.mu.Unlock()
	_, rerr := t.snapshot(false)
	return rerr == nil
}

// measureInline measures path (with existing, its nearest existing ancestor) on the
// caller's goroutine when nothing on the way can wait on a server (see the top of this
// file); ok false means it did not measure and the call is to be handed off. at is the
// path measured.
func (w *Watcher) measureInline(path string, existing, hold bool, now time.Time) (fig api.Filesystem, dev uint64, at string, ok bool) {
	if !w.mounts.fresh() {
		return api.Filesystem{}, 0, "", false
	}
	if fig, dev, at, ok := w.mounts.measureKnown(path, existing, now); ok {
		return fig, dev, at, true
	}
	mnt, local := w.mounts.localMount(path)
	if !local {
		return api.Filesystem{}, 0, "", false
	}
	deepest, found, gen := w.mounts.watchWay(path) // before the lookup: a change after it is seen
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	at = path
	var fd int
	for {
		var err error
		fd, err = unix.Openat2(unix.AT_FDCWD, at, &how)
		if err == nil {
			break
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case existing && errors.Is(err, unix.ENOENT) && at != "/":
			at = filepath.Dir(at) // as ExistingAncestor: only a name that does not exist is walked past
			continue
		}
		return api.Filesystem{}, 0, "", false // ELOOP (a symlink), ENOSYS (before 5.6), EACCES, ...: hand off
	}
	held := false
	defer func() {
		if !held {
			unix.Close(fd)
		}
	}()
	if at != path {
		if mnt, local = w.mounts.localMount(at); !local {
			return api.Filesystem{}, 0, "", false
		}
	}
	var stx unix.Statx_t
	if err := retryEINTR(func() error {
		return unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, 0, &stx)
	}); err != nil || stx.Dev_major != mnt.Major || stx.Dev_minor != mnt.Minor {
		return api.Filesystem{}, 0, "", false // not on the mount the table says: hand off
	}
	var sf unix.Statfs_t
	if err := retryEINTR(func() error { return unix.Fstatfs(fd, &sf) }); err != nil {
		return api.Filesystem{}, 0, "", false
	}
	fig = figures(&sf)
	fig.Path = at
	fig.Devno = strconv.FormatUint(uint64(stx.Dev_major), 10) + ":" + strconv.FormatUint(uint64(stx.Dev_minor), 10)
	fig.Mountpoint, fig.FSType, fig.Device = mnt.MountPoint, mnt.FSType, mnt.Source
	fig.SampledAt = now
	// Only a way held open is kept (known.go): measured by name, a symlink put on the way
	// after the poll would be followed before the event is read.
	if hold && at == path {
		held = w.mounts.learn(path, existing, at, mnt, stx.Dev_major, stx.Dev_minor, sf.Fsid, fd, deepest, found, gen)
	}
	return fig, unix.Mkdev(stx.Dev_major, stx.Dev_minor), at, true
}
