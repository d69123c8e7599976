package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestCallerLimitIsATimeoutNotUnreachable: a daemon that takes the connection but answers
// after the caller's Timeout is a TimeoutError naming the limit, not an UnreachableError.
func TestCallerLimitIsATimeoutNotUnreachable(t *testing.T) {
	release := make(chan struct{})
	slow := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	_, err := (&Client{SocketPath: slow, Timeout: 100 * time.Millisecond}).Status(context.Background())
	var te *TimeoutError
	var ue *UnreachableError
	if !errors.As(err, &te) || errors.As(err, &ue) || te.Limit != 100*time.Millisecond || !te.Connected ||
		!strings.Contains(err.Error(), "no answer") || !strings.Contains(err.Error(), "100ms") {
		t.Fatalf("slow daemon: %T %v", err, err)
	}
	// A context deadline shorter than Timeout: its remainder is not Client.Timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = (&Client{SocketPath: slow, Timeout: time.Minute}).Status(ctx)
	if !errors.As(err, &te) || te.Limit != 0 || !strings.Contains(err.Error(), "before the caller's deadline") {
		t.Fatalf("context deadline: %T %v", err, err)
	}
}

// TestLimitBeforeTheConnectIsATimeout: a limit that passes before the connection is
// made (here: before the call starts) is still the caller's limit on a socket that
// exists, not "not reachable".
func TestLimitBeforeTheConnectIsATimeout(t *testing.T) {
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	_, err := (&Client{SocketPath: sock}).Status(ctx)
	var te *TimeoutError
	if !errors.As(err, &te) || te.Connected || !strings.Contains(err.Error(), "no connection to sandboxd") {
		t.Fatalf("expired context: %T %v", err, err)
	}
	// With no socket at all it is unreachable, whatever the limit.
	_, err = (&Client{SocketPath: filepath.Join(t.TempDir(), "none.sock")}).Status(ctx)
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.HasPrefix(ue.Reason, "no socket") {
		t.Fatalf("expired context, no socket: %T %v", err, err)
	}
}

// TestSocketPathThatIsNotASocket: a directory or a regular file at the socket path is
// named as such, with the socket inside the directory suggested when there is one.
func TestSocketPathThatIsNotASocket(t *testing.T) {
	dir := t.TempDir()
	var ue *UnreachableError
	_, err := (&Client{SocketPath: dir}).Status(context.Background())
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "is a directory, not a socket") || strings.Contains(ue.Reason, "did you mean") {
		t.Fatalf("directory: %v", err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sandboxd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv(api.SocketEnv, dir)
	_, err = (&Client{}).Status(context.Background())
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "did you mean "+filepath.Join(dir, "sandboxd.sock")) ||
		!strings.Contains(ue.Reason, "$"+api.SocketEnv) {
		t.Fatalf("directory holding a socket, from the environment: %v", err)
	}
	file := filepath.Join(dir, "plain")
	os.WriteFile(file, nil, 0o644)
	_, err = (&Client{SocketPath: file}).Status(context.Background())
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "is a regular file, not a socket") {
		t.Fatalf("regular file: %v", err)
	}
}
