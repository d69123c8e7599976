package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestCountsHoldThroughALeak: the kept counts (live jobs per uid, ended jobs) equal a
// recount by walking the registry as a job leaks (its process stuck where SIGKILL cannot
// free it: a request held by a hung FUSE server), across a restart of the Manager while
// it is leaked, once it empties at last (killed), and when its id is registered again.
func TestCountsHoldThroughALeak(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.Grace = 100 * time.Millisecond
		o.KillWait = 500 * time.Millisecond
		o.MaxEnded = 4
	})
	check := func(step string) { t.Helper(); checkCounts(t, f.m, 4, step) }
	cmd, srv, block := lsInHungMount(t)
	if _, err := f.m.Register(api.JobRequest{ID: "leaky", PID: cmd.Process.Pid}, Caller{}); err != nil {
		t.Fatal(err)
	}
	check("registered")
	block()
	if v, err := f.m.End(context.Background(), "leaky", api.ReasonDeleted, true); err != nil || v.State != api.JobLeaked {
		t.Fatalf("end: %+v %v, want leaked", v, err)
	}
	check("leaked")
	f.shutdown()
	f.start()
	if v, _ := f.m.Get("leaky"); v.State != api.JobLeaked {
		t.Fatalf("after a restart: %s, want leaked", v.State)
	}
	check("leaked, after a restart")
	if err := srv.Abort(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the leaked job to empty once the mount is aborted", func() bool { v, _ := f.m.Get("leaky"); return v.State == api.JobKilled })
	check("killed")
	again := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "leaky", PID: again.Process.Pid}, Caller{}); err != nil {
		t.Fatal(err)
	}
	check("registered again")
	if _, err := f.m.End(context.Background(), "leaky", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
	check("ended again")
}
