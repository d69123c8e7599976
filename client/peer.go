package client

import (
	"context"
	"fmt"
	"net"
	"slices"
	"syscall"
)

// UntrustedServerError: the process at the socket runs as a uid the client does not
// trust as the daemon's (Client.ServerUIDs).
type UntrustedServerError struct {
	UID  uint32
	Want []uint32
}

func (e *UntrustedServerError) Error() string {
	return fmt.Sprintf("the server at the socket runs as uid %d, not as the daemon's uid (%v): not trusted (give --server-uid if the daemon runs as another user)", e.UID, e.Want)
}

// dialChecked wraps dial: a connection whose server (SO_PEERCRED) runs as a uid not in
// uids is closed and refused.
func dialChecked(dial func(ctx context.Context, network, addr string) (net.Conn, error), uids []uint32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		uid, err := serverUID(conn)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("the server's credentials cannot be read: %w", err)
		}
		if !slices.Contains(uids, uid) {
			conn.Close()
			return nil, &UntrustedServerError{UID: uid, Want: uids}
		}
		return conn, nil
	}
}

// serverUID is the uid of the process that listens at the other end of conn.
func serverUID(conn net.Conn) (uint32, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, gerr
	}
	return cred.Uid, nil
}
