package jobs

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// testRoot is a cgroup root unique to t (named after the test and this pid) under the
// cgroup2 mount (testenv.CgroupRoot), removed with everything in it when t ends, also on
// failure: destroyTree, the package's own kill and removal, runs first.
func testRoot(t testing.TB) string {
	t.Helper()
	root := testenv.CgroupRoot(t)
	t.Cleanup(func() { destroyTree(t, root) })
	return root
}

// destroyTree kills every process under dir and removes its cgroups.
func destroyTree(t testing.TB, dir string) {
	if _, err := os.Stat(dir); err != nil {
		return
	}
	cg := cgroupFS{procRoot: "/proc"}
	walkCgroups(dir, func(d string) error {
		cg.killAll(context.Background(), d, true)
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitEvents(ctx, dir, func(p, _ bool) bool { return !p })
	if err := removeTree(dir); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

type fixture struct {
	t     testing.TB
	m     *Manager
	root  string
	state string
	opts  Options
	stop  context.CancelFunc
	done  chan struct{}
}

// newFixture builds a Manager on a test cgroup root and runs it until t ends.
func newFixture(t testing.TB, mod func(*Options)) *fixture {
	t.Helper()
	root := testRoot(t)
	f := &fixture{t: t, root: root, state: t.TempDir()}
	f.opts = Options{CgroupRoot: root, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Grace: 2 * time.Second, KillWait: 3 * time.Second,
		State: state.Open(f.state), RegistryDir: f.state + "/registry"}
	if mod != nil {
		mod(&f.opts)
	}
	f.start()
	t.Cleanup(f.shutdown)
	return f
}

func (f *fixture) start() {
	f.m = New(f.opts)
	if ok, why := f.m.Available(); !ok {
		f.t.Fatalf("jobs unavailable on the test root: %s", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan struct{})
	go func() { defer close(f.done); f.m.Run(ctx) }()
}

func (f *fixture) shutdown() {
	if f.stop != nil {
		f.stop()
		<-f.done
		f.stop = nil
	}
}

// spawn starts a shell script as a new process and reaps it when the test ends.
func spawn(t testing.TB, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Process.Kill()
		<-waited
	})
	return cmd
}

// alive says whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// waitFor polls cond until it holds or d passes (a test's patience, not a timing assertion).
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readPids reads a file of pids, one a line, that a test script writes.
func readPids(t testing.TB, path string, n int) []int {
	t.Helper()
	var out []int
	waitFor(t, time.Minute, "pids in "+path, func() bool {
		b, _ := os.ReadFile(path)
		out = out[:0]
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				out = append(out, p)
			}
		}
		return len(out) >= n
	})
	return out
}

func stateStore(dir string) *state.Store { return state.Open(dir) }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestMain(m *testing.M) {
	fusetest.Main()
	os.Exit(m.Run())
}
