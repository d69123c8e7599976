package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/jobs"
)

// hangMount mounts a FUSE filesystem whose statfs answers at once until hang is set, and
// then only once release is called (or the test ends). It is unmounted at the end.
func hangMount(t *testing.T) (mnt string, root *hangingFS, release func()) {
	t.Helper()
	testenv.RequireRoot(t)
	mnt = t.TempDir()
	root = &hangingFS{release: make(chan struct{})}
	srv, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "hangfs"}})
	if err != nil {
		t.Fatalf("fuse mount: %v", err)
	}
	var once sync.Once
	release = func() { once.Do(func() { close(root.release) }) }
	t.Cleanup(func() {
		release() // unblock before unmounting
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt, root, release
}

// hungLaunchDaemon runs a daemon whose only filesystem is a hangMount (no site: a launch
// measures that filesystem), with the stop grace given.
func hungLaunchDaemon(t *testing.T, grace time.Duration) (*testDaemon, *hangingFS, func()) {
	mnt, root, release := hangMount(t)
	td := startDaemon(t, fmt.Sprintf("site = []\n[[filesystem]]\npath = %q\nreclaim_below = \"0\"\nreplace_below = \"0\"\nreserve = \"0\"\n", mnt),
		func(o *Options) { o.stopGrace = grace })
	return td, root, release
}

type callAnswer struct {
	status     int
	retryAfter string
	body       string
	err        error
}

// launchInFlight starts a launch (deadline 10m: only the stop can end it early) whose
// statfs hangs, and returns once the daemon is answering it.
func launchInFlight(t *testing.T, td *testDaemon, root *hangingFS) <-chan callAnswer {
	t.Helper()
	root.hang.Store(true)
	got := make(chan callAnswer, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://sandboxd/v1/launch", strings.NewReader(launchBody))
		resp, err := td.http.Do(req)
		if err != nil {
			got <- callAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- callAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	}()
	// The launch cannot finish before release: a statfs begun before hang was set is
	// waited for, then its own hangs.
	testenv.Eventually(t, time.Minute, "the launch to be in flight on the hung statfs", func() bool {
		return td.d.calls.n.Load() == 1 && root.calls.Load() >= 1
	})
	return got
}

const launchBody = `{"deadline":"10m","need_bytes":"4KiB","need_inodes":0}`

// sigterm is the daemon's SIGTERM (serve's signal context ends) and returns what Run
// returned once it did; the test's own cleanup finds it too.
func sigterm(td *testDaemon) <-chan error {
	td.cancel()
	out := make(chan error, 1)
	go func() {
		err := <-td.done
		td.done <- err
		out <- err
	}()
	return out
}

// refusesNewCalls says whether a new connection to the socket is refused (no socket, or
// nobody listening): the stopping daemon took no new call, the next daemon takes them.
func refusesNewCalls(sock string) bool {
	c, err := net.Dial("unix", sock)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// TestStopLetsTheCallsInFlightFinish: a launch in flight when SIGTERM arrives gets its
// normal answer (200, the same verdict as the launch before it), not the busy "sandboxd is
// stopping" refusal it got when the stop cut every call short; meanwhile the socket takes
// no new connection (the next daemon's), the daemon keeps running until the call is
// answered (a refusal until then would still name the call's deadline), and exits 0 then.
func TestStopLetsTheCallsInFlightFinish(t *testing.T) {
	td, root, release := hungLaunchDaemon(t, 10*time.Minute) // only the call's end ends the stop
	status, _, before := td.do(t, "POST", "/v1/launch", launchBody)
	if status != 200 {
		t.Fatalf("the launch before the stop: %d %s", status, before)
	}
	got := launchInFlight(t, td, root)
	ran := sigterm(td)
	testenv.Eventually(t, time.Minute, "the socket to refuse new connections after SIGTERM", func() bool { return refusesNewCalls(td.sock) })
	select {
	case err := <-ran:
		t.Fatalf("Run returned (%v) while a call was in flight", err)
	case a := <-got:
		t.Fatalf("the launch in flight was answered before its statfs was: %+v", a)
	default:
	}
	fs := firstFS(td.d.current().pressure.Snapshot())
	if p := td.d.deadlineProblem(fs, 2*time.Second, nil); strings.Contains(p.Detail, "stopping") {
		t.Errorf("within the stop grace a refusal says %q; the call is not cut short until the grace ends", p.Detail)
	}

	release()
	a := <-got
	if a.err != nil || a.status != 200 {
		t.Fatalf("the launch in flight at SIGTERM: %d %v %s, want 200", a.status, a.err, a.body)
	}
	var b0, b1 api.LaunchResponse
	jsonInto(t, before, &b0)
	jsonInto(t, a.body, &b1)
	if !b1.OK || b1.Verdict != b0.Verdict || b1.Filesystem == nil || b1.Filesystem.Path != b0.Filesystem.Path {
		t.Errorf("the launch in flight at SIGTERM answered %s; the one before: %s", a.body, before)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop once the call in flight was answered")
	}
}

// TestStopCutsShortACallThatCannotFinish: a launch whose statfs never answers is cut short
// when the stop grace ends: busy 503 with Retry-After, saying sandboxd is stopping and that
// the next daemon answers a retry; the daemon exits (0) without waiting for the statfs.
func TestStopCutsShortACallThatCannotFinish(t *testing.T) {
	td, root, _ := hungLaunchDaemon(t, 300*time.Millisecond)
	got := launchInFlight(t, td, root)
	ran := sigterm(td)
	var a callAnswer
	select {
	case a = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("the hung launch was not answered after the stop grace")
	}
	if a.err != nil || a.status != 503 || a.retryAfter != "1" || !strings.Contains(a.body, `"busy"`) ||
		!strings.Contains(a.body, "sandboxd is stopping: the call was cut short before statfs answered; retry: the next daemon answers it") {
		t.Errorf("the launch cut short by the stop: %d (Retry-After %q) %v %s", a.status, a.retryAfter, a.err, a.body)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not stop with a hung call in flight")
	}
	if root.calls.Load() == 0 {
		t.Error("no statfs hung: the test proved nothing")
	}
}

func jsonInto(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
}

// spawnOffered begins a spawn of job id on td and returns it once the daemon offered the
// job's cgroup (the call is in flight: its report is awaited).
func spawnOffered(t *testing.T, td *testDaemon, id string) *client.Spawning {
	t.Helper()
	ttl := api.Duration(10 * time.Minute)
	sp, err := td.client.BeginSpawn(context.Background(), api.JobRequest{ID: id, TTL: &ttl})
	if err != nil {
		t.Fatalf("POST /v1/jobs/spawn: %v", err)
	}
	t.Cleanup(sp.Close)
	return sp
}

// startInCgroup starts sleep in the offered cgroup, as sandboxd run does (clone3 with
// CLONE_INTO_CGROUP), and returns its pid and pidfd; it is killed at the end.
func startInCgroup(t *testing.T, sp *client.Spawning) (int, int) {
	t.Helper()
	pidfd := -1
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "600"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.CgroupFD, PidFD: &pidfd}})
	if err != nil {
		t.Fatalf("clone3 into the offered cgroup: %v", err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); syscall.Wait4(pid, nil, syscall.WNOHANG, nil) })
	return pid, pidfd
}

// TestStopRegistersASpawnReportedWithinTheGrace: a `sandboxd run` whose spawn was offered
// before SIGTERM and whose report comes after it gets its job registered (running, its
// pid) and journaled: the next daemon lists it. A spawn whose report does not come within
// the grace registers nothing, says sandboxd is stopping, and what was started in its
// cgroup is killed: no CMD runs unregistered.
func TestStopRegistersASpawnReportedWithinTheGrace(t *testing.T) {
	root := testenv.CgroupRoot(t)
	td := startDaemon(t, fmt.Sprintf("site = []\n[jobs]\ncgroup_root = %q\ngrace = \"500ms\"\n", root),
		func(o *Options) { o.stopGrace = 10 * time.Minute })
	text, err := os.ReadFile(filepath.Join(td.dir, "sandboxd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	sp := spawnOffered(t, td, "stop-sp")
	ran := sigterm(td)
	testenv.Eventually(t, time.Minute, "the socket to refuse new connections after SIGTERM", func() bool { return refusesNewCalls(td.sock) })
	pid, pidfd := startInCgroup(t, sp)
	if err := sp.Spawned(pidfd); err != nil {
		t.Fatal(err)
	}
	syscall.Close(pidfd)
	j, err := sp.Result()
	if err != nil {
		t.Fatalf("a spawn reported during the stop: %v", err)
	}
	if j.PID != pid || j.State != api.JobRunning {
		t.Errorf("a spawn reported during the stop: pid %d state %s, want %d running", j.PID, j.State, pid)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}

	// The next daemon, on the same registry and cgroup root, has it.
	next := startDaemonIn(t, td.dir, string(text), func(o *Options) { o.stopGrace = 300 * time.Millisecond })
	got, err := next.client.Job(t.Context(), "stop-sp")
	if err != nil || got.PID != pid || got.State != api.JobRunning {
		t.Fatalf("the next daemon's job stop-sp: %+v %v, want pid %d running", got, err, pid)
	}

	// A report that does not come within the grace: nothing registered, the process killed.
	sp2 := spawnOffered(t, next, "stop-sp2")
	pid2, pidfd2 := startInCgroup(t, sp2)
	defer syscall.Close(pidfd2)
	ran = sigterm(next)
	_, err = sp2.Result()
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Problem.Code != api.CodeBusy || !strings.Contains(pe.Problem.Detail, "sandboxd is stopping") ||
		!strings.Contains(pe.Problem.Detail, "not registered") {
		t.Errorf("a spawn not reported within the grace: %v, want busy saying sandboxd is stopping and nothing registered", err)
	}
	var ws syscall.WaitStatus
	testenv.Eventually(t, time.Minute, "the process started in the unreported spawn's cgroup to be killed", func() bool {
		got, _ := syscall.Wait4(pid2, &ws, syscall.WNOHANG, nil)
		return got == pid2
	})
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the process started in the unreported spawn's cgroup: %v, want killed", ws)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	third := startDaemonIn(t, td.dir, string(text))
	if _, err := third.client.Job(t.Context(), "stop-sp2"); err == nil {
		t.Error("the unreported spawn stop-sp2 is registered with the next daemon")
	}
	if _, err := third.client.Job(t.Context(), "stop-sp"); err != nil {
		t.Errorf("stop-sp: %v", err)
	}
}

// daemonGoroutines are the stacks of the goroutines running a method of d (a frame whose
// receiver, the first argument in a stack dump, is d).
func daemonGoroutines(d *Daemon) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	recv := ".(*Daemon)."
	ptr := fmt.Sprintf("(%p", d)
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, recv) && strings.Contains(line, ptr) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestNothingRunsAfterRunReturns: once Run returned, the daemon starts no more work. A
// job whose end the registry reports after the stop (the registry outlives this daemon)
// started a release of its mounts on a goroutine of its own, outside Run's wait group:
// it wrote mounts.json after Run returned, into a state directory a test's cleanup was
// removing (one /tmp/sandboxd-test-*/state/mounts.json was left per test run). The
// job's mounts are released by the next daemon's start-up instead
// (TestRegisteredMountsAfterRestartWithJobs).
func TestNothingRunsAfterRunReturns(t *testing.T) {
	m := testJobs(t)
	td := startTiedMountDaemon(t, managerTie{m})
	if _, err := m.Register(api.JobRequest{ID: "after1", PID: sleeper(t)}, jobs.Caller{}); err != nil {
		t.Fatal(err)
	}
	s := newSessionMount(t, td, "sess-after", "after1")
	ran := sigterm(td)
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The daemon's end-of-job callback has run once this one, registered after it, has.
	called := make(chan struct{}, 1)
	m.OnEnd(func(key, _ string) {
		if key == "after1" {
			called <- struct{}{}
		}
	})
	// A goroutine the callback started would wait for this lock (d.current()), so it is
	// still there when the stacks are read.
	td.d.cfgMu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m.End(ctx, "after1", "deleted", true); err != nil {
		td.d.cfgMu.Unlock()
		t.Fatal(err)
	}
	<-called
	left := daemonGoroutines(td.d)
	td.d.cfgMu.Unlock()
	for _, g := range left {
		t.Errorf("a goroutine of the daemon runs after Run returned:\n%s", g)
	}
	if !fuseMountedAt(s.mnt) {
		t.Error("the stopped daemon released the job's mount after Run returned")
	}
}
