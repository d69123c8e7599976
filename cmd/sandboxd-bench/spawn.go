package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// runSpawn is the physical cost beside `sandboxd run` in scripts/bench-run.sh (issue 27):
// a Go program that starts the command after "--" as its child (fork and exec, then
// wait4) and exits with its status; with no command it only starts and exits. The two
// whole-process wall times differ by what one fork, exec and wait of the command costs a
// Go program on this machine, which `sandboxd run` pays on top of `sandboxd launch`.
func runSpawn(_ context.Context, args []string, _, _ io.Writer) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	pid, err := syscall.ForkExec(path, args, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("%s: %v", args[0], ws)
	}
	return nil
}
