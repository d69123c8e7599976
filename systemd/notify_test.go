package systemd

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// notifySocket is a real unixgram socket standing in for systemd's notify socket.
type notifySocket struct {
	t    *testing.T
	conn *net.UnixConn
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "n.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return &notifySocket{t: t, conn: conn}
}

// next returns the next datagram, failing the test when none arrives within a generous
// timeout (the sender is synchronous, so it is already queued in most tests that use it;
// the watchdog's tests wait for its goroutine's next tick, which a loaded machine delays).
func (s *notifySocket) next() string {
	s.t.Helper()
	d, ok := s.read(time.Minute)
	if !ok {
		s.t.Fatal("no datagram on the notify socket")
	}
	return d
}

func (s *notifySocket) read(timeout time.Duration) (string, bool) {
	buf := make([]byte, 4096)
	s.conn.SetReadDeadline(time.Now().Add(timeout))
	n, err := s.conn.Read(buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// none asserts that nothing is queued: every send is synchronous, so a datagram that was
// sent is already in the socket's queue and a short read deadline cannot miss it.
func (s *notifySocket) none() {
	s.t.Helper()
	if d, ok := s.read(50 * time.Millisecond); ok {
		s.t.Fatalf("unexpected datagram %q", d)
	}
}

func TestNotifierSendsExactDatagrams(t *testing.T) {
	sock := listenNotify(t)
	var n Notifier
	if !n.Enabled() {
		t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
	}
	check := func(err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if got := sock.next(); got != want {
			t.Fatalf("datagram %q, want %q", got, want)
		}
	}
	check(n.Ready(), "READY=1")
	check(n.Status("watching 1 filesystem"), "STATUS=watching 1 filesystem")
	if err := n.Status("watching 1 filesystem"); err != nil {
		t.Fatal(err)
	}
	sock.none() // same line: not sent again
	check(n.Status("/ 68% used,\nREADY=1"), "STATUS=/ 68% used, READY=1")
	check(n.Watchdog(), "WATCHDOG=1")

	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	got := sock.next()
	first, rest, ok := strings.Cut(got, "\n")
	usec, err := strconv.ParseInt(strings.TrimPrefix(rest, "MONOTONIC_USEC="), 10, 64)
	if !ok || first != "RELOADING=1" || !strings.HasPrefix(rest, "MONOTONIC_USEC=") || err != nil || usec <= 0 {
		t.Fatalf("reloading datagram %q, want RELOADING=1\\nMONOTONIC_USEC=<positive>", got)
	}
	check(n.Ready(), "READY=1")
	check(n.Stopping(), "STOPPING=1")
	sock.none()

	// NOTIFY_SOCKET must survive: a notifier created later still reaches systemd.
	var later Notifier
	check(later.Ready(), "READY=1")
}

func TestNotifierStatusRetriesAfterFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone.sock")
	t.Setenv("NOTIFY_SOCKET", path) // nobody listens yet
	var n Notifier
	if err := n.Status("one"); err == nil {
		t.Fatal("Status to a missing socket: no error")
	}
	sock := listenNotifyAt(t, path)
	if err := n.Status("one"); err != nil {
		t.Fatal(err)
	}
	if got := sock.next(); got != "STATUS=one" {
		t.Fatalf("got %q after the failed send, want the status resent", got)
	}
}

func listenNotifyAt(t *testing.T, path string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifySocket{t: t, conn: conn}
}

func TestNotifierWithoutSystemdIsANoOp(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	var n Notifier
	if n.Enabled() {
		t.Fatal("Enabled() = true without NOTIFY_SOCKET")
	}
	for name, f := range map[string]func() error{
		"Ready": n.Ready, "Stopping": n.Stopping, "Watchdog": n.Watchdog, "Reloading": n.Reloading,
		"Status": func() error { return n.Status("x") },
	} {
		if err := f(); err != nil {
			t.Errorf("%s without NOTIFY_SOCKET: %v", name, err)
		}
	}
	var nilN *Notifier
	if nilN.Enabled() || nilN.Ready() != nil || nilN.Status("x") != nil {
		t.Error("nil *Notifier is not a no-op")
	}
}

func TestNotifierReadsSocketOnce(t *testing.T) {
	sock := listenNotify(t)
	var n Notifier
	n.Enabled()
	t.Setenv("NOTIFY_SOCKET", "")
	if !n.Enabled() {
		t.Fatal("Enabled() changed after first use")
	}
	sock.none()
}
