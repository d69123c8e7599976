package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"golang.org/x/sys/unix"
)

// Peer is who is on the other end of one connection, read once when it is accepted.
type Peer struct {
	UID, GID uint32
	PID      int32
	Groups   []uint32 // supplementary groups (SO_PEERGROUPS)
	// Known is false for connections that carry no credentials (the TCP listener).
	Known bool
	// TCP is true for the loopback TCP listener, where every mutating route is refused.
	TCP bool
	// conn is the Unix connection, for what only some calls need from the kernel (the
	// peer's pidfd for a job registration, jobs.PeerOf).
	conn *net.UnixConn
}

type peerKey struct{}

func peerFrom(ctx context.Context) Peer {
	p, _ := ctx.Value(peerKey{}).(Peer)
	return p
}

// connContext is http.Server.ConnContext: it reads SO_PEERCRED and SO_PEERGROUPS once per
// connection and keeps them in the context of every request on it.
func connContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return context.WithValue(ctx, peerKey{}, Peer{TCP: true})
	}
	p, err := readPeer(uc)
	if err != nil {
		return context.WithValue(ctx, peerKey{}, Peer{conn: uc})
	}
	p.conn = uc
	return context.WithValue(ctx, peerKey{}, p)
}

func readPeer(uc *net.UnixConn) (Peer, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var p Peer
	var serr error
	err = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			serr = fmt.Errorf("SO_PEERCRED: %w", err)
			return
		}
		p = Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, Known: true}
		p.Groups, _ = peerGroups(int(fd))
	})
	if err == nil {
		err = serr
	}
	return p, err
}

// peerGroups reads SO_PEERGROUPS (Linux ≥ 4.13): a buffer of gid_t, grown on ERANGE.
func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for range 4 {
		buf := make([]byte, n*4)
		l := uint32(len(buf))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptrOf(buf), uintptrOfLen(&l), 0)
		if errno == unix.ERANGE {
			n = int(l)/4 + 16
			continue
		}
		if errno != 0 {
			return nil, errno
		}
		out := make([]uint32, l/4)
		for i := range out {
			out[i] = nativeEndian.Uint32(buf[i*4:])
		}
		return out, nil
	}
	return nil, errors.New("SO_PEERGROUPS: buffer kept growing")
}

// Writers is who may call the mutating endpoints besides root and the daemon's own uid.
type Writers struct {
	UIDs []uint32
	GIDs []uint32
}

// allowed reports whether p may call a mutating endpoint, and if not, why.
func (w Writers) allowed(p Peer, selfUID uint32) (bool, string) {
	switch {
	case p.TCP:
		return false, "mutating endpoints are not served on the TCP listener"
	case !p.Known:
		return false, "the peer's credentials could not be read"
	case p.UID == 0 || p.UID == selfUID:
		return true, ""
	case slices.Contains(w.UIDs, p.UID):
		return true, ""
	case slices.Contains(w.GIDs, p.GID):
		return true, ""
	}
	for _, g := range p.Groups {
		if slices.Contains(w.GIDs, g) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("uid %d (gid %d, pid %d) is not root, the daemon's uid, or listed in server.writers", p.UID, p.GID, p.PID)
}
