package jobs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestRegisterAfterTheJobsCgroupWentAway: <root>/jobs was removed after the registry made
// it (on this machine another daemon on the same root stopped and removed it); every
// registration, and so `sandboxd jobs leaks --clean`, then failed with "create cgroup
// .../jobs/leak-x: no such file or directory" until a restart. It is made again.
func TestRegisterAfterTheJobsCgroupWentAway(t *testing.T) {
	f := newFixture(t, nil)
	first := spawn(t, "exec sleep 600")
	if _, err := f.m.Register(api.JobRequest{ID: "one", PID: first.Process.Pid, TTL: dur(time.Minute)}, Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.End(context.Background(), "one", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
	jobsDir := filepath.Join(f.root, "jobs")
	if err := os.Remove(jobsDir); err != nil { // an rmdir of the empty cgroup
		t.Fatalf("remove %s: %v", jobsDir, err)
	}
	second := spawn(t, "exec sleep 600")
	j, err := f.m.Register(api.JobRequest{ID: "two", PID: second.Process.Pid, TTL: dur(time.Minute)}, Caller{})
	if err != nil {
		t.Fatalf("registration after %s went away: %v", jobsDir, err)
	}
	if j.State != api.JobRunning || countProcs(j.Cgroup) != 1 {
		t.Fatalf("job %+v, %d processes in its cgroup", j, countProcs(j.Cgroup))
	}
	if _, err := f.m.End(context.Background(), "two", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
}
