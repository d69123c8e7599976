package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func serve(t *testing.T, h http.HandlerFunc) string {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestZeroValueUsesEnvThenDefault(t *testing.T) {
	t.Setenv(api.SocketEnv, "")
	var c Client
	if c.Socket() != api.DefaultSocketPath {
		t.Fatalf("zero value socket %q", c.Socket())
	}
	t.Setenv(api.SocketEnv, "/tmp/x.sock")
	var c2 Client
	if c2.Socket() != "/tmp/x.sock" {
		t.Fatalf("env socket %q", c2.Socket())
	}
}

func TestProblemErrorCarriesCodeAndDetail(t *testing.T) {
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ProblemContentType)
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(503)
		w.Write([]byte(`{"type":"about:blank","status":503,"title":"busy","code":"busy","detail":"another reclaim holds the lock"}`))
	})
	c := &Client{SocketPath: sock}
	_, err := c.Launch(context.Background(), api.LaunchRequest{})
	var pe *ProblemError
	if !errors.As(err, &pe) || pe.Code() != api.CodeBusy || pe.Problem.Detail != "another reclaim holds the lock" || pe.RetryAfter != 3*time.Second {
		t.Fatalf("err = %#v", err)
	}
}

func TestHealthCriticalIsNotAnError(t *testing.T) {
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		w.Write([]byte(`{"status":"critical","conditions":[],"summary":"x"}`))
	})
	h, err := (&Client{SocketPath: sock}).Health(context.Background())
	if err != nil || h.Status != api.HealthCritical {
		t.Fatalf("health: %+v %v", h, err)
	}
}

func TestUnreachableSaysWhy(t *testing.T) {
	dir := t.TempDir()
	c := &Client{SocketPath: filepath.Join(dir, "missing.sock")}
	_, err := c.Status(context.Background())
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.Reason != "no socket (is the daemon running?)" {
		t.Fatalf("missing socket: %v", err)
	}
	// A socket file with nothing accepting on it: refused.
	stale := filepath.Join(dir, "stale.sock")
	l, _ := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	l.SetUnlinkOnClose(false)
	l.Close()
	_, err = (&Client{SocketPath: stale}).Status(context.Background())
	if !errors.As(err, &ue) || ue.Reason != "connection refused (the socket exists but no daemon is accepting on it)" {
		t.Fatalf("stale socket: %v", err)
	}
}

// A daemon that stops while it holds a connection it has not answered (a restart, a
// DaemonSet's handover: a listener closed with connections in its queue) closes it: the
// call is unreachable with a reason that says so and that a retry may work, not a raw
// "EOF" or "connection reset by peer".
func TestClosedWithoutAnswerSaysWhy(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 512)) // the request arrived; the daemon stops without answering
			c.Close()
		}
	}()
	_, err = (&Client{SocketPath: sock}).Launch(context.Background(), api.LaunchRequest{})
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.Reason != "the daemon closed the connection without answering (it is stopping or restarting; retry)" {
		t.Fatalf("closed without an answer: %#v", err)
	}
}
