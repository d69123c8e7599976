package daemon

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// notifySink is a real NOTIFY_SOCKET: a unixgram socket collecting datagrams.
type notifySink struct {
	conn *net.UnixConn
	path string
	mu   sync.Mutex
	msgs []string
}

func newNotifySink(t *testing.T) *notifySink {
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &notifySink{conn: c, path: path}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return s
}

// flush sends a marker datagram and waits until it is read: the socket's queue is in
// order, so every datagram sent before the marker has been counted then.
func (s *notifySink) flush(t *testing.T) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := s.count("TEST_MARKER=1")
	if _, err := c.Write([]byte("TEST_MARKER=1")); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the notify socket's marker", func() bool { return s.count("TEST_MARKER=1") > n })
}

// count returns how many datagrams so far start with prefix.
func (s *notifySink) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// hangingFS is a FUSE filesystem whose statfs blocks until released.
type hangingFS struct {
	fs.Inode
	hang    atomic.Bool
	release chan struct{}
	calls   atomic.Int32
}

func (h *hangingFS) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if h.hang.Load() {
		h.calls.Add(1)
		<-h.release
	}
	out.Blocks, out.Bfree, out.Bavail, out.Bsize, out.Frsize = 1000, 500, 500, 4096, 4096
	return 0
}

var _ fs.NodeStatfser = (*hangingFS)(nil)

// TestSystemdNotifyAndWatchdog receives READY=1, STATUS=, WATCHDOG=1 and STOPPING=1 on a
// real NOTIFY_SOCKET; the pings go on while a watched FUSE path's statfs hangs, stop
// while the supervisor loop is stalled, and resume when it runs again.
func TestSystemdNotifyAndWatchdog(t *testing.T) {
	testenv.RequireRoot(t)
	sink := newNotifySink(t)
	t.Setenv("WATCHDOG_USEC", "400000")
	t.Setenv("WATCHDOG_PID", "")

	mnt := t.TempDir()
	root := &hangingFS{release: make(chan struct{})}
	root.hang.Store(true)
	srv, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "hangfs"}})
	if err != nil {
		t.Fatalf("fuse mount: %v", err)
	}
	t.Cleanup(func() {
		close(root.release) // unblock before unmounting
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})

	var stalled atomic.Bool
	unstall := make(chan struct{})
	local := t.TempDir()
	var logs testenv.SyncBuffer
	td := startDaemon(t, "site = []\n[[filesystem]]\npath = \""+local+"\"\n[[filesystem]]\npath = \""+mnt+"\"\n",
		func(o *Options) {
			o.Logger = slogTo(&logs)
			o.stallSupervisor = func() {
				if stalled.Load() {
					<-unstall
				}
			}
		})

	poll(t, time.Minute, "READY=1", func() bool { return sink.count("READY=1") >= 1 })
	poll(t, time.Minute, "STATUS=", func() bool { return sink.count("STATUS=") >= 1 })
	poll(t, time.Minute, "the FUSE filesystem to go stale", func() bool {
		st := td.d.Status()
		return len(st.Filesystems) == 2 && st.Filesystems[1].Stale
	})
	if root.calls.Load() != 1 {
		t.Errorf("%d statfs calls reached the hung filesystem, want exactly 1 outstanding", root.calls.Load())
	}
	// Pings keep coming while the statfs hangs.
	before := sink.count("WATCHDOG=1")
	poll(t, time.Minute, "watchdog pings while a statfs hangs", func() bool { return sink.count("WATCHDOG=1") >= before+3 })
	if status, _, _ := td.do(t, "GET", "/livez", ""); status != 200 {
		t.Fatalf("/livez %d while a statfs hangs", status)
	}

	// Stall the supervisor loop: /livez fails and pings stop.
	withheld := strings.Count(logs.String(), "watchdog ping withheld") // once an episode
	stalled.Store(true)
	poll(t, time.Minute, "/livez to report the stall", func() bool {
		status, _, _ := td.do(t, "GET", "/livez", "")
		return status == 503
	})
	// Wait for the watchdog goroutine to notice (it logs the withheld ping, after any ping
	// it sent before), and for the sink to have read every datagram sent until then; then
	// expect silence.
	poll(t, time.Minute, "the watchdog to withhold a ping", func() bool {
		return strings.Count(logs.String(), "watchdog ping withheld") > withheld
	})
	sink.flush(t)
	quiet := sink.count("WATCHDOG=1")
	time.Sleep(1200 * time.Millisecond)
	if got := sink.count("WATCHDOG=1"); got != quiet {
		t.Errorf("watchdog pinged %d times while the supervisor loop was stalled", got-quiet)
	}
	stalled.Store(false)
	close(unstall)
	poll(t, time.Minute, "pings to resume", func() bool { return sink.count("WATCHDOG=1") > quiet })

	// A reload is bracketed by RELOADING=1 and READY=1.
	readies := sink.count("READY=1")
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	poll(t, time.Minute, "RELOADING=1 then READY=1", func() bool {
		return sink.count("RELOADING=1") == 1 && sink.count("READY=1") > readies
	})

	td.stop()
	poll(t, time.Minute, "STOPPING=1", func() bool { return sink.count("STOPPING=1") >= 1 })
}
