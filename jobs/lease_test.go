package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Issue 20 item 4: jobs registered with one shared lease live while the lease is renewed,
// one heartbeat (one small journal record) renewing them all; a lapse ends them all, and
// so does ending the lease, which answers once every cgroup is empty. The lease and its
// renewal survive a restart. A job with a lease of its own is untouched by all that.
func TestSharedLease(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Grace = 100 * time.Millisecond })
	own := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "own", PID: own.Process.Pid, TTL: dur(time.Hour)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	var procs []int
	for i := range 3 {
		p := spawn(t, `exec sleep 600`)
		procs = append(procs, p.Process.Pid)
		j, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("s1-%d", i), PID: p.Process.Pid, TTL: dur(3 * time.Second), Lease: "s1"}, Caller{})
		if err != nil || j.Lease != "s1" {
			t.Fatalf("register into lease s1: %+v %v", j, err)
		}
	}
	// Renewed 8 times, each after a third of a ttl (a loaded machine may delay a renewal by
	// most of a ttl): the jobs outlive their 3s ttl more than twice over.
	for range 8 {
		f.m.mu.Lock()
		w0 := f.m.journal.written
		f.m.mu.Unlock()
		l, err := f.m.HeartbeatLease("s1", 0, Caller{})
		if err != nil || l.Running != 3 || len(l.Jobs) != 3 {
			t.Fatalf("lease heartbeat: %+v %v", l, err)
		}
		f.m.mu.Lock()
		if n := f.m.journal.written - w0; n > 200 {
			t.Errorf("one lease heartbeat wrote %d bytes to the registry, want one small record", n)
		}
		f.m.mu.Unlock()
		time.Sleep(time.Second)
	}
	for i, p := range procs {
		if v, _ := f.m.Get(fmt.Sprintf("s1-%d", i)); v.State != api.JobRunning || !alive(p) {
			t.Fatalf("job s1-%d of a renewed lease: %+v", i, v)
		}
	}
	if ls := f.m.Leases(nil); len(ls) != 1 || ls[0].Name != "s1" || ls[0].Heartbeats != 8 {
		t.Errorf("leases: %+v", ls)
	}
	// A restart keeps the lease and its jobs.
	f.shutdown()
	f.start()
	if _, err := f.m.HeartbeatLease("s1", 0, Caller{}); err != nil {
		t.Fatalf("lease heartbeat after a restart: %v", err)
	}
	// Not renewed any more: its lapse ends every job of it, and only those.
	waitFor(t, time.Minute, "every job of the lapsed lease to end", func() bool {
		for i := range 3 {
			if v, _ := f.m.Get(fmt.Sprintf("s1-%d", i)); v.State != api.JobKilled || v.Reason != api.ReasonLeaseExpired {
				return false
			}
		}
		return true
	})
	for _, p := range procs {
		if alive(p) {
			t.Errorf("process %d outlived its lease", p)
		}
	}
	if v, _ := f.m.Get("own"); v.State != api.JobRunning || !alive(own.Process.Pid) {
		t.Errorf("a job with its own lease was ended with the shared one: %+v", v)
	}

	// DELETE of a lease ends every job of it and answers once all their cgroups are empty.
	var s2 []int
	for i := range 2 {
		p := spawn(t, `trap '' TERM; while :; do sleep 1; done`) // needs the SIGKILL after grace
		s2 = append(s2, p.Process.Pid)
		if _, err := f.m.Register(api.JobRequest{ID: fmt.Sprintf("s2-%d", i), PID: p.Process.Pid, Lease: "s2"}, Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := f.m.EndLease(context.Background(), "s2", true, Caller{})
	if err != nil || l.Running != 0 {
		t.Fatalf("end lease: %+v %v", l, err)
	}
	for i, p := range s2 {
		if v, _ := f.m.Get(fmt.Sprintf("s2-%d", i)); v.State != api.JobKilled || v.Reason != api.ReasonDeleted || countProcs(v.Cgroup) != 0 || alive(p) {
			t.Errorf("after DELETE of its lease, job s2-%d = %+v, process alive %v", i, v, alive(p))
		}
	}
	if _, err := f.m.HeartbeatLease("s2", 0, Caller{}); problemCode(err) != api.CodeNotFound {
		t.Errorf("heartbeat of an ended lease: %v, want not_found", err)
	}
	if _, err := f.m.Register(api.JobRequest{ID: "bad", PID: own.Process.Pid, Lease: "a/b"}, Caller{}); problemCode(err) != api.CodeBadRequest {
		t.Errorf("a lease name with a slash: %v", err)
	}
}
