package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ListenUnix creates the API socket at path with mode and group (a name or numeric gid;
// "" = the daemon's group). A stale socket file left by a crashed daemon is replaced; a
// socket with a live daemon behind it is an error, not stolen. The socket is made under a
// temporary name and renamed into place, so it never exists with the wrong mode.
func ListenUnix(path string, mode os.FileMode, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket path %s exists and is not a socket (%s): refusing to replace it", path, fi.Mode().Type())
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another sandboxd is answering on it; stop it first (not stealing a live socket)", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("socket %s exists and its state is unclear (%v): not replacing it", path, err)
		}
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("server.socket_group: %w", err)
		}
		gid = g
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("chmod socket %s: %w", path, err))
	}
	if gid >= 0 {
		if err := os.Lchown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("chown socket %s to group %s: %w", path, group, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("move socket into place at %s: %w", path, err))
	}
	return &unixListener{UnixListener: ln, path: path}, nil
}

// unixListener removes the socket file at its final path when closed.
type unixListener struct {
	*net.UnixListener
	path string
}

// Addr is the socket's final path, not the temporary name it was bound under (which a
// log line or a client would otherwise be told, and which no longer exists).
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	os.Remove(l.path)
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
