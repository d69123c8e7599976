package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestLeaseForgottenWithItsLastListedJob: a shared lease exists while a job of it is
// listed. With keep_ended_max = 1, the end of another job drops the lease's last (ended)
// job from the list, and the lease goes with it as that end returns, also after a
// restart; a lease whose ended job's id was registered again under it stays (its new job
// is listed), and renewing it renews that job.
func TestLeaseForgottenWithItsLastListedJob(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxEnded = 1; o.KeepEnded = time.Hour })
	run := func(id, lease string, end bool) {
		t.Helper()
		p := spawn(t, `exec sleep 600`)
		if _, err := f.m.Register(api.JobRequest{ID: id, PID: p.Process.Pid, Lease: lease, TTL: dur(time.Hour)}, Caller{}); err != nil {
			t.Fatal(err)
		}
		if !end {
			return
		}
		if _, err := f.m.End(context.Background(), id, api.ReasonDeleted, true); err != nil {
			t.Fatal(err)
		}
	}
	leases := func() string {
		var names []string
		for _, l := range f.m.Leases(nil) {
			names = append(names, fmt.Sprintf("%s:%v", l.Name, l.Jobs))
		}
		return fmt.Sprint(names)
	}
	run("a", "s1", true)
	if got := leases(); got != "[s1:[a]]" {
		t.Fatalf("leases with a's ended job listed: %s", got)
	}
	run("b", "", true) // drops a, the oldest ended job, and with it s1
	if got := leases(); got != "[]" {
		t.Errorf("leases once a's job was dropped: %s, want none", got)
	}
	f.shutdown()
	f.start()
	if got := leases(); got != "[]" {
		t.Errorf("leases after a restart: %s, want none", got)
	}

	// The lease of an id registered again under it, whose ended job it replaced.
	run("c", "s2", true)
	run("c", "s2", false) // replaces the ended c: s2 loses that job and gains the new one
	run("d", "", true)    // an end: prunes what the replacement may have left unused
	if got := leases(); got != "[s2:[c]]" {
		t.Fatalf("leases with c running again under s2: %s", got)
	}
	l, err := f.m.HeartbeatLease("s2", 2*time.Hour, Caller{})
	if err != nil || l.Running != 1 {
		t.Fatalf("renew s2: %+v %v", l, err)
	}
	if j, _ := f.m.Get("c"); j.State != api.JobRunning || time.Until(j.LeaseExpiresAt) < 90*time.Minute {
		t.Errorf("c after its lease was renewed for 2h: %s, lease until %s", j.State, j.LeaseExpiresAt)
	}
}
