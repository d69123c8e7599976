package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// exitRunFailed is sandboxd run's status when sandboxd itself refused or failed, as
// docker run's 125: never a status the command could have returned by itself being read
// as sandboxd's, or the other way round (issue 20 item 5, CONTRACT §9).
const exitRunFailed = 125

// detachFDEnv tells the detached child of `run --detach` on which fd to report its
// registration (or its refusal) to the parent waiting in the foreground.
const detachFDEnv = "SANDBOXD_RUN_REPORT_FD"

type detachFlags struct {
	on             bool
	stdout, stderr string
}

// detachReport is what the detached child tells its parent: the job, or the refusal.
type detachReport struct {
	Job        *api.Job     `json:"job,omitempty"`
	Problem    *api.Problem `json:"problem,omitempty"`
	ExitStatus int          `json:"exit_status,omitempty"`
}

// runFailed reports a refusal or failure of the launch check or the registration as
// failure does (code and detail on stderr, the document on stdout with --json), writes the
// problem document to problemFile, tells a waiting parent, and returns 125.
func runFailed(err error, inv *invocation, paths []string, problemFile string) int {
	specific := failure(err, inv, paths)
	p := problemOf(err, specific)
	if problemFile != "" {
		if b, merr := json.MarshalIndent(p, "", "  "); merr == nil {
			if werr := os.WriteFile(problemFile, append(b, '\n'), 0o644); werr != nil {
				fmt.Fprintf(inv.stderr, "%s: --problem-file: %v\n", inv.name, werr)
			}
		}
	}
	if fd := os.Getenv(detachFDEnv); fd != "" {
		report(detachReport{Problem: p, ExitStatus: specific})
	}
	fmt.Fprintf(inv.stderr, "%s: exit %d: sandboxd refused or failed, the command did not run (sandboxd launch would exit %d)\n",
		inv.name, exitRunFailed, specific)
	return exitRunFailed
}

// problemOf is the problem document of err: the daemon's, or one made for a failure that
// has none (daemon unreachable, timeout).
func problemOf(err error, status int) *api.Problem {
	var pe *client.ProblemError
	if errors.As(err, &pe) {
		return &pe.Problem
	}
	code := api.Code("unreachable")
	if status != exitUnreachable {
		code = api.CodeInternal
	}
	return &api.Problem{Type: "about:blank", Title: "sandboxd not reached", Code: code, Detail: err.Error()}
}

// report writes r to the parent's fd and closes it (the child then execs or exits).
func report(r detachReport) {
	f := os.NewFile(3, "report")
	json.NewEncoder(f).Encode(r)
	f.Close()
}

// reportDetached tells a waiting parent that j is registered; false outside --detach.
func reportDetached(j *api.Job) bool {
	if os.Getenv(detachFDEnv) == "" {
		return false
	}
	report(detachReport{Job: j})
	return true
}

// runDetached is `sandboxd run --detach`: it starts itself again without --detach, in a
// session of its own with stdio to the caller's files and a pipe back; that child makes
// the launch check and registers itself (the process the kernel names, which becomes CMD),
// reports the job or the refusal on the pipe, and execs CMD. The parent waits for that
// report only: the job id on stdout and 0, or the refusal and 125.
func runDetached(inv *invocation, det detachFlags, problemFile string) int {
	open := func(name string) (*os.File, error) {
		if name == "" {
			return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		}
		return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	argv := inv.args
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return inv.usageErr("no command to run after --")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(inv.stderr, "%s: %v\n", inv.name, err)
		return 127
	}
	out, err := open(det.stdout)
	if err != nil {
		fmt.Fprintf(inv.stderr, "%s: --stdout: %v\n", inv.name, err)
		return exitRunFailed
	}
	defer out.Close()
	errf, err := open(det.stderr)
	if err != nil {
		fmt.Fprintf(inv.stderr, "%s: --stderr: %v\n", inv.name, err)
		return exitRunFailed
	}
	defer errf.Close()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(inv.stderr, "%s: find own executable: %v\n", inv.name, err)
		return exitRunFailed
	}
	// The same arguments without --detach: the flags before CMD, then CMD untouched.
	flagsEnd := len(os.Args) - len(inv.args)
	var args []string
	for i, a := range os.Args[1:] {
		if i+1 < flagsEnd {
			switch a {
			case "-d", "--detach", "-detach", "-d=true", "--detach=true", "-detach=true":
				continue
			}
		}
		args = append(args, a)
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(inv.stderr, "%s: pipe: %v\n", inv.name, err)
		return exitRunFailed
	}
	child := exec.Command(self, args...)
	child.Env = append(os.Environ(), detachFDEnv+"=3")
	child.Stdout, child.Stderr, child.ExtraFiles = out, errf, []*os.File{w}
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		w.Close()
		r.Close()
		fmt.Fprintf(inv.stderr, "%s: start the detached command: %v\n", inv.name, err)
		return exitRunFailed
	}
	w.Close()
	b, _ := io.ReadAll(r) // until the child reports and closes it (exec or exit)
	r.Close()
	var rep detachReport
	if json.Unmarshal(b, &rep) != nil || rep.Job == nil && rep.Problem == nil {
		st, _ := child.Process.Wait()
		fmt.Fprintf(inv.stderr, "%s: exit %d: the detached run ended before it reported (%v; see its --stderr file)\n", inv.name, exitRunFailed, st)
		return exitRunFailed
	}
	child.Process.Release() // it runs on as CMD, in its own session
	if rep.Problem != nil {
		if inv.g.json {
			printJSON(inv.stdout, rep.Problem)
		}
		if problemFile != "" {
			if b, err := json.MarshalIndent(rep.Problem, "", "  "); err == nil {
				os.WriteFile(problemFile, append(b, '\n'), 0o644)
			}
		}
		fmt.Fprintf(inv.stderr, "%s: %s: %s\n", inv.name, rep.Problem.Code, rep.Problem.Detail)
		fmt.Fprintf(inv.stderr, "%s: exit %d: sandboxd refused or failed, the command did not run (sandboxd launch would exit %d)\n",
			inv.name, exitRunFailed, rep.ExitStatus)
		return exitRunFailed
	}
	if inv.g.json {
		printJSON(inv.stdout, rep.Job)
	} else {
		fmt.Fprintln(inv.stdout, rep.Job.ID)
	}
	fmt.Fprintf(inv.stderr, "%s: job %s detached (pid %d, cgroup %s)\n", inv.name, rep.Job.ID, rep.Job.PID, rep.Job.Cgroup)
	return exitOK
}
