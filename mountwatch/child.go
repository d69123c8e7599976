package mountwatch

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/runas"
)

// child is a process that mountwatch started and reaps asynchronously. A child caught
// inside a request to a hung FUSE daemon sits in uninterruptible sleep and cannot be
// killed; only aborting the connection frees it. So the parent never waits for it on a
// loop: a goroutine that does nothing but Wait owns it, and expired tells the parent that
// the timeout passed (the kill was sent) while reaped tells it the process is gone.
type child struct {
	start time.Time
	pid   int
	timer *time.Timer // kills the group at the timeout

	expired chan struct{} // closed at the timeout, after the kill
	reaped  chan struct{} // closed when Wait returned

	mu     sync.Mutex // guards out, err, end
	out    *lockedBuffer
	errOut *lockedBuffer // stderr, when kept apart (separate)
	err    error
	end    time.Time
	killed bool
}

// lockedBuffer is a bounded output buffer the exec copier writes while the parent reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 64<<10 - l.b.Len(); room > 0 {
		if len(p) > room {
			l.b.Write(p[:room])
		} else {
			l.b.Write(p)
		}
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChildIn starts argv as startChild does, with stderr apart (c.errOut), the
// environment env (nil: the daemon's), and the child started in cgroup (clone3
// CLONE_INTO_CGROUP) when it is not "": a job-tied mount's commands start in the job's
// cgroup, so what they leave running (a setsid'd server) is the job's and ends with it
// (issue 21: a remount_command's `setsid sleep` outlived its job, and the leak check said
// "no leaks"). A cgroup that cannot be opened (the job just ended) starts it where the
// daemon runs.
func startChildIn(argv []string, cred *syscall.Credential, timeout time.Duration, env []string, cgroup string) (*child, error) {
	return startChildWith(argv, cred, timeout, false, true, env, cgroup)
}

// startChildWith starts argv (as cred when non-nil) in its own process group, kills the
// group at timeout and reaps it in a goroutine. With separate, stderr goes to c.errOut;
// env nil is the daemon's environment.
func startChildWith(argv []string, cred *syscall.Credential, timeout time.Duration, deathSig, separate bool, env []string, cgroup string) (*child, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	c := &child{expired: make(chan struct{}), reaped: make(chan struct{}), out: &lockedBuffer{}}
	cmd.Stdout = c.out
	cmd.Stderr = c.out
	if separate {
		c.errOut = &lockedBuffer{}
		cmd.Stderr = c.errOut
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if cgroup != "" {
		if fd, err := syscall.Open(cgroup, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
			defer syscall.Close(fd)
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	if deathSig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	c.start = time.Now()
	start := cmd.Start
	if deathSig {
		start = func() error { return runas.StartFromStableThread(cmd) } // Pdeathsig follows the forking thread
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	c.pid = pid
	timer := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.killed = true
		c.mu.Unlock()
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		close(c.expired)
	})
	c.timer = timer
	go func() {
		err := cmd.Wait()
		timer.Stop()
		c.mu.Lock()
		c.err, c.end = err, time.Now()
		c.mu.Unlock()
		close(c.reaped)
	}()
	return c, nil
}

// wait blocks until the child is reaped or its timeout expired, and says which.
func (c *child) wait() (timedOut bool) {
	select {
	case <-c.reaped:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.killed
	case <-c.expired:
		return true
	}
}

// result is the exit error and output once reaped.
func (c *child) result() (string, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String(), c.end.Sub(c.start), c.err
}

// keep disarms the timeout: the child runs on (a remount command that is the mount's
// server) and is still reaped when it exits. It reports false when the kill was sent.
func (c *child) keep() bool { return c.timer.Stop() }

// kill sends SIGKILL to the child's process group now.
func (c *child) kill() {
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
}

// exited reports whether the child was reaped.
func (c *child) exited() bool { return closed(c.reaped) }

// isExpired reports whether the timeout passed (the kill was sent).
func (c *child) isExpired() bool {
	select {
	case <-c.expired:
		return true
	default:
		return false
	}
}

// callerArgv is how a command runs: for a caller's (a registered mount's) command, in a
// clean environment and through a wrapper that resets its oom_score_adj; argv as is for
// the config's.
func callerArgv(argv []string, cred *syscall.Credential, forCaller bool) (run, env []string) {
	run = argv
	if forCaller {
		env = cleanEnv(cred)
		// Raising one's own oom_score_adj needs no privilege; the wrapper does it before
		// the command runs, so nothing it forks inherits the daemon's value. The shell's
		// own PWD (and OLDPWD) are unset: the environment is cleanEnv's, nothing else.
		run = append([]string{"/bin/sh", "-c", `echo 0 > /proc/self/oom_score_adj 2>/dev/null; unset PWD OLDPWD; exec "$@"`, "sh"}, argv...)
	}
	return run, env
}

// runCommand runs argv (as cred when non-nil: a registered mount's commands run as the
// peer who registered it) to completion within timeout and returns its trimmed standard
// output, for the caller to parse and never to store (a refresh_command prints the
// credentials themselves). An error names the command (redacted) and carries at most the
// first line of its stderr, redacted (redact.go). A child that cannot be reaped after the
// kill is left to its reaper goroutine.
//
// With forCaller (a registered mount's command, or any run as another uid) the command
// gets a clean environment (cleanEnv) and the default oom_score_adj of 0 instead of the
// daemon's whole environment and its -900 (issue 21): the caller's command is the
// caller's, not a part of the daemon the kernel should spare.
func runCommand(argv []string, cred *syscall.Credential, timeout time.Duration, forCaller bool) (string, error) {
	return runCommandIn(argv, cred, timeout, forCaller, "")
}

// runCommandIn is runCommand started in cgroup (startChildIn).
func runCommandIn(argv []string, cred *syscall.Credential, timeout time.Duration, forCaller bool, cgroup string) (string, error) {
	run, env := callerArgv(argv, cred, forCaller)
	c, err := startChildIn(run, cred, timeout, env, cgroup)
	if err != nil {
		return "", fmt.Errorf("%w", redactedErr(err))
	}
	name := strings.Join(redactArgv(argv), " ")
	if c.wait() {
		select {
		case <-c.reaped:
		case <-time.After(2 * time.Second):
		}
		return strings.TrimSpace(c.out.String()), fmt.Errorf("%s: timed out after %s", name, api.FormatDuration(timeout))
	}
	out, _, err := c.result()
	out = strings.TrimSpace(out)
	if err != nil {
		if line := firstLine(c.errOut.String()); line != "" {
			return out, fmt.Errorf("%s: %w: %s", name, err, line)
		}
		return out, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// redactedErr is err with its text redacted (an exec error names the program).
func redactedErr(err error) error { return errors.New(redact(err.Error())) }
