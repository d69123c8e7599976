package jobs

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// TestRegisteredExitedProcessEnds: a process that exited before sandboxd moved it (a
// zombie: its pid still names it, so its pidfd answers signal 0 and the move succeeds)
// is registered into a cgroup that is empty and will never change, so no cgroup.events
// notification comes for it. Its job still ends as exited, without waiting for its lease
// (an hour), and the slot it took of its uid's max_per_uid = 1 is free again.
func TestRegisteredExitedProcessEnds(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxPerUID, o.DefaultTTL = 1, time.Hour })
	nobody := Caller{UID: 65534}
	p := exec.Command("sh", "-c", "exit 0")
	p.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the process to exit", func() bool { return !alive(p.Process.Pid) })
	_, err := f.m.Register(api.JobRequest{ID: "gone", PID: p.Process.Pid}, nobody)
	p.Wait()
	if err != nil {
		t.Fatalf("register a zombie: %v", err)
	}
	waitFor(t, time.Minute, "the job of a process that had exited to end", func() bool {
		v, err := f.m.GetAs("gone", nobody)
		return err == nil && v.State == api.JobEnded && v.Reason == api.ReasonExited
	})
	live := exec.Command("sleep", "600")
	live.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	if _, err := f.m.Register(api.JobRequest{ID: "next", PID: live.Process.Pid}, nobody); err != nil {
		t.Fatalf("65534's next job once the first ended: %v", err)
	}
}
