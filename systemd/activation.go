package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
)

// Listeners returns the listening sockets systemd passed (socket activation), in fd
// order, or nil when none were passed to this process (LISTEN_PID names another process,
// or LISTEN_FDS is unset). Call it once: it unsets LISTEN_* so no child inherits them. An
// fd that is not a listening stream socket is closed and named in the error; the good
// listeners are returned with it, and the caller owns (closes) them either way.
func Listeners() ([]net.Listener, error) {
	passed, err := activated()
	var out []net.Listener
	for _, p := range passed {
		out = append(out, p.ln)
	}
	return out, err
}

// ListenersWithNames is Listeners keyed by FileDescriptorName= of the socket units
// (systemd's default name is the socket unit's name), so a daemon given a Unix socket and
// a loopback TCP socket can tell which is which. Call it once, instead of Listeners.
func ListenersWithNames() (map[string][]net.Listener, error) {
	passed, err := activated()
	if len(passed) == 0 {
		return nil, err
	}
	named := map[string][]net.Listener{}
	for _, p := range passed {
		named[p.name] = append(named[p.name], p.ln)
	}
	return named, err
}

type passedListener struct {
	name string
	ln   net.Listener
}

func activated() ([]passedListener, error) {
	files := activation.Files(true) // checks LISTEN_PID and LISTEN_FDS, then unsets LISTEN_*
	var out []passedListener
	var errs []error
	for i, f := range files {
		ln, err := net.FileListener(f) // dups the fd, so f is closed either way
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("socket activation: fd %d (%s) is not a listening stream socket: %w", 3+i, f.Name(), err))
			continue
		}
		out = append(out, passedListener{name: f.Name(), ln: ln})
	}
	return out, errors.Join(errs...)
}

// Activated reports whether systemd passed sockets to this process, without consuming
// them: the daemon uses it to decide between Listeners and making its own socket.
func Activated() bool {
	return os.Getenv("LISTEN_PID") == fmt.Sprint(os.Getpid()) && os.Getenv("LISTEN_FDS") != ""
}
