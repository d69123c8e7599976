package daemon

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/fusetest"
	"github.com/sandboxd/sandboxd/internal/state"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/jobs"
)

// The tie of registered mounts to jobs (issue 12), with the real jobs registry (package
// jobs) on a cgroup v2 root of the test's own, and real FUSE mounts.

// testJobs runs a jobs registry on a cgroup root unique to t; every job is ended and the
// cgroups removed when t ends (testenv.CgroupRoot).
func testJobs(t *testing.T) *jobs.Manager {
	t.Helper()
	root := testenv.CgroupRoot(t)
	m := jobs.New(jobs.Options{CgroupRoot: root, Grace: time.Second, KillWait: 3 * time.Second, State: state.Open(t.TempDir())})
	if ok, why := m.Available(); !ok {
		t.Fatalf("jobs unavailable: %s", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() {
		for _, j := range m.List() {
			ectx, ecancel := context.WithTimeout(context.Background(), 15*time.Second)
			m.End(ectx, j.ID, "deleted", true)
			ecancel()
		}
		cancel()
		<-done
	})
	return m
}

// sleeper starts a process for a job and reaps it at the end of the test.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd.Process.Pid
}

// switchTie forwards to a managerTie until off is set (a stopped daemon hears no more).
type switchTie struct {
	managerTie
	off atomic.Bool
}

func (s *switchTie) onEnd(f func(id, reason string)) {
	s.managerTie.onEnd(func(id, reason string) {
		if !s.off.Load() {
			f(id, reason)
		}
	})
}

func withJobs(j jobTie) func(*Options) { return func(o *Options) { o.mountJobs = j } }

// sessionMount is one session's FUSE mount with a link into it, registered for job.
type sessionMount struct {
	name, mnt, link string
	srv             *fusetest.Server
}

func newSessionMount(t *testing.T, td *testDaemon, name, job string) sessionMount {
	t.Helper()
	s := sessionMount{name: name, mnt: mountDir(t, name+"-agent"), link: filepath.Join(t.TempDir(), "agent-files")}
	s.srv = fusetest.Start(t, s.mnt, fusetest.Options{})
	req := fastReg(name, s.mnt)
	req.Job, req.Links = job, []api.LinkSpec{{Path: s.link, Target: s.mnt}}
	if m := mustRegister(t, td, req); m.Job != job || !m.Registered {
		t.Fatalf("registered: %+v", m)
	}
	td.waitMountState(t, name, api.MountHealthy)
	poll(t, time.Minute, "the link", func() bool { tgt, err := os.Readlink(s.link); return err == nil && tgt == s.mnt })
	return s
}

// checkReleased waits until the mount is released: no longer watched, its link gone,
// unmounted, its FUSE server exited, and the release event names why.
func (s sessionMount) checkReleased(t *testing.T, td *testDaemon, why string) {
	t.Helper()
	pid := s.srv.Pid()
	poll(t, time.Minute, "the release of "+s.name, func() bool {
		return len(td.eventsWith(t, api.EventMountRegistry, "released mount "+s.name)) > 0
	})
	ev := td.eventsWith(t, api.EventMountRegistry, "released mount "+s.name)[0]
	if !strings.Contains(ev.Message, why) || !strings.Contains(ev.Message, "unmounted") {
		t.Errorf("release event %q, want it to name %q and say unmounted", ev.Message, why)
	}
	if code, _, _ := td.do(t, "GET", "/v1/mounts/"+s.name, ""); code != 404 {
		t.Errorf("%s still listed after the release: %d", s.name, code)
	}
	if _, err := os.Lstat(s.link); !os.IsNotExist(err) {
		t.Errorf("link %s still there: %v", s.link, err)
	}
	if fuseMountedAt(s.mnt) {
		t.Errorf("%s still mounted", s.mnt)
	}
	poll(t, time.Minute, "the FUSE server of "+s.name+" to exit", func() bool { return serverGone(pid) })
}

// TestJobTiedMountReleasedWithTheJob: a mount tied to a job is released when the job's
// lease lapses, another when its job's processes exit, another when its job is deleted: links gone, unmounted, FUSE server
// exited, events recorded. A registration naming a job that does not run is 404.
func TestJobTiedMountReleasedWithTheJob(t *testing.T) {
	m := testJobs(t)
	td := startTiedMountDaemon(t, managerTie{m})
	// A job whose lease lapses: 2 s TTL and no heartbeat.
	ttl := api.Duration(2 * time.Second)
	if _, err := m.Register(api.JobRequest{ID: "lapse1", PID: sleeper(t), TTL: &ttl}, jobs.Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Register(api.JobRequest{ID: "del1", PID: sleeper(t)}, jobs.Caller{}); err != nil {
		t.Fatal(err)
	}
	// A job whose processes exit by themselves, once its mount is set up.
	gate := filepath.Join(t.TempDir(), "exit")
	quick := exec.Command("sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.05; done")
	if err := quick.Start(); err != nil {
		t.Fatal(err)
	}
	go quick.Wait()
	t.Cleanup(func() { quick.Process.Kill() })
	if _, err := m.Register(api.JobRequest{ID: "exit1", PID: quick.Process.Pid}, jobs.Caller{}); err != nil {
		t.Fatal(err)
	}
	// Heartbeats keep lapse1 while the mounts are set up, which a loaded machine may take
	// longer than its ttl for; it lapses once they stop.
	stopBeats, beatsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beatsDone)
		for {
			select {
			case <-stopBeats:
				return
			case <-time.After(200 * time.Millisecond):
				m.Heartbeat("lapse1", 0)
			}
		}
	}()
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopBeats) }); <-beatsDone }
	t.Cleanup(stop)
	lapse := newSessionMount(t, td, "sess-lapse", "lapse1")
	del := newSessionMount(t, td, "sess-del", "del1")
	exited := newSessionMount(t, td, "sess-exit", "exit1")
	stop()
	os.WriteFile(gate, nil, 0o644)
	lapse.checkReleased(t, td, "job lapse1 ended (lease_expired)")
	exited.checkReleased(t, td, "job exit1 ended (exited)")
	if code, _, _ := td.do(t, "GET", "/v1/mounts/sess-del", ""); code != 200 {
		t.Fatalf("the other job's mount went with the lapsed one: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m.End(ctx, "del1", "deleted", true); err != nil {
		t.Fatal(err)
	}
	del.checkReleased(t, td, "job del1 ended (deleted)")
	// A job that is not registered, or has ended, cannot hold a mount.
	for _, job := range []string{"nope", "del1"} {
		req := fastReg("late", mountDir(t, "late-"+job))
		req.Job = job
		code, body := register(t, td, req)
		if p := problemOf(body); code != 404 || !strings.Contains(p.Detail, job) {
			t.Errorf("register for job %s: %d %s, want 404 naming the job", job, code, body)
		}
	}
}

// TestRegisteredMountsAfterRestartWithJobs: two job-tied mounts; sandboxd stops, one job
// ends while it is down; after the restart the other is watched again and the one whose
// job ended is released (unmounted, link removed, server exited).
func TestRegisteredMountsAfterRestartWithJobs(t *testing.T) {
	m := testJobs(t)
	tie := &switchTie{managerTie: managerTie{m}}
	td := startTiedMountDaemon(t, tie)
	for _, id := range []string{"keep1", "gone1"} {
		if _, err := m.Register(api.JobRequest{ID: id, PID: sleeper(t)}, jobs.Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	keep := newSessionMount(t, td, "sess-keep", "keep1")
	gone := newSessionMount(t, td, "sess-gone", "gone1")
	stopNow(td)
	tie.off.Store(true) // the stopped daemon hears nothing of what follows
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := m.End(ctx, "gone1", "deleted", true); err != nil {
		t.Fatal(err)
	}
	if !fuseMountedAt(gone.mnt) {
		t.Fatal("the mount went away while sandboxd was down")
	}
	text, err := os.ReadFile(filepath.Join(td.dir, "sandboxd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	td2 := startDaemonIn(t, td.dir, string(text), probeSelf, withJobs(managerTie{m}))
	gone.checkReleased(t, td2, "job gone1 has ended")
	k := td2.waitMountState(t, "sess-keep", api.MountHealthy)
	if !k.Registered || k.Job != "keep1" {
		t.Fatalf("kept mount after the restart: %+v", k)
	}
	if tgt, err := os.Readlink(keep.link); err != nil || tgt != keep.mnt {
		t.Errorf("the kept mount's link: %q %v", tgt, err)
	}
	var l api.MountList
	_, _, body := td2.do(t, "GET", "/v1/mounts", "")
	if json.Unmarshal([]byte(body), &l) != nil || l.Registered != 1 {
		t.Errorf("after the restart: %s", body)
	}
}
