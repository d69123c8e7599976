package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

func dur(d time.Duration) *api.Duration { v := api.Duration(d); return &v }

// A job whose command double-forks a setsid grandchild and never heartbeats: every
// process is gone once the lease lapsed and the grace passed, the job is killed with
// reason lease_expired, and its cgroup is removed.
func TestLeaseLapseEndsSetsidGrandchild(t *testing.T) {
	f := newFixture(t, nil)
	pids := filepath.Join(t.TempDir(), "pids")
	// The shell waits for the go signal (the registration), then double-forks: a child
	// that runs setsid, whose grandchild outlives the child and leaves the session.
	cmd := spawn(t, `while [ ! -e `+pids+`.go ]; do sleep 0.05; done
( setsid sh -c 'echo $$ >> `+pids+`; exec sleep 600' & ) ; echo $$ >> `+pids+`; exec sleep 600`)
	var mu sync.Mutex
	var ended []string
	f.m.OnEnd(func(id, reason string) { mu.Lock(); ended = append(ended, id+":"+reason); mu.Unlock() })
	j, err := f.m.Register(api.JobRequest{ID: "lapse", PID: cmd.Process.Pid, TTL: dur(5 * time.Second)}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobRunning || j.Cgroup != filepath.Join(f.root, "jobs", "lapse") {
		t.Fatalf("registered job = %+v", j)
	}
	os.WriteFile(pids+".go", nil, 0o644)
	got := readPids(t, pids, 2)
	for _, p := range got {
		if !alive(p) {
			t.Fatalf("process %d is not running before the lease lapsed", p)
		}
	}
	// The job's state turns killed under the manager's lock; OnEnd is called after it is
	// released, so the wait is for both.
	waitFor(t, time.Minute, "the job to end and OnEnd to be told", func() bool {
		v, _ := f.m.Get("lapse")
		mu.Lock()
		defer mu.Unlock()
		return v.State == api.JobKilled && len(ended) > 0
	})
	v, _ := f.m.Get("lapse")
	if v.Reason != api.ReasonLeaseExpired {
		t.Errorf("reason = %q, want lease_expired", v.Reason)
	}
	for _, p := range got {
		if alive(p) {
			t.Errorf("process %d outlived its job", p)
		}
	}
	if _, err := os.Stat(j.Cgroup); !os.IsNotExist(err) {
		t.Errorf("job cgroup %s still exists after the job ended: %v", j.Cgroup, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ended) != 1 || ended[0] != "lapse:lease_expired" {
		t.Errorf("OnEnd calls = %v, want [lapse:lease_expired]", ended)
	}
}

// DELETE answers only once no process of the job is left: cgroup.procs is empty and
// kill -0 fails for every pid recorded before.
func TestEndWaitsUntilEmpty(t *testing.T) {
	f := newFixture(t, nil)
	pids := filepath.Join(t.TempDir(), "pids")
	cmd := spawn(t, `while [ ! -e `+pids+`.go ]; do sleep 0.05; done
for i in 1 2 3 4 5; do ( trap 'sleep 0.3; exit 0' TERM; echo $$ >/dev/null; sh -c 'echo $$ >> `+pids+`; trap "sleep 0.2; exit" TERM; while :; do sleep 0.1; done' ) & done
echo $$ >> `+pids+`; wait`)
	j, err := f.m.Register(api.JobRequest{ID: "del", PID: cmd.Process.Pid}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(pids+".go", nil, 0o644)
	recorded := readPids(t, pids, 6)
	v, err := f.m.End(context.Background(), "del", api.ReasonDeleted, true)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != api.JobKilled || v.Reason != api.ReasonDeleted {
		t.Errorf("after End: state %s reason %s, want killed deleted", v.State, v.Reason)
	}
	if b, err := os.ReadFile(filepath.Join(j.Cgroup, "cgroup.procs")); err == nil && strings.TrimSpace(string(b)) != "" {
		t.Errorf("cgroup.procs after End: %q", b)
	}
	for _, p := range recorded {
		if alive(p) {
			t.Errorf("process %d alive after End returned", p)
		}
	}
	if _, err := f.m.Heartbeat("del", 0); err == nil {
		t.Error("heartbeat of an ended job succeeded")
	} else if p := err.(*api.Problem); p.Code != api.CodeNotFound {
		t.Errorf("heartbeat of an ended job: %v, want not_found", err)
	}
}

// Leases run on CLOCK_BOOTTIME: a wall clock that jumps a day ahead (a paused VM that
// resumed and synced its clock) ends no job, and the lease still lapses on time.
func TestWallClockJumpEndsNothing(t *testing.T) {
	var jump atomic.Int64
	f := newFixture(t, func(o *Options) {
		o.Grace = 100 * time.Millisecond
		o.Now = func() time.Time { return time.Now().Add(time.Duration(jump.Load())) }
	})
	p := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "vm", PID: p.Process.Pid, TTL: dur(5 * time.Second)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	jump.Store(int64(24 * time.Hour))
	time.Sleep(700 * time.Millisecond)
	if v, _ := f.m.Get("vm"); v.State != api.JobRunning {
		t.Fatalf("a wall-clock jump ended the job: %+v", v)
	}
	if v, _ := f.m.Get("vm"); v.LeaseExpiresAt.Before(time.Now().Add(23 * time.Hour)) {
		t.Errorf("lease_expires_at %s is not shown on the jumped wall clock", v.LeaseExpiresAt)
	}
	waitFor(t, time.Minute, "the lease to lapse on boot time", func() bool { v, _ := f.m.Get("vm"); return v.State == api.JobKilled })
}
