package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// UnitRestarter restarts systemd units over D-Bus: mountwatch's remedy for a FUSE daemon
// that lives in a .service unit (a .mount unit cannot restart a FUSE daemon, systemd
// #30137). The zero value talks to the system bus; it connects on first use, reconnects
// when the bus dropped, and is safe for concurrent use. Close it when done.
type UnitRestarter struct {
	// Dial opens the connection; nil means the system bus (dbus.NewSystemConnectionContext).
	// Tests point it at a private systemd's /run/systemd/private.
	Dial func(ctx context.Context) (*sddbus.Conn, error)
	// Logger receives reconnects at debug; nil discards.
	Logger *slog.Logger

	mu   sync.Mutex // guards conn
	conn *sddbus.Conn
}

// Job results systemd reports for a finished job (org.freedesktop.systemd1 JobRemoved).
const (
	JobDone       = "done"
	JobCanceled   = "canceled"
	JobTimeout    = "timeout"
	JobFailed     = "failed"
	JobDependency = "dependency"
	JobSkipped    = "skipped"
)

// RestartUnit restarts the unit name (mode "replace") and waits for its job to finish or
// ctx to end; pass a deadline. It answers the job's result; any result but "done" is also
// an error naming the unit and the result. A dropped bus connection is replaced once.
func (r *UnitRestarter) RestartUnit(ctx context.Context, name string) (string, error) {
	// Buffered: go-systemd delivers the result from its signal loop while holding a lock,
	// and an unread unbuffered channel would stall every later job on this connection.
	ch := make(chan string, 1)
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		conn, err := r.connect(ctx)
		if err != nil {
			return "", fmt.Errorf("restart unit %s: connect to systemd: %w", name, err)
		}
		if _, err := conn.RestartUnitContext(ctx, name, "replace", ch); err != nil {
			lastErr = err
			if conn.Connected() || ctx.Err() != nil {
				break // systemd answered (unknown unit, access denied...): not a bus problem
			}
			r.drop(conn)
			r.logger().Debug("systemd bus connection dropped; reconnecting", "unit", name, "err", err)
			continue
		}
		select {
		case res := <-ch:
			if res != JobDone {
				return res, fmt.Errorf("restart unit %s: job result %q", name, res)
			}
			return res, nil
		case <-ctx.Done():
			return "", fmt.Errorf("restart unit %s: waiting for the job: %w", name, ctx.Err())
		}
	}
	return "", fmt.Errorf("restart unit %s: %w", name, lastErr)
}

// Close closes the bus connection, if any. The restarter may be used again afterwards.
func (r *UnitRestarter) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
	return nil
}

func (r *UnitRestarter) connect(ctx context.Context) (*sddbus.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil && r.conn.Connected() {
		return r.conn, nil
	}
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
	dial := r.Dial
	if dial == nil {
		dial = sddbus.NewSystemConnectionContext
	}
	conn, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	return conn, nil
}

// drop forgets conn if it is still the current connection.
func (r *UnitRestarter) drop(conn *sddbus.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == conn {
		r.conn.Close()
		r.conn = nil
	}
}

func (r *UnitRestarter) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}
