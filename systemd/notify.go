package systemd

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unicode"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// Notifier speaks the sd_notify protocol to the service manager. The zero value is ready
// to use and safe for concurrent use; a nil *Notifier is a no-op. It reads NOTIFY_SOCKET
// once, on first use: without it every method returns nil and does nothing.
type Notifier struct {
	once    sync.Once
	enabled bool

	mu     sync.Mutex // guards status and sent, and orders STATUS datagrams
	status string     // the last STATUS= line systemd accepted from us
	sent   bool       // whether status was ever sent
}

// Enabled reports whether the process runs under a service manager that listens for
// notifications (NOTIFY_SOCKET was set when the Notifier was first used).
func (n *Notifier) Enabled() bool {
	if n == nil {
		return false
	}
	n.once.Do(func() { n.enabled = os.Getenv("NOTIFY_SOCKET") != "" })
	return n.enabled
}

// Ready tells systemd that start-up (or a reload) finished: READY=1.
func (n *Notifier) Ready() error { return n.send(daemon.SdNotifyReady) }

// Stopping tells systemd that the daemon begins its shutdown: STOPPING=1.
func (n *Notifier) Stopping() error { return n.send(daemon.SdNotifyStopping) }

// Watchdog updates the service's watchdog timestamp: WATCHDOG=1. Callers normally let a
// Watchdog send it, which does so only while the supervisor loop is fresh.
func (n *Notifier) Watchdog() error { return n.send(daemon.SdNotifyWatchdog) }

// Reloading tells systemd that a configuration reload began; send Ready when it is done.
// MONOTONIC_USEC is what systemd ≥ 253 requires with Type=notify-reload to match the
// reload to the request (sd_notify(3)); older versions ignore the extra assignment.
func (n *Notifier) Reloading() error {
	if !n.Enabled() {
		return nil
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("notify systemd RELOADING=1: read monotonic clock: %w", err)
	}
	usec := ts.Sec*1_000_000 + ts.Nsec/1_000
	return n.send(fmt.Sprintf("%s\nMONOTONIC_USEC=%d", daemon.SdNotifyReloading, usec))
}

// Status sets the one-line status shown by `systemctl status`. It sends only when the
// line differs from the last one systemd accepted, so callers may call it every loop.
// Line breaks and other control characters are folded into spaces: a newline would
// start another assignment (an unlucky status could read "READY=1"), and systemd drops
// a whole datagram that holds a NUL.
func (n *Notifier) Status(line string) error {
	if !n.Enabled() {
		return nil
	}
	line = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, line)), " ")
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sent && line == n.status {
		return nil
	}
	if err := n.send("STATUS=" + line); err != nil {
		return err // not recorded: the next call retries
	}
	n.status, n.sent = line, true
	return nil
}

func (n *Notifier) send(state string) error {
	if !n.Enabled() {
		return nil
	}
	// false: unsetting NOTIFY_SOCKET would make every later notification a silent no-op.
	if _, err := daemon.SdNotify(false, state); err != nil {
		first, _, _ := strings.Cut(state, "\n")
		return fmt.Errorf("notify systemd %s: %w", first, err)
	}
	return nil
}
