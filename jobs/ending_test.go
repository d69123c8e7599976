package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
)

// A process that ignores SIGTERM is SIGKILLed after the grace; the job is killed.
// Both with cgroup.kill and with the freeze/kill/thaw fallback of kernels before 5.14.
func TestSIGTERMIgnoredIsKilledAfterGrace(t *testing.T) {
	for _, noKill := range []bool{false, true} {
		t.Run(fmt.Sprintf("noCgroupKill=%v", noKill), func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.NoCgroupKill = noKill; o.Grace = 300 * time.Millisecond })
			pids := filepath.Join(t.TempDir(), "pids")
			cmd := spawn(t, `trap '' TERM; while [ ! -e `+pids+`.go ]; do sleep 0.05; done
sh -c 'trap "" TERM; echo $$ >> `+pids+`; while :; do sleep 1; done' & echo $$ >> `+pids+`; while :; do sleep 1; done`)
			if _, err := f.m.Register(api.JobRequest{ID: "stubborn", PID: cmd.Process.Pid}, Caller{}); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(pids+".go", nil, 0o644)
			recorded := readPids(t, pids, 2)
			start := time.Now()
			v, err := f.m.End(context.Background(), "stubborn", api.ReasonDeleted, true)
			if err != nil {
				t.Fatal(err)
			}
			if v.State != api.JobKilled {
				t.Fatalf("state %s, want killed", v.State)
			}
			if took := time.Since(start); took < 300*time.Millisecond {
				t.Errorf("End returned after %s, before the grace: SIGTERM cannot have been ignored", took)
			}
			for _, p := range recorded {
				if alive(p) {
					t.Errorf("process %d survived SIGKILL", p)
				}
			}
		})
	}
}

// A job that cannot be emptied — its process is stuck in a request to a hung FUSE
// server, where even SIGKILL waits (fuse request_wait_answer) — becomes leaked, raises
// JobOverdue and is listed by the leak check; once the mount is aborted, --clean ends it
// and the check still reports it.
func TestUnemptiableJobLeaks(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond; o.KillWait = 500 * time.Millisecond })
	cmd, srv, block := lsInHungMount(t)
	j, err := f.m.Register(api.JobRequest{ID: "leaky", PID: cmd.Process.Pid}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	block()
	v, err := f.m.End(context.Background(), "leaky", api.ReasonDeleted, true)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != api.JobLeaked {
		t.Fatalf("state %s, want leaked", v.State)
	}
	conds := f.m.Conditions()
	if len(conds) != 1 || conds[0].Type != api.CondJobOverdue || conds[0].Subject != "leaky" {
		t.Errorf("conditions = %+v, want one JobOverdue for leaky", conds)
	}
	rep, err := f.m.Leaks(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || rep.Leaks[0].Kind != api.LeakRegistered || rep.Leaks[0].Processes != 1 {
		t.Fatalf("leaks = %+v, want the leaked job with its process", rep.Leaks)
	}
	// --clean cannot end a process the kernel will not let go: it says so, and the
	// check still reports the leak.
	rep, err = f.m.Leaks(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 1 || rep.Leaks[0].Cleaned || rep.Leaks[0].Error == "" {
		t.Fatalf("leaks --clean on a hung process = %+v, want it reported, not cleaned, with the error", rep.Leaks)
	}
	if err := srv.Abort(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the leaked job to empty once the mount is aborted", func() bool { v, _ := f.m.Get("leaky"); return v.State == api.JobKilled })
	if n := countProcs(j.Cgroup); n != 0 {
		t.Errorf("%d processes left", n)
	}
	if len(f.m.Conditions()) != 0 {
		t.Errorf("JobOverdue still raised after the job emptied: %+v", f.m.Conditions())
	}
	if got := f.m.LastLeaks()[api.LeakRegistered]; got != 1 {
		t.Errorf("last check's registered leaks = %d, want 1 (a cleaned leak is still a leak)", got)
	}
}

// Heartbeats keep a job past its ttl; max_lifetime ends it anyway.
func TestHeartbeatsExtendUntilMaxLifetime(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond })
	cmd := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "hb", PID: cmd.Process.Pid, TTL: dur(time.Second),
		MaxLifetime: dur(5 * time.Second)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Beats every 100 ms for 3x the ttl; a loaded machine may delay one by most of a ttl.
	for time.Since(start) < 3*time.Second {
		if _, err := f.m.Heartbeat("hb", 0); err != nil {
			t.Fatalf("heartbeat after %s: %v", time.Since(start), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, _ := f.m.Get("hb"); v.State != api.JobRunning || v.Heartbeats < 5 {
		t.Fatalf("after 3s of heartbeats (3x its ttl): %+v, want running", v)
	}
	// Beating on does not pass max_lifetime.
	waitFor(t, time.Minute, "max_lifetime to end the job", func() bool {
		f.m.Heartbeat("hb", time.Hour)
		v, _ := f.m.Get("hb")
		return v.State == api.JobKilled
	})
	if v, _ := f.m.Get("hb"); v.Reason != api.ReasonMaxLifetime {
		t.Errorf("reason %q, want max_lifetime", v.Reason)
	}
	if alive(cmd.Process.Pid) {
		t.Error("the job's process is alive after max_lifetime")
	}
}

// A job whose processes exit by themselves is ended, reason exited, its cgroup removed.
func TestExitedJob(t *testing.T) {
	f := newFixture(t, nil)
	gate := filepath.Join(t.TempDir(), "go")
	cmd := spawn(t, `while [ ! -e `+gate+` ]; do sleep 0.05; done; exit 0`)
	j, err := f.m.Register(api.JobRequest{ID: "quick", PID: cmd.Process.Pid}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(gate, nil, 0o644)
	waitFor(t, time.Minute, "the job to be seen ended", func() bool { v, _ := f.m.Get("quick"); return v.State == api.JobEnded })
	if v, _ := f.m.Get("quick"); v.Reason != api.ReasonExited {
		t.Errorf("reason %q, want exited", v.Reason)
	}
	if _, err := os.Stat(j.Cgroup); !os.IsNotExist(err) {
		t.Errorf("cgroup of an exited job left behind: %v", err)
	}
}

// The daemon stops (as after SIGKILL: nothing is saved at stop that was not saved at
// registration) and a new one on the same state dir finds the job and still ends it when
// its lease lapses; a job whose lease lapsed while it was down is ended at start.
func TestRestartKeepsLeases(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond })
	long := spawn(t, `exec sleep 600`)
	short := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "long", PID: long.Process.Pid, TTL: dur(10 * time.Second)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Register(api.JobRequest{ID: "short", PID: short.Process.Pid, TTL: dur(300 * time.Millisecond)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	// Stop without letting Run save: copy the journal as registration left it.
	journal := filepath.Join(f.opts.RegistryDir, journalName)
	doc, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	f.shutdown()
	os.WriteFile(journal, doc, 0o600)
	time.Sleep(500 * time.Millisecond) // "short" lapses while no daemon runs
	if !alive(short.Process.Pid) {
		t.Fatal("nothing should end a job while the daemon is down")
	}
	f.opts.State = nil
	f.opts.State = stateStore(f.state)
	f.start()
	v, ok := f.m.Get("long")
	if !ok || v.State != api.JobRunning {
		t.Fatalf("after restart: long = %+v, %v; want running", v, ok)
	}
	waitFor(t, time.Minute, "the lapsed job to end at start", func() bool { v, _ := f.m.Get("short"); return v.State == api.JobKilled })
	if alive(short.Process.Pid) {
		t.Error("short's process survived")
	}
	if !alive(long.Process.Pid) {
		t.Fatal("long was ended before its lease lapsed")
	}
	waitFor(t, time.Minute, "long's lease to lapse after the restart", func() bool { v, _ := f.m.Get("long"); return v.State == api.JobKilled })
	if v, _ := f.m.Get("long"); v.Reason != api.ReasonLeaseExpired {
		t.Errorf("long's reason %q", v.Reason)
	}
}

// Pid reuse: the registered pid exits and a process outside the job gets the same pid;
// ending the job (which still has another process) never signals it.
func TestReusedPidNeverSignalled(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond })
	gate := filepath.Join(t.TempDir(), "go")
	child := filepath.Join(t.TempDir(), "child")
	// The child leaves the process group (setsid): a pid stays allocated while it names a
	// live group, and the test needs the first pid free for reuse.
	cmd := spawn(t, `while [ ! -e `+gate+` ]; do sleep 0.05; done; setsid sh -c 'echo $$ > `+child+`; exec sleep 600' & sleep 0.2; exit 0`)
	p := cmd.Process.Pid
	if _, err := f.m.Register(api.JobRequest{ID: "reuse", PID: p}, Caller{}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(gate, nil, 0o644)
	inJob := readPids(t, child, 1)[0]
	waitFor(t, time.Minute, "the first process to exit", func() bool { return !alive(p) })
	cmd.Process.Wait() // reap it so its pid is free
	stranger := reusePid(t, p)
	if _, err := f.m.End(context.Background(), "reuse", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
	if alive(inJob) {
		t.Error("the job's remaining process survived")
	}
	if !alive(stranger.Pid) {
		t.Errorf("process %d, which reused the job's pid outside the job, was signalled", p)
	}
}

// reusePid starts a process outside any job with pid (a shell sets ns_last_pid and forks
// at once; other processes of the machine may fork in between, so it tries again).
func reusePid(t *testing.T, pid int) *os.Process {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pid")
	for try := 0; try < 200; try++ {
		spawn(t, `echo `+strconv.Itoa(pid-1)+` > /proc/sys/kernel/ns_last_pid; sleep 600 & echo $! > `+out+`; wait`)
		got := readPids(t, out, 1)[0]
		os.Remove(out)
		if got == pid {
			p, _ := os.FindProcess(got)
			return p
		}
		if try < 3 {
			t.Logf("wanted %d, got %d", pid, got)
		}
		syscall.Kill(got, syscall.SIGKILL)
	}
	t.Skipf("could not get pid %d again (other processes fork too fast)", pid)
	return nil
}

// lsInHungMount starts an ls of a fresh FUSE mount, held back until block: block hangs
// the server, lets ls go and waits until ls is blocked where SIGKILL cannot free it, its
// request read by the server, which holds it (before that, the kernel drops the request
// of a killed caller, and ls dies at SIGTERM). The mount is aborted when the test ends,
// before spawn's cleanup reaps ls.
func lsInHungMount(t *testing.T) (cmd *exec.Cmd, srv *fusetest.Server, block func()) {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mnt, 0o755)
	srv = fusetest.Start(t, mnt, fusetest.Options{})
	gate := filepath.Join(t.TempDir(), "go")
	cmd = spawn(t, `while [ ! -e `+gate+` ]; do sleep 0.05; done; exec ls `+mnt)
	t.Cleanup(func() { srv.Abort() })
	return cmd, srv, func() {
		t.Helper()
		srv.Hang()
		os.WriteFile(gate, nil, 0o644)
		waitFor(t, time.Minute, "ls to block in the hung mount, its request held by the server", func() bool {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/wchan")
			return (strings.Contains(string(b), "fuse") || strings.Contains(string(b), "request_wait")) && srv.Held() > 0
		})
	}
}
