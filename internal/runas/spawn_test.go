package runas

import (
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// A child with Pdeathsig started through StartFromStableThread outlives many AsFS calls,
// each of which ends the OS thread it ran on (issue 21: probe servers forked from such a
// thread were SIGKILLed at once).
func TestStableThreadChildOutlivesAsFSThreads(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartFromStableThread(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	var wg sync.WaitGroup
	for range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			AsFS(nobody, func() error { return nil })
		}()
	}
	wg.Wait()
	// A second child from the same thread: the thread is still there.
	other := exec.Command("true")
	if err := StartFromStableThread(other); err != nil || other.Wait() != nil {
		t.Fatalf("a second start: %v", err)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child died while AsFS threads ended: %v", err)
	}
	var ws syscall.WaitStatus
	if pid, _ := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid != 0 {
		t.Fatalf("the child exited (%v) while AsFS threads ended", ws)
	}
}
