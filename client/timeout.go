package client

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TimeoutError is a call that the caller's own limit (Client.Timeout, or the context's
// deadline) cut short. It is not "unreachable": the socket is there. Connected says how
// far the call got: the socket took the connection (the call may still complete in the
// daemon), or connecting itself did not finish in time (the daemon is not accepting, or
// the limit is shorter than a connect). Like UnreachableError it means "no verdict".
type TimeoutError struct {
	Socket string
	// Limit is the limit that passed (Client.Timeout or what the context had left);
	// 0 when only the context's deadline is known to have passed.
	Limit     time.Duration
	Connected bool
	Err       error
}

func (e *TimeoutError) Error() string {
	limit := "before the caller's deadline"
	if e.Limit > 0 {
		limit = fmt.Sprintf("within the caller's limit of %s", api.FormatDuration(e.Limit))
	}
	if e.Connected {
		return fmt.Sprintf("no answer from sandboxd at %s %s (the socket took the connection; the call may still complete in the daemon)", e.Socket, limit)
	}
	return fmt.Sprintf("no connection to sandboxd at %s %s (the daemon is not accepting connections, or the limit is shorter than a connect)", e.Socket, limit)
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// notASocket says what the socket path is when it exists but is not a socket, so that a
// SANDBOXD_SOCKET naming the socket's directory says so instead of "connection refused".
func notASocket(path string) string {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket != 0 {
		return ""
	}
	if fi.IsDir() {
		hint := ""
		if inner, err := os.Stat(filepath.Join(path, "sandboxd.sock")); err == nil && inner.Mode()&os.ModeSocket != 0 {
			hint = fmt.Sprintf("; did you mean %s?", filepath.Join(path, "sandboxd.sock"))
		}
		return "it is a directory, not a socket: give the socket file itself" + hint
	}
	return fmt.Sprintf("it is a %s, not a socket", kindOf(fi.Mode()))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func kindOf(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "file of type " + m.Type().String()
}
