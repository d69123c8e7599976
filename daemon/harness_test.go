package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Parallel tests. A few long tests that mostly wait (on a growth window, a retry period,
// a refusal window) call t.Parallel (make test runs them 8 at a time: -parallel 8). Go runs
// them together only after every serial test has returned, so a serial test that counts
// this process's goroutines, fds or children never sees them. A test joins them only if
// everything it asserts is about its own daemon, sockets, tmpfs and logger: no
// process-wide counts (heap, goroutines, children), no t.Setenv, no shared paths, and no
// CPU-heavy load (TestManyConnections stays serial).

// testDaemon is a daemon running on a socket in a temp dir, stopped at cleanup.
type testDaemon struct {
	d      *Daemon
	sock   string
	dir    string
	client *client.Client
	http   *http.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once // stop runs once: a test may stop the daemon before its cleanup does
}

// baseConfig is a config safe for tests (body comes first: top-level keys and arrays of
// tables; it must not open [server], [health] or [reclaim]): no auto-discovered caches (so no test can
// reclaim this machine's real caches), state in dir, and fast sampling.
func baseConfig(dir string, body string) string {
	return fmt.Sprintf(`%s
[server]
socket = %q
socket_mode = "0666"
state_dir = %q
[health]
sample_interval = "100ms"
transition_period = "0s"
[reclaim]
auto_caches = []
protect = ["/home", "/root"]
`, body, filepath.Join(dir, "s.sock"), filepath.Join(dir, "state"))
}

func parseConfig(t testing.TB, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(text), "test.toml")
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, text)
	}
	return cfg
}

// startDaemon runs a daemon on cfgText (completed by baseConfig) and waits until ready.
func startDaemon(t testing.TB, body string, mutate ...func(*Options)) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxd-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return startDaemonIn(t, dir, baseConfig(dir, body), mutate...)
}

// startDaemonIn runs a daemon on the complete config text in dir (its socket and state
// dir live there), as a restart of the same daemon does, and waits until ready.
func startDaemonIn(t testing.TB, dir, text string, mutate ...func(*Options)) *testDaemon {
	t.Helper()
	cfg := parseConfig(t, text)
	if cfg.Jobs.RegistryDir == "/run/sandboxd" { // the default: never the machine's own
		cfg.Jobs.RegistryDir = filepath.Join(dir, "registry")
	}
	cfgPath := filepath.Join(dir, "sandboxd.toml")
	os.WriteFile(cfgPath, []byte(text), 0o644)
	opts := Options{Config: cfg, ConfigPath: cfgPath, Logger: testLogger(t), Version: "test"}
	for _, m := range mutate {
		m(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := ListenUnix(cfg.Server.Socket, cfg.Server.SocketMode, cfg.Server.SocketGroup)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td := &testDaemon{d: d, sock: cfg.Server.Socket, dir: dir, cancel: cancel, done: make(chan error, 1),
		client: &client.Client{SocketPath: cfg.Server.Socket}}
	td.http = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", td.sock)
	}}}
	go func() { td.done <- d.Run(ctx, ln, nil) }()
	t.Cleanup(td.stop)
	td.waitReady(t)
	return td
}

func (td *testDaemon) stop() {
	td.once.Do(func() {
		td.cancel()
		select {
		case <-td.done:
		case <-time.After(time.Minute): // patience for a loaded machine; Run returns once its work is done
		}
	})
}

func (td *testDaemon) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := td.http.Get("http://sandboxd/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("daemon did not become ready within a minute")
}

// do sends a raw request and returns status, content type and body.
func (td *testDaemon) do(t testing.TB, method, path, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://sandboxd"+path, strings.NewReader(body))
	resp, err := td.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SANDBOXD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// poll waits until f is true or fails the test after timeout.
func poll(t testing.TB, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, f)
}
