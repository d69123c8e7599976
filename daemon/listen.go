package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/safefs"
)

// ErrSocketAnswered is ListenUnix's error for a socket another daemon answers on.
var ErrSocketAnswered = errors.New("another sandboxd is answering on it")

// ListenUnix creates the API socket at path with mode and group (a name or numeric gid;
// "" = the daemon's group). A stale socket file left by a crashed daemon is replaced; a
// socket with a live daemon behind it is an error, not stolen. The socket is made under a
// temporary name and renamed into place, so it never exists with the wrong mode.
//
// Replacing a stale socket is a deletion (issue 9): the socket's directory is opened with
// safefs's walk from "/" (no symlink in any component, no ancestor another user can
// swap), and the directory itself must be root's or sandboxd's user's and not writable by
// others without the sticky bit; otherwise it is refused with the reason. Every step then
// works beneath that fd.
// bind(2) takes no directory fd, so the socket is bound at /proc/self/fd/N/NAME, which
// the kernel resolves to that very directory whatever happens to its path meanwhile.
func ListenUnix(path string, mode os.FileMode, group string) (net.Listener, error) {
	dir, base, err := safefs.OpenParent(path)
	if errors.Is(err, unix.ENOENT) {
		// Creation only, and only when missing (an existing path is never resolved
		// through a link here): a directory made through a link is refused just below.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("create socket directory: %w", err)
		}
		dir, base, err = safefs.OpenParent(path)
	}
	if err != nil {
		return nil, fmt.Errorf("socket directory of %s: %w (sandboxd replaces a stale socket there, so only in a directory no other user can swap, such as /run/sandboxd)", path, err)
	}
	// The directory itself: another user who owns it, or may write it without the sticky
	// bit, could replace the socket (clients would talk to them) or what sandboxd removes.
	if problem := dir.CheckOwner(uint32(os.Geteuid())); problem != "" {
		dir.Close()
		return nil, fmt.Errorf("socket directory of %s: %s: another user could replace the socket; use a directory only root (or sandboxd's user) can write, such as /run/sandboxd", path, problem)
	}
	via := func(name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), name) }
	if e, err := dir.Lstat(base); err == nil {
		if e.Type != unix.S_IFSOCK {
			dir.Close()
			return nil, fmt.Errorf("socket path %s exists and is not a socket (%s): refusing to replace it", path, fileKind(e.Type))
		}
		c, err := net.DialTimeout("unix", via(base), time.Second)
		if err == nil {
			c.Close()
			dir.Close()
			return nil, fmt.Errorf("socket %s: %w; stop it first (not stealing a live socket)", path, ErrSocketAnswered)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			dir.Close()
			return nil, fmt.Errorf("socket %s exists and its state is unclear (%v): not replacing it", path, err)
		}
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			dir.Close()
			return nil, fmt.Errorf("server.socket_group: %w", err)
		}
		gid = g
	}
	tmp := fmt.Sprintf("%s.%d.tmp", base, os.Getpid())
	removeSocket(dir, tmp, nil) // a crashed predecessor's with our pid
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: via(tmp), Net: "unix"})
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		unix.Unlinkat(dir.Fd(), tmp, 0) // ours: bound just now in a directory no one else can change
		dir.Close()
		return nil, err
	}
	ours, err := dir.Lstat(tmp)
	if err != nil {
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	if err := unix.Fchmodat(dir.Fd(), tmp, uint32(mode.Perm()), 0); err != nil {
		return fail(fmt.Errorf("chmod socket %s: %w", path, err))
	}
	if gid >= 0 {
		if err := unix.Fchownat(dir.Fd(), tmp, -1, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fail(fmt.Errorf("chown socket %s to group %s: %w", path, group, err))
		}
	}
	if err := dir.ReplaceFile(tmp, base); err != nil {
		return fail(fmt.Errorf("move socket into place at %s: %w", path, err))
	}
	return &unixListener{UnixListener: ln, path: path, dir: dir, base: base, ours: &ours}, nil
}

// fileKind names an S_IFMT type for a message.
func fileKind(t uint32) string {
	switch t {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	}
	return fmt.Sprintf("file type %#o", t)
}

// removeSocket unlinks name beneath dir when it is a socket (and, with want, that very
// socket): never a file, a link or a directory someone put there.
func removeSocket(dir *safefs.Root, name string, want *safefs.Entry) {
	e, err := dir.Lstat(name)
	if err != nil || e.Type != unix.S_IFSOCK || (want != nil && (e.Dev != want.Dev || e.Ino != want.Ino)) {
		return
	}
	unix.Unlinkat(dir.Fd(), name, 0)
}

// unixListener removes the socket file at its final path when closed: beneath the
// directory fd it was made in, and only while it is still the socket this listener bound
// (a successor's socket at the same path stays).
type unixListener struct {
	*net.UnixListener
	path string
	dir  *safefs.Root
	base string
	ours *safefs.Entry

	closeOnce sync.Once
}

// Addr is the socket's final path, not the temporary name it was bound under (which a
// log line or a client would otherwise be told, and which no longer exists).
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.closeOnce.Do(func() {
		removeSocket(l.dir, l.base, l.ours)
		l.dir.Close()
	})
	return err
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(gr.Gid)
}

// ListenTCP opens the optional read-only loopback listener.
func ListenTCP(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on server.http %s: %w", addr, err)
	}
	return ln, nil
}
