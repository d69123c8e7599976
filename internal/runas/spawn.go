package runas

import (
	"os/exec"
	"runtime"
	"sync"
)

// StartFromStableThread starts cmd from one OS thread that lives as long as the process.
//
// A child started with SysProcAttr.Pdeathsig gets that signal when the *thread* that
// forked it exits, not the process (prctl(2): "the parent thread"). Go schedules a
// goroutine on any thread, and AsFS ends the thread it ran on; so a probe server forked
// from a thread that AsFS later took and threw away was SIGKILLed ~0.07 ms after it
// started, and every mount's probes "gave no result" (issue 21). Forking from a thread
// locked to a goroutine that never returns keeps Pdeathsig meaning "the daemon died".
func StartFromStableThread(cmd *exec.Cmd) error {
	stable.once.Do(func() {
		stable.reqs = make(chan startReq)
		go func() {
			runtime.LockOSThread() // never unlocked, and this goroutine never returns
			for r := range stable.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	stable.reqs <- startReq{cmd: cmd, done: done}
	return <-done
}

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

var stable struct {
	once sync.Once
	reqs chan startReq // served by the goroutine locked to the stable thread
}
