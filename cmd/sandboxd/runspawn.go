package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/client"
)

// spawnJob is `sandboxd run`'s path since issue 27: one call (POST /v1/jobs/spawn) makes
// the launch check and registers the job, the daemon sends the job's cgroup fd, and CMD is
// started straight in that cgroup with clone3(CLONE_INTO_CGROUP), its pidfd reported back.
// No process is migrated between cgroups (the write to cgroup.procs that waits for the
// kernel's cgroup synchronization). run stays CMD's parent outside the job: it forwards
// signals, and exits with CMD's status, or dies of CMD's signal, as exec in place did.
//
// When the kernel refuses the spawn (before 5.7, or a non-root runner of a root daemon:
// see docs/operations.md) the daemon moves run itself into the cgroup instead and run execs
// CMD in place, the path before issue 27. Go's syscall package does not fall back by
// itself: with UseCgroupFD it always calls clone3 and returns its error (ENOSYS, E2BIG,
// EACCES, ...) from ForkExec, so the choice is made here, at run time, on that error. done is false only when the daemon predates
// POST /v1/jobs/spawn: the two calls follow then.
func spawnJob(ctx context.Context, inv *invocation, launch api.LaunchRequest, req api.JobRequest, path string, argv []string, problemFile string) (code int, done bool) {
	req.Launch = &launch
	c := inv.client()
	// What does not depend on the daemon's offer (CMD's fds and environment, the signal
	// handlers) is prepared on another goroutine while the call is in flight: it is off
	// run's critical path (issue 27: 0.7-1.3 ms of run - launch on a VM where each thread
	// hand-off is expensive).
	fw := startForwarder(ctx)
	sp, err := c.BeginSpawn(fw.ctx, req)
	if err != nil {
		fw.release() // dies of a signal that cut the call short
		if client.SpawnUnsupported(err) {
			return 0, false
		}
		return runFailed(err, inv, inv.siteDisk(launch.Site), problemFile), true
	}
	defer sp.Close()
	j := sp.Job
	if l := j.Launch; l != nil && l.Advice != nil {
		fmt.Fprintf(inv.stderr, "%s: advice: %s: %s\n", inv.name, *l.Advice, l.Detail)
	}

	if !inv.g.json {
		printSpawned(inv, j) // before CMD's own output, as when run exec'd it
	}

	// Spawn from a thread that lives as long as run: Pdeathsig fires when the forking
	// thread ends, and run's death must end CMD as it did when run was CMD.
	runtime.LockOSThread()
	<-fw.ready
	env := append(fw.env, api.JobIDEnv+"="+j.ID, api.JobCgroupEnv+"="+j.Cgroup)
	pidfd := -1
	attr := &syscall.ProcAttr{Env: env, Files: fw.fds,
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.CgroupFD, PidFD: &pidfd, Pdeathsig: syscall.SIGKILL}}
	// The fork under the forwarder's lock: a signal that came before it either ends run
	// here, CMD never started (the daemon registers nothing once the connection closes),
	// or waits for CMD and is forwarded to it.
	fw.mu.Lock()
	if sig := fw.early; sig != 0 {
		fw.mu.Unlock()
		sp.Close()
		return dieOfEarly(sig), true
	}
	var pid int
	if client.SpawnDisabled() {
		err = fmt.Errorf("%s=1 (the test hook of the migration path): %w", client.NoSpawnEnv, syscall.ENOSYS)
	} else {
		pid, err = syscall.ForkExec(path, argv, attr)
	}
	if err == nil {
		fw.spawned(pidfd)
	}
	fw.mu.Unlock()
	if err != nil {
		fw.release()
		if !client.CloneIntoCgroupFailed(err) {
			sp.Abort(err.Error())
			fmt.Fprintf(inv.stderr, "%s: exec %s: %v\n", inv.name, path, err)
			if errors.Is(err, syscall.ENOENT) {
				return 127, true
			}
			return 126, true
		}
		return migrateAndExec(inv, sp, err, path, argv, env, launch, problemFile), true
	}
	if err := sp.Spawned(pidfd); err != nil {
		// The daemon never got the report: it kills what is in the cgroup and registers
		// nothing. Say so and end CMD too rather than leave it running unleased.
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		waitChild(pid)
		return runFailed(err, inv, inv.siteDisk(launch.Site), problemFile), true
	}
	// The daemon's answer first, CMD's exit after it: CMD is not reaped before the daemon
	// checked the process its pidfd names (a reaped one could not be). Both are waited for
	// in blocking system calls on this thread, the signals forwarded meanwhile by fw.
	got, resErr := sp.Result()
	if resErr == nil {
		for _, w := range got.Warnings {
			fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
		}
		if inv.g.json {
			printJSON(inv.stderr, got) // the job as registered, its pid known
		}
	}
	ws := waitChild(pid)
	if resErr != nil {
		var pe *client.ProblemError
		if errors.As(resErr, &pe) {
			return runFailed(resErr, inv, inv.siteDisk(launch.Site), problemFile), true
		}
	}
	return exitLike(ws), true
}

// forwardedSignals are the signals run passes on to CMD.
var forwardedSignals = []os.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT}

// forwarder catches forwardedSignals from before the spawn call to run's end and sends
// them to CMD once it exists. One that would end run (SIGTERM, SIGHUP, SIGINT, SIGQUIT)
// before CMD exists cuts the call short and ends run by that signal, CMD never started,
// as it ended run before it caught them; the others (SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT)
// wait for CMD.
type forwarder struct {
	ctx    context.Context
	cancel context.CancelFunc
	sigs   chan os.Signal
	ready  chan struct{} // closed once fds, env and fg are set (the signals are caught before)
	gone   chan struct{} // closed when the goroutine returned (after release)
	fds    []uintptr
	env    []string
	fg     bool

	mu      sync.Mutex
	pidfd   int              // CMD's, once it exists
	early   syscall.Signal   // one that ends run, caught before CMD existed
	pending []syscall.Signal // the others, caught before CMD existed
}

func startForwarder(ctx context.Context) *forwarder {
	f := &forwarder{sigs: make(chan os.Signal, 8), ready: make(chan struct{}), gone: make(chan struct{}), pidfd: -1}
	f.ctx, f.cancel = context.WithCancel(ctx)
	// Caught here, before the call starts, not on the goroutine: main's NotifyContext
	// catches SIGTERM and SIGINT too, and a signal that reached it before the goroutine
	// caught them cut the call short with no early signal seen: run failed with 125
	// ("no answer from sandboxd") instead of dying by the signal (TestRunSignalBeforeSpawn,
	// ~1 in 7 runs). Caught here, each such signal is in f.sigs before the call can end.
	signal.Notify(f.sigs, forwardedSignals...)
	go f.run()
	return f
}

func (f *forwarder) run() {
	defer close(f.gone)
	f.fds = inheritedFds()
	f.env = os.Environ()
	f.fg = foregroundOfTerminal()
	close(f.ready)
	for s := range f.sigs {
		sig := s.(syscall.Signal)
		f.mu.Lock()
		switch {
		case f.pidfd >= 0:
			f.forward(sig)
		case sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGINT || sig == syscall.SIGQUIT:
			if f.early == 0 {
				f.early = sig
				f.cancel()
			}
		default:
			f.pending = append(f.pending, sig)
		}
		f.mu.Unlock()
	}
}

// forward sends sig to CMD, but for what the terminal sent to CMD's process group too.
// Called with mu held.
func (f *forwarder) forward(sig syscall.Signal) {
	if f.fg && (sig == syscall.SIGINT || sig == syscall.SIGQUIT || sig == syscall.SIGWINCH) {
		return
	}
	unix.PidfdSendSignal(f.pidfd, unix.Signal(sig), nil, 0)
}

// spawned starts the forwarding to CMD, with what waited for it. Called with mu held.
func (f *forwarder) spawned(pidfd int) {
	f.pidfd = pidfd
	for _, sig := range f.pending {
		f.forward(sig)
	}
	f.pending = nil
}

// release stops catching the signals (CMD was not spawned: run execs in place or ends) and
// ends run by one that would have ended it meanwhile.
func (f *forwarder) release() {
	<-f.ready
	signal.Stop(f.sigs)
	close(f.sigs) // no more sends once Stop returned
	<-f.gone
	if f.early != 0 {
		dieOfEarly(f.early)
	}
}

// dieOfEarly ends run by a signal that came before CMD existed, as the signal's default
// action would have.
func dieOfEarly(sig syscall.Signal) int {
	dieOf(sig)
	os.Exit(128 + int(sig)) // not reached: sig's default action ends run
	return 0
}

// migrateAndExec is the fallback: the daemon moves run itself into the job's cgroup and
// run execs CMD in place.
func migrateAndExec(inv *invocation, sp *client.Spawning, why error, path string, argv, env []string, launch api.LaunchRequest, problemFile string) int {
	j, err := sp.Migrate(why)
	if err != nil {
		return runFailed(err, inv, inv.siteDisk(launch.Site), problemFile)
	}
	sp.Close()
	for _, w := range j.Warnings {
		fmt.Fprintf(inv.stderr, "%s: warning: %s\n", inv.name, w)
	}
	printSpawned(inv, *j)
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(inv.stderr, "%s: exec %s: %v\n", inv.name, path, err)
	return 126
}

func printSpawned(inv *invocation, j api.Job) {
	if inv.g.json {
		printJSON(inv.stderr, j)
		return
	}
	fmt.Fprintf(inv.stderr, "%s: job %s (cgroup %s, lease until %s, deadline %s)\n", inv.name, j.ID, j.Cgroup,
		j.LeaseExpiresAt.Format("15:04:05"), j.DeadlineAt.Format("2006-01-02 15:04:05"))
}

// inheritedFds are the fds CMD gets: every fd of run without close-on-exec, at its own
// number, as exec in place passed them (`sandboxd run -- cmd 3<file` keeps its fd 3).
// Without /proc, stdin, stdout and stderr.
func inheritedFds() []uintptr {
	std := []uintptr{0, 1, 2}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return std
	}
	var open []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			open = append(open, fd)
		}
	}
	if len(open) == 0 {
		return std
	}
	sort.Ints(open)
	out := make([]uintptr, open[len(open)-1]+1)
	for i := range out {
		out[i] = ^uintptr(0) // closed in the child
	}
	for _, fd := range open {
		out[fd] = uintptr(fd)
	}
	return out
}

// foregroundOfTerminal: run's process group is the foreground of its terminal, so ^C and
// ^\ reach CMD (in the same group) from the terminal itself and are not forwarded twice.
func foregroundOfTerminal() bool {
	pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

func waitChild(pid int) syscall.WaitStatus {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return ws
		}
	}
}

// exitLike ends run as CMD ended: its exit status, or death by its signal (re-raised with
// the default action, as a shell reports a command that exec in place would have been).
func exitLike(ws syscall.WaitStatus) int {
	if ws.Exited() {
		return ws.ExitStatus()
	}
	if ws.Signaled() {
		dieOf(ws.Signal())
		return 128 + int(ws.Signal()) // a signal whose default is to be ignored
	}
	return 128
}

// kSigaction is the kernel's struct sigaction (rt_sigaction) on Linux.
type kSigaction struct {
	handler, flags, restorer uintptr
	mask                     uint64
}

// dieOf ends run by sig with the kernel's default action. Go's runtime keeps handlers of
// its own (a SIGABRT or SIGQUIT would print a goroutine dump and exit 2, a SIGUSR1 would
// be caught and nothing done), so the handler is set to SIG_DFL with rt_sigaction itself,
// the signal unblocked on this thread and sent to it.
func dieOf(sig syscall.Signal) {
	if sig != syscall.SIGKILL && sig != syscall.SIGSTOP {
		unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}) // CMD dumped its core already
		var dfl kSigaction                               // handler 0: SIG_DFL
		unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		var set unix.Sigset_t
		set.Val[(sig-1)/64] |= 1 << ((uint(sig) - 1) % 64)
		unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	}
	unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
}
