package fusetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/mountinfo"
)

// Options shape one server.
type Options struct {
	// Backing is the directory the filesystem mirrors; empty: a fresh one in the
	// server's own state directory.
	Backing string
	// Credential is a credential file (see WriteCred); once its Expiration has passed,
	// lookup, readdir and create answer EACCES. Empty: never expires.
	Credential string
	// Reload re-reads Credential on every request, so a refresh_command that rewrites it
	// ends the denial (geesefs with a credential process). Without it the file is read
	// once at start, like geesefs's static keys: only a restart helps.
	Reload bool
	// UserID, when not 0, mounts for that uid without allow_other: every other uid, root
	// included, gets EACCES.
	UserID int
	// Binary is the executable re-executed for the server roles; empty: os.Executable(),
	// which must call Main from its TestMain.
	Binary string
}

// Server is one test filesystem at Dir and the servers started for it, by the test or by
// remount commands. Its methods are safe to call from a test's goroutines.
type Server struct {
	Dir, Backing, Credential string

	opts            Options
	state           string // the server's own directory: pid file, pid log, default backing
	pidfile, pidlog string
	ack             string // where the server acknowledges Hang and Unhang
}

// New prepares a server for dir without starting it (a remount command may be the first
// to start it) and registers the cleanup with t.
func New(t testing.TB, dir string, o Options) *Server {
	t.Helper()
	state, err := os.MkdirTemp("", "fusetest-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o755)
	if o.Binary == "" {
		if o.Binary, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
	}
	if o.Backing == "" {
		o.Backing = filepath.Join(state, "backing")
		if err := os.Mkdir(o.Backing, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(o.Backing, 0o777)
	}
	s := &Server{Dir: filepath.Clean(dir), Backing: o.Backing, Credential: o.Credential, opts: o, state: state,
		pidfile: filepath.Join(state, "server.pid"), pidlog: filepath.Join(state, "pids.log"), ack: filepath.Join(state, "hang.ack")}
	t.Cleanup(func() {
		if err := s.Cleanup(); err != nil {
			t.Errorf("fusetest cleanup: %v", err)
		}
	})
	return s
}

// Start prepares a server for dir (see New) and starts it; it fails the test when the
// mount does not come up.
func Start(t testing.TB, dir string, o Options) *Server {
	t.Helper()
	s := New(t, dir, o)
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	return s
}

// StartCommand is the argv that starts a server on Dir and returns once it is mounted:
// a remount_command for a server that is already dead.
func (s *Server) StartCommand() []string {
	argv := []string{s.opts.Binary, roleStart, "--dir", s.Dir, "--backing", s.Backing,
		"--pidfile", s.pidfile, "--pidlog", s.pidlog, "--ack", s.ack}
	if s.Credential != "" {
		argv = append(argv, "--cred", s.Credential)
	}
	if s.opts.Reload {
		argv = append(argv, "--reload")
	}
	if s.opts.UserID != 0 {
		argv = append(argv, "--user-id", strconv.Itoa(s.opts.UserID))
	}
	return argv
}

// RemountCommand is a remount_command that kills the current server first (a restart)
// and, when renew > 0, rewrites the credential file to expire renew ahead, as a restart
// with fresh static keys would.
func (s *Server) RemountCommand(renew time.Duration) []string {
	argv := append(s.StartCommand(), "--kill")
	if renew > 0 {
		argv = append(argv, "--renew", renew.String())
	}
	return argv
}

// ForegroundCommand is a remount_command that restarts the server (as RemountCommand) and
// then keeps running until the server exits, as `rclone mount` without --daemon does: a
// caller that waits for it to exit waits forever.
func (s *Server) ForegroundCommand() []string {
	return append(s.RemountCommand(0), "--foreground")
}

// Run starts a server on Dir and waits until it is mounted.
func (s *Server) Run() error {
	return s.run(s.StartCommand())
}

func (s *Server) run(argv []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("start test filesystem on %s: %w: %s", s.Dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Pid is the current server's pid (0 before the first start).
func (s *Server) Pid() int { return readPid(s.pidfile) }

// Kill SIGKILLs the current server, leaving a dead mount (ENOTCONN), and waits until the
// process is gone.
func (s *Server) Kill() {
	pid := s.Pid()
	if pid <= 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(pid, 5*time.Second)
}

// Hang makes the current server stop answering: every request from now on blocks until
// the connection is aborted or the server killed. It returns once the server has taken
// the signal (it handles it asynchronously), so a request made after Hang hangs.
func (s *Server) Hang() { s.signal(syscall.SIGUSR1, true) }

// Unhang makes a hung server answer again (the backend came back): requests blocked in it
// go on, and new ones are answered. It returns once the server has taken the signal.
func (s *Server) Unhang() { s.signal(syscall.SIGUSR2, false) }

// Held is how many requests the current server holds while hung: requests it has read
// from the kernel, whose callers wait where even SIGKILL does not free them (until the
// connection is aborted or the server answers).
func (s *Server) Held() int {
	b, err := os.ReadFile(s.ack + ".held")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// signal sends sig to the current server and waits, with a loaded machine's patience,
// until the server acknowledges that it is hung (or answering); a server that died
// meanwhile acknowledges nothing, and the wait ends with it.
func (s *Server) signal(sig syscall.Signal, hung bool) {
	pid := s.Pid()
	if pid <= 0 {
		return
	}
	syscall.Kill(pid, sig)
	want := fmt.Sprintf("%d %d", pid, map[bool]int{false: 0, true: 1}[hung])
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && alive(pid); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(s.ack); err == nil && string(b) == want {
			return
		}
	}
}

// Restart kills the current server, aborts and detaches what is left at Dir, and starts a
// new one: what an operator's restart of the FUSE daemon does.
func (s *Server) Restart() error {
	s.Kill()
	s.detach()
	return s.Run()
}

// Mounted reports whether the topmost mount at Dir is FUSE, and its connection number.
func (s *Server) Mounted() (conn uint32, ok bool) {
	top, ok := mountinfo.Deepest(readMountinfo(), s.Dir, func(e mountinfo.Entry) bool { return e.MountPoint == s.Dir })
	if !ok || !isFUSE(top.FSType) {
		return 0, false
	}
	return top.Minor, true
}

// Cleanup ends everything the server left: it aborts every FUSE connection at or under
// Dir (freeing callers stuck in a hung request), kills every server started for it,
// detaches the mounts and removes its state. It repeats a few times, since a remount
// command still running may start one more server. New registers it with the test.
func (s *Server) Cleanup() error {
	var err error
	for i := 0; i < 10; i++ {
		s.killAll()
		s.detach()
		if !s.anyLeft() {
			err = nil
			break
		}
		err = fmt.Errorf("mounts or servers left at %s", s.Dir)
		time.Sleep(200 * time.Millisecond)
	}
	// By path: test support, never linked into sandboxd; s.state is the MkdirTemp of New.
	os.RemoveAll(s.state)
	return err
}

func (s *Server) pids() []int {
	b, _ := os.ReadFile(s.pidlog)
	var out []int
	for _, l := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(l); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

func (s *Server) killAll() {
	for _, pid := range s.pids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// anyLeft reports whether a mount remains at or under Dir or a server is still alive.
func (s *Server) anyLeft() bool {
	if len(mountsUnder(readMountinfo(), s.Dir)) > 0 {
		return true
	}
	for _, pid := range s.pids() {
		if alive(pid) {
			return true
		}
	}
	return false
}

// waitGone waits until pid has exited (or is a zombie) or timeout passed.
func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs: it is not a zombie, or it is a zombie thread-group
// leader whose other threads are still exiting. A killed Go server's main thread turns
// zombie first; its /dev/fuse fd is closed (the connection aborted) only when its last
// thread exits, so until then a request still waits for it. A pid reused by an unrelated
// process reads alive too; cleanup only waits a little longer then.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		return err == nil && len(tasks) > 1
	}
	return true
}
