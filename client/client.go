// Package client is the Go client for sandboxd's Unix-socket API, for runners and for the
// sandboxd CLI itself. The zero value talks to api.DefaultSocketPath (or $SANDBOXD_SOCKET).
// Refusals come back as *ProblemError carrying the problem's code and detail; a daemon that
// cannot be reached comes back as *UnreachableError saying plainly why, and a call cut short
// by the caller's own limit as *TimeoutError; both mean "no verdict". It imports only api.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Client calls one sandboxd daemon. Its zero value is ready to use.
type Client struct {
	// SocketPath is the daemon's socket; empty means $SANDBOXD_SOCKET, then
	// api.DefaultSocketPath.
	SocketPath string
	// Timeout bounds each call when the context has no earlier deadline; zero means each
	// call's own deadline plus one second (30 s for calls without one).
	Timeout time.Duration
	// ServerUIDs, when not empty, are the uids the daemon may run as: every connection
	// checks the server's SO_PEERCRED and refuses one of another uid (a fake daemon at
	// $SANDBOXD_SOCKET), as an UnreachableError naming it (issue 21).
	ServerUIDs []uint32

	once sync.Once
	hc   *http.Client
}

// Socket is the socket path the client uses.
func (c *Client) Socket() string {
	if c.SocketPath != "" {
		return c.SocketPath
	}
	if s := os.Getenv(api.SocketEnv); s != "" {
		return s
	}
	return api.DefaultSocketPath
}

// DialUnix is an http.Transport DialContext that connects to the Unix socket sock,
// whatever host the URL names.
func DialUnix(sock string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
}

func (c *Client) http() *http.Client {
	c.once.Do(func() {
		dial := DialUnix(c.Socket())
		if len(c.ServerUIDs) > 0 {
			dial = dialChecked(dial, c.ServerUIDs)
		}
		tr := &http.Transport{
			DialContext:         dial,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		}
		c.hc = &http.Client{Transport: tr}
	})
	return c.hc
}

// ProblemError is a refusal or failure answered by the daemon as problem+json.
type ProblemError struct {
	StatusCode int
	Problem    api.Problem
	// RetryAfter is the Retry-After of a busy answer.
	RetryAfter time.Duration
}

func (e *ProblemError) Error() string {
	return fmt.Sprintf("sandboxd: %s (%d): %s", e.Problem.Code, e.StatusCode, e.Problem.Detail)
}

// Code is the problem's error code.
func (e *ProblemError) Code() api.Code { return e.Problem.Code }

// UnreachableError says why the daemon could not be reached: no socket, refused, timed
// out, or permission denied on the socket. It means "no verdict".
type UnreachableError struct {
	Socket string
	Reason string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("sandboxd is not reachable at %s: %s", e.Socket, e.Reason)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

func (c *Client) unreachable(err error) error {
	reason := err.Error()
	sock := c.Socket()
	var untrusted *UntrustedServerError
	switch {
	case errors.As(err, &untrusted):
		reason = untrusted.Error()
	case notASocket(sock) != "":
		reason = notASocket(sock)
	case errors.Is(err, syscall.ENOENT), !exists(sock):
		reason = "no socket (is the daemon running?)"
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "connection refused (the socket exists but no daemon is accepting on it)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// A daemon that stops (a restart, a DaemonSet's handover) closes the connections it
		// took but had not answered yet: the call was not answered, and may be retried.
		reason = "the daemon closed the connection without answering (it is stopping or restarting; retry)"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		reason = "permission denied on the socket (is this user in the socket's group?)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		reason = "timed out"
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			reason = "timed out"
		}
	}
	if c.SocketPath == "" && os.Getenv(api.SocketEnv) != "" {
		reason += " (the path is $" + api.SocketEnv + ")"
	}
	return &UnreachableError{Socket: sock, Reason: reason, Err: err}
}

// failed classifies a failed exchange: a deadline that passed is the caller's limit, a
// TimeoutError saying whether the connection was made; anything else says why the daemon
// could not be reached.
func (c *Client) failed(err error, connected bool, limit time.Duration) error {
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	if timedOut && (connected || isSocket(c.Socket())) {
		return &TimeoutError{Socket: c.Socket(), Limit: limit, Connected: connected, Err: err}
	}
	return c.unreachable(err)
}

// Do sends a request to path with an optional JSON body and decodes a 2xx answer into
// out. callDeadline is the deadline the daemon was asked to keep (0 if none).
func (c *Client) Do(ctx context.Context, method, path string, body, out any, callDeadline time.Duration) error {
	return c.do(ctx, method, path, body, out, callDeadline, false)
}

// do is Do; with acceptUnavailable a 503 whose body is not a problem document is decoded
// into out like a 2xx (GET /v1/health answers 503 with its normal body when critical).
func (c *Client) do(ctx context.Context, method, path string, body, out any, callDeadline time.Duration, acceptUnavailable bool) error {
	timeout, limit := c.Timeout, time.Duration(0)
	if timeout == 0 {
		timeout = 30 * time.Second
		if callDeadline > 0 {
			timeout = callDeadline + time.Second
		}
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
		limit = timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A limit that passes after the daemon accepted the connection is the caller's own
	// timeout, not an unreachable daemon: connected tells the two apart.
	var connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://sandboxd"+path, rd)
	if err != nil {
		return fmt.Errorf("build %s %s request: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
		return c.failed(err, connected.Load(), limit)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return c.failed(err, true, limit)
	}
	isProblem := resp.Header.Get("Content-Type") == api.ProblemContentType
	if acceptUnavailable && resp.StatusCode == http.StatusServiceUnavailable && !isProblem {
		return json.Unmarshal(data, out)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		pe := &ProblemError{StatusCode: resp.StatusCode}
		if err := json.Unmarshal(data, &pe.Problem); err != nil || pe.Problem.Code == "" {
			pe.Problem = api.Problem{Status: resp.StatusCode, Code: api.CodeInternal,
				Detail: fmt.Sprintf("unexpected answer %d to %s %s: %.200s", resp.StatusCode, method, path, data)}
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			pe.RetryAfter = time.Duration(s) * time.Second
		}
		return pe
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}
