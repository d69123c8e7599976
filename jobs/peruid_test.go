package jobs

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/api"
)

// TestMaxPerUIDCountsLiveJobs: uid 65534 under max_per_uid = 2 registers two jobs (its
// own processes, real cgroups) and is refused a third naming the limit; root is not
// counted against it. Once one of the two ends, the third is accepted; an ended job of
// 65534's whose id is registered again counts once, as the new live job; the count holds
// across a restart (two live: refused again).
func TestMaxPerUIDCountsLiveJobs(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxPerUID = 2 })
	nobody := Caller{UID: 65534}
	register := func(id string) error {
		t.Helper()
		p := exec.Command("sleep", "600")
		p.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Process.Kill(); p.Wait() })
		_, err := f.m.Register(api.JobRequest{ID: id, PID: p.Process.Pid}, nobody)
		return err
	}
	refused := func(err error) bool {
		return problemCode(err) == api.CodeJobsUnavailable && strings.Contains(err.Error(), "max_per_uid = 2")
	}
	for _, id := range []string{"a", "b"} {
		if err := register(id); err != nil {
			t.Fatalf("65534's job %s: %v", id, err)
		}
	}
	if err := register("c"); !refused(err) {
		t.Fatalf("65534's third live job: %v, want refused by max_per_uid = 2", err)
	}
	root := spawn(t, `exec sleep 600`)
	if _, err := f.m.Register(api.JobRequest{ID: "r", PID: root.Process.Pid}, Caller{}); err != nil {
		t.Fatalf("root's job beside 65534's two: %v", err)
	}
	if _, err := f.m.End(context.Background(), "a", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
	if err := register("a"); err != nil { // the ended a replaced: one live of two
		t.Fatalf("65534 registers a again once it ended: %v", err)
	}
	if err := register("c"); !refused(err) {
		t.Fatalf("65534's third live job after a was registered again: %v, want refused", err)
	}
	if _, err := f.m.End(context.Background(), "b", api.ReasonDeleted, true); err != nil {
		t.Fatal(err)
	}
	if err := register("c"); err != nil {
		t.Fatalf("65534's job c once b ended: %v", err)
	}
	f.shutdown()
	f.start()
	if err := register("d"); !refused(err) {
		t.Fatalf("65534's third live job after a restart: %v, want refused", err)
	}
}
