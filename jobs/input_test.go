package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func problemCode(err error) api.Code {
	var p *api.Problem
	if errors.As(err, &p) {
		return p.Code
	}
	return ""
}

// Bad input gets a clear refusal with a defined code, and registers nothing.
func TestRegisterRefusals(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.MaxLifetime = time.Hour
		o.SiteKnown = func(s string) bool { return s == "aura-bg" }
	})
	mine := spawn(t, `exec sleep 600`)
	nobody := exec.Command("sleep", "600")
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := nobody.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nobody.Process.Kill(); nobody.Wait() })
	gone := exec.Command("true")
	gone.Run()

	cases := []struct {
		name string
		req  api.JobRequest
		by   Caller
		code api.Code
		want string
	}{
		{"slash in id", api.JobRequest{ID: "a/b", PID: mine.Process.Pid}, Caller{}, api.CodeBadRequest, "not allowed"},
		{"dotdot id", api.JobRequest{ID: "..", PID: mine.Process.Pid}, Caller{}, api.CodeBadRequest, "not allowed"},
		{"long id", api.JobRequest{ID: strings.Repeat("x", 200), PID: mine.Process.Pid}, Caller{}, api.CodeBadRequest, "1 to 128"},
		{"no pid", api.JobRequest{ID: "x"}, Caller{}, api.CodeBadRequest, `"pid"`},
		{"pid gone", api.JobRequest{ID: "x", PID: gone.Process.Pid}, Caller{}, api.CodeBadRequest, "no process"},
		{"ttl 0", api.JobRequest{ID: "x", PID: mine.Process.Pid, TTL: dur(0)}, Caller{}, api.CodeBadRequest, `"ttl"`},
		{"max_lifetime 0", api.JobRequest{ID: "x", PID: mine.Process.Pid, MaxLifetime: dur(0)}, Caller{}, api.CodeBadRequest, "max_lifetime"},
		{"another user's pid", api.JobRequest{ID: "x", PID: nobody.Process.Pid}, Caller{UID: 1000}, api.CodeForbidden, "uid 65534"},
		{"root's pid by nobody", api.JobRequest{ID: "x", PID: mine.Process.Pid}, Caller{UID: 65534}, api.CodeForbidden, "uid 0"},
		{"pid 1", api.JobRequest{ID: "x", PID: 1}, Caller{}, api.CodeForbidden, "PID 1"},
		{"the daemon", api.JobRequest{ID: "x", PID: syscall.Getpid()}, Caller{}, api.CodeForbidden, "sandboxd itself"},
		{"unknown site", api.JobRequest{ID: "x", PID: mine.Process.Pid, Site: "nope"}, Caller{}, api.CodeNotFound, `"nope"`},
		{"too many labels", api.JobRequest{ID: "x", PID: mine.Process.Pid, Labels: manyLabels(40)}, Caller{}, api.CodeBadRequest, "labels"},
	}
	for _, c := range cases {
		_, err := f.m.Register(c.req, c.by)
		if problemCode(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %s naming %s", c.name, err, c.code, c.want)
		}
	}
	if n := len(f.m.List()); n != 0 {
		t.Errorf("refusals registered %d jobs", n)
	}
	// A process of its own user is fine for a non-root caller.
	if _, err := f.m.Register(api.JobRequest{ID: "nobodys", PID: nobody.Process.Pid}, Caller{UID: 65534}); err != nil {
		t.Errorf("nobody registering its own process: %v", err)
	}
	// max_lifetime above the cap is clamped, with a warning.
	j, err := f.m.Register(api.JobRequest{ID: "capped", PID: mine.Process.Pid, MaxLifetime: dur(48 * time.Hour)}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if life := j.DeadlineAt.Sub(j.StartedAt); life > time.Hour+time.Second || len(j.Warnings) != 1 || !strings.Contains(j.Warnings[0], "max_lifetime 48h is above the cap [jobs] max_lifetime = 1h: clamped to 1h") {
		t.Errorf("max_lifetime 48h under a 1h cap: deadline %s after start, warnings %q", life, j.Warnings)
	}
	// The same id again while alive: conflict; the same pid under another id: conflict.
	if _, err := f.m.Register(api.JobRequest{ID: "capped", PID: nobody.Process.Pid}, Caller{}); problemCode(err) != api.CodeConflict {
		t.Errorf("id in use: %v, want conflict", err)
	}
	if _, err := f.m.Register(api.JobRequest{ID: "again", PID: mine.Process.Pid}, Caller{}); problemCode(err) != api.CodeConflict || !strings.Contains(err.Error(), `"capped"`) {
		t.Errorf("pid held by another job: %v, want conflict naming it", err)
	}
	if _, err := f.m.Heartbeat("nope", 0); problemCode(err) != api.CodeNotFound {
		t.Errorf("heartbeat of an unknown job: %v", err)
	}
	if _, err := f.m.End(context.Background(), "nope", api.ReasonDeleted, true); problemCode(err) != api.CodeNotFound {
		t.Errorf("end of an unknown job: %v", err)
	}
}

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := 0; i < n; i++ {
		m[fmt.Sprint("k", i)] = "v"
	}
	return m
}

// 10,000 registrations: live jobs stop at MaxJobs with a clear refusal, ended jobs kept
// for listing stop at MaxEnded, and the heap does not grow with the number of calls.
func TestTenThousandRegistrationsBoundedMemory(t *testing.T) {
	const maxJobs, maxEnded = 64, 16
	f := newFixture(t, func(o *Options) { o.MaxJobs, o.MaxEnded, o.State = maxJobs, maxEnded, nil; o.Grace = 0 })
	var procs []int
	for i := 0; i < maxJobs+1; i++ {
		procs = append(procs, spawn(t, `exec sleep 600`).Process.Pid)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	refused := 0
	for i := 0; i < 10000; i++ {
		pid := procs[min(i, maxJobs)]
		_, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("flood-%d", i), PID: pid,
			Labels: map[string]string{"turn": strings.Repeat("x", 200)}}, Caller{})
		switch {
		case i < maxJobs && err != nil:
			t.Fatalf("registration %d: %v", i, err)
		case i >= maxJobs && problemCode(err) != api.CodeJobsUnavailable:
			t.Fatalf("registration %d beyond the cap: %v, want jobs_unavailable", i, err)
		case err != nil:
			refused++
			if refused == 1 && !strings.Contains(err.Error(), "registry is full") {
				t.Errorf("refusal does not say why: %v", err)
			}
		}
	}
	for i := 0; i < maxJobs; i++ {
		f.m.End(context.Background(), fmt.Sprintf("flood-%d", i), api.ReasonDeleted, true)
	}
	f.m.mu.Lock()
	f.m.pruneEndedLocked()
	n := len(f.m.jobs)
	f.m.mu.Unlock()
	if n > maxEnded {
		t.Errorf("%d jobs kept after ending all, want at most %d", n, maxEnded)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 8<<20 {
		t.Errorf("heap grew by %d bytes over 10,000 registrations", grow)
	}
	t.Logf("%d refused; heap %d -> %d bytes", refused, before.HeapInuse, after.HeapInuse)
}

// A daemon that never registers a job leaves nothing in cgroupfs; a host without cgroup2
// under the configured root answers jobs_unavailable with the reason.
func TestLazyRootAndUnavailable(t *testing.T) {
	f := newFixture(t, nil)
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(f.root); !os.IsNotExist(err) {
		t.Errorf("cgroup root %s exists before any job: %v", f.root, err)
	}
	m := New(Options{CgroupRoot: t.TempDir()})
	ok, why := m.Available()
	if ok || !strings.Contains(why, "not on a cgroup2") {
		t.Errorf("a tmp dir as cgroup_root: available %v, %q", ok, why)
	}
	if _, err := m.Register(api.JobRequest{PID: os.Getpid()}, Caller{}); problemCode(err) != api.CodeJobsUnavailable {
		t.Errorf("register without cgroup2: %v", err)
	}
	if _, err := m.Leaks(context.Background(), false); problemCode(err) != api.CodeJobsUnavailable {
		t.Errorf("leak check without cgroup2: %v", err)
	}
}
