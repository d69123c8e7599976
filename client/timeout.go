package client

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// TimeoutError is a call the daemon accepted but did not answer within the caller's own
// limit (Client.Timeout, or the context's deadline). It is not "unreachable": the daemon
// is there, and the call may still complete inside it. Like UnreachableError it means
// "no verdict".
type TimeoutError struct {
	Socket string
	// Limit is the limit that passed (Client.Timeout or what the context had left);
	// 0 when only the context's deadline is known to have passed.
	Limit time.Duration
	Err   error
}

func (e *TimeoutError) Error() string {
	if e.Limit > 0 {
		return fmt.Sprintf("no answer from sandboxd at %s within the caller's limit of %v (the socket took the connection; the call may still complete in the daemon)", e.Socket, e.Limit)
	}
	return fmt.Sprintf("no answer from sandboxd at %s before the caller's deadline (the socket took the connection; the call may still complete in the daemon)", e.Socket)
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
