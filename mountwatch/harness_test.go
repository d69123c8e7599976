package mountwatch

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"golang.org/x/sys/unix"
)

// testBin is a copy of the test binary in a world-readable directory, so that probe
// children running as another uid can execute it.
var testBin string

// TestMain dispatches the roles the test binary is re-executed for: the probe child
// (mount-probe) and the test FUSE server (internal/fusetest).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "mount-probe" {
		os.Exit(ProbeMain(os.Args[2:], os.Stdout))
	}
	if bin := os.Getenv(probeOwnerChildEnv); bin != "" {
		os.Exit(probeOwnerChild(bin))
	}
	fusetest.Main()
	dir, err := os.MkdirTemp("", "mountwatch-bin-")
	if err == nil {
		os.Chmod(dir, 0o755)
		testBin = filepath.Join(dir, "mountwatch.test")
		err = copyFile(os.Args[0], testBin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "copy test binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fixture is one test's world: a world-traversable base directory with a mountpoint, a
// backing directory for the FUSE server (internal/fusetest, which kills its servers at
// cleanup) and a credential file, all cleaned up (connections aborted, mounts detached,
// guard lifted) at the end.
type fixture struct {
	t                        *testing.T
	base, mnt, backing, cred string
	fusectl                  string

	mu      sync.Mutex
	events  []api.Event
	w       *Watcher
	onEvent func(api.Event) // set before run; called from the watcher's goroutines
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	testenv.RequireRoot(t)
	base, err := os.MkdirTemp("", "mountwatch-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	f := &fixture{t: t, base: base, mnt: filepath.Join(base, "mnt"), backing: filepath.Join(base, "backing"),
		cred: filepath.Join(base, "cred.json"), fusectl: filepath.Join(base, "fusectl")}
	for _, d := range []string{f.mnt, f.backing} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	t.Cleanup(f.cleanup)
	return f
}

// cleanup aborts every FUSE connection under base (freeing hung callers), lazily unmounts
// everything under base and removes it. The servers' own cleanup (fusetest) runs first
// and kills them.
func (f *fixture) cleanup() {
	entries, _ := readMountinfo("/proc")
	var mine []mountEntry
	for _, e := range entries {
		if within(e.MountPoint, f.base) {
			mine = append(mine, e)
		}
	}
	ctl := f.fusectl
	if e, ok := topmostAt(entries, ctl); !ok || e.FSType != "fusectl" {
		os.MkdirAll(ctl, 0o755)
		unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	for _, e := range mine {
		if isFUSE(e.FSType) {
			os.WriteFile(filepath.Join(ctl, strconv.Itoa(int(e.Minor)), "abort"), []byte("1"), 0)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].MountID > mine[j].MountID })
	for _, e := range mine {
		unix.Unmount(e.MountPoint, unix.MNT_DETACH)
	}
	for i := 0; i < 5; i++ { // the fusectl mount may sit under another one
		if err := unix.Unmount(ctl, unix.MNT_DETACH); err != nil {
			break
		}
	}
	setImmutable(f.mnt, false)
	if err := os.RemoveAll(f.base); err != nil {
		f.t.Logf("cleanup: %v", err)
	}
	// No probe server outlives its test: the watcher's Run closed them, and those stuck
	// in a hung mount were freed by the aborts above. (A server started after Run
	// returned, by a remediation still running, once stayed for the life of the process,
	// and TestProbeServerLivesAndIsReplaced counted it.)
	deadline := time.Now().Add(time.Minute)
	for len(probeServerPids()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pids := probeServerPids(); len(pids) > 0 {
		f.t.Errorf("cleanup: probe servers %v outlived the test", pids)
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// server prepares the fixture's test filesystem on its mountpoint and backing directory
// without starting it (a remount command may be the first to start it).
func (f *fixture) server(o fusetest.Options) *fusetest.Server {
	o.Backing, o.Binary = f.backing, testBin
	return fusetest.New(f.t, f.mnt, o)
}

// startServer starts the fixture's test filesystem and waits until it is mounted.
func (f *fixture) startServer(o fusetest.Options) *fusetest.Server {
	f.t.Helper()
	s := f.server(o)
	if err := s.Run(); err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) opts(mounts ...MountConfig) Options {
	return Options{
		Mounts: mounts, ProbeCommand: []string{testBin, "mount-probe"}, FusectlDir: f.fusectl,
		Tick: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond, RetryMax: time.Second,
		CommandTimeout: 20 * time.Second,
		Events: func(e api.Event) {
			f.mu.Lock()
			f.events = append(f.events, e)
			f.mu.Unlock()
			if f.onEvent != nil {
				f.onEvent(e)
			}
			f.t.Logf("event %s %s: %s", e.Kind, e.Subject, e.Message)
		},
	}
}

// mountCfg is a fast-probing config for the fixture's mountpoint.
func (f *fixture) mountCfg(name string) MountConfig {
	return MountConfig{Name: name, Path: f.mnt, Required: true, Canary: true,
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second, MaxRemountsPerHour: 20}
}

// run starts a watcher; it stops when the test ends.
func (f *fixture) run(o Options) *Watcher {
	f.t.Helper()
	w, err := New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	f.t.Cleanup(func() { cancel(); <-done })
	f.w = w
	return w
}

func (f *fixture) mountState(name string) api.Mount {
	for _, m := range f.w.Snapshot() {
		if m.Name == name {
			return m
		}
	}
	f.t.Fatalf("mount %s not in snapshot", name)
	return api.Mount{}
}

// waitFor polls cond for up to a minute.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	waited := false
	defer func() {
		if !waited { // Eventually failed the test: show what the watcher saw by then
			f.t.Logf("snapshot when the wait ended: %+v", f.w.Snapshot())
		}
	}()
	testenv.Eventually(f.t, time.Minute, what, cond)
	waited = true
}

func (f *fixture) waitState(name, state string) api.Mount {
	f.t.Helper()
	var m api.Mount
	f.waitFor("mount "+name+" "+state, func() bool { m = f.mountState(name); return m.State == state && m.LastProbeAt != nil })
	return m
}

// eventsWith returns the events of kind whose message contains substr.
func (f *fixture) eventsWith(kind, substr string) []api.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Event
	for _, e := range f.events {
		if (kind == "" || e.Kind == kind) && strings.Contains(e.Message, substr) {
			out = append(out, e)
		}
	}
	return out
}
