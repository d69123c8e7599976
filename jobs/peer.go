package jobs

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a registration's connection, as the kernel names
// it (issue 20, CONTRACT §17). A pid number in a request body means something only in the
// caller's pid namespace: a runner in a container that sends os.Getpid() names, on the
// host, an unrelated process. The kernel translates: SO_PEERCRED's pid is in the reader's
// namespace (0 when the peer is not visible there), and a pidfd names one process wherever
// it lives.
type Peer struct {
	// Pidfd pins the peer process (SO_PEERPIDFD, or pidfd_open of SO_PEERCRED's pid on
	// kernels before 6.5); -1 when there is none. The Peer's maker closes it.
	Pidfd int
	// PID is the peer's pid in sandboxd's pid namespace; 0 when it is not visible from
	// here (sandboxd runs in a sibling or child namespace of the caller's).
	PID int
	// NSDepth is how many pid namespaces below sandboxd's the peer lives: 0 is sandboxd's
	// own namespace, where a pid number in a body means what sandboxd reads.
	NSDepth int
	// NSpid is the peer's pid in each namespace, from sandboxd's down (for messages).
	NSpid []int
	// Exited: the peer process is gone (the pidfd's Pid is -1).
	Exited bool
}

// Close releases the pidfd.
func (p *Peer) Close() {
	if p != nil && p.Pidfd >= 0 {
		unix.Close(p.Pidfd)
		p.Pidfd = -1
	}
}

// SameNamespace says whether a pid number from this peer names the process sandboxd
// would read under it.
func (p *Peer) SameNamespace() bool { return p.PID > 0 && p.NSDepth == 0 }

// whyForeign says why a pid number from p cannot be trusted ("" when it can).
func (p *Peer) whyForeign() string {
	switch {
	case p.PID == 0:
		return "the calling process is not visible in sandboxd's pid namespace (sandboxd runs in a namespace beside or below the caller's), so a pid number from it names some other process here"
	case p.NSDepth > 0:
		return fmt.Sprintf("the calling process (pid %d here) runs in a pid namespace %d level(s) below sandboxd's, where its pids are %s: a pid number from there names some other process here",
			p.PID, p.NSDepth, joinInts(p.NSpid[1:]))
	}
	return ""
}

// PeerOf pins the peer of the connected Unix socket sockfd. SO_PEERPIDFD (Linux ≥ 6.5)
// names the very process that connected, whatever happened to pid numbers since; older
// kernels get pidfd_open of SO_PEERCRED's pid, translated into sandboxd's namespace.
func PeerOf(sockfd int) (*Peer, error) {
	p := &Peer{Pidfd: -1}
	fd, err := unix.GetsockoptInt(sockfd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		cred, cerr := unix.GetsockoptUcred(sockfd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr != nil {
			return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
		}
		if cred.Pid <= 0 {
			return p, nil // not visible from here
		}
		if fd, err = unix.PidfdOpen(int(cred.Pid), 0); err != nil {
			return p, nil // gone: nothing to pin
		}
	}
	p.Pidfd = fd
	if err := p.readFdinfo(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// readFdinfo reads the pidfd's "Pid:" and "NSpid:" lines: the pid in sandboxd's namespace
// (0: not visible, -1: exited) and the pids from there down to the process's own.
func (p *Peer) readFdinfo() error {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(p.Pidfd))
	if err != nil {
		return fmt.Errorf("read pidfd info: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Pid":
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			p.PID, p.Exited = max(n, 0), n < 0
		case "NSpid":
			for _, f := range strings.Fields(v) {
				n, _ := strconv.Atoi(f)
				p.NSpid = append(p.NSpid, n)
			}
		}
	}
	if p.PID > 0 {
		p.NSDepth = max(len(p.NSpid)-1, 0)
	} else {
		p.NSpid = nil
	}
	return nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " then ")
}
