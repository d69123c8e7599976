package mountwatch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/runas"
)

// Probe servers. A probe is a few syscalls, but a fresh child per probe costs a fork and
// exec of the daemon's binary and the Go runtime's start, ≈ 4 ms of CPU: with 50 session
// mounts at a 5 s interval that alone is ≈ 4 % of a core. So the probes of each owner run
// in one long-lived child of that owner (`mount-probe --serve`), each request in its own
// goroutine there. The isolation stays: a hung FUSE mount traps a thread of that child in
// uninterruptible sleep, never a daemon thread; the daemon still keeps at most one
// outstanding probe per mount, counts one that passed its probe_timeout as hung, and sees
// its answer only once an abort frees it. A probe server that dies fails its pending
// probes (the round is not counted) and the next probe starts a new one.

// probeRequest is one line on a probe server's stdin; probeAnswer one on its stdout.
type probeRequest struct {
	ID     uint64 `json:"id"`
	Path   string `json:"path"`
	Canary bool   `json:"canary,omitempty"`
	Fsync  bool   `json:"fsync,omitempty"`
}

type probeAnswer struct {
	ID uint64 `json:"id"`
	probeResult
}

// serveProbes is the probe server's loop: each request runs in its own goroutine, each
// answer is one line; it returns when stdin closes (the daemon stopped or dropped it).
func serveProbes(in io.Reader, out io.Writer) int {
	var mu sync.Mutex // serialises answer lines
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var req probeRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil || !filepath.IsAbs(req.Path) {
			continue // the daemon's request timed out or will: nothing to answer to
		}
		go func() {
			var r probeResult
			if req.Fsync {
				r = fsyncRoot(req.Path)
			} else {
				r = probe(req.Path, req.Canary)
			}
			b, _ := json.Marshal(probeAnswer{ID: req.ID, probeResult: r})
			mu.Lock()
			out.Write(append(b, '\n'))
			mu.Unlock()
		}()
	}
	return 0
}

// probeServer is the daemon's side of one probe server: requests go through a buffered
// channel to a writer goroutine (a wedged child can never block the caller, which holds
// w.mu), answers come back through a reader goroutine to the pending probe's child.
type probeServer struct {
	reqs chan []byte
	pid  int // the child's

	mu      sync.Mutex // guards pending, nextID, dead, closed, and sends on reqs
	pending map[uint64]*child
	nextID  uint64
	dead    bool // the child exited
	closed  bool // reqs is closed (closeAll)
}

// probeServers are the running probe servers by owner; the zero value is ready.
type probeServers struct {
	mu    sync.Mutex // guards byKey, stopped
	byKey map[string]*probeServer
	// stopped: closeAll ran (the watcher's Run returned). No server starts after it: a
	// remediation worker still running then (a remount's probes) would start one that
	// nothing closes any more, a child left reading its stdin for the life of the process.
	stopped bool
}

// credKey names a credential with its groups: a peer's SO_PEERGROUPS may differ from the
// user database's groups of the same uid, and a probe server runs with exactly one set.
func credKey(cred *syscall.Credential) string {
	if cred == nil {
		return "self"
	}
	k := strconv.FormatUint(uint64(cred.Uid), 10) + ":" + strconv.FormatUint(uint64(cred.Gid), 10) + ":"
	for _, g := range cred.Groups {
		k += strconv.FormatUint(uint64(g), 10) + ","
	}
	return k
}

// probe sends one probe to the server of cred (started when there is none) and answers a
// child that is reaped when the answer arrives and expires at timeout.
func (ps *probeServers) probe(argv []string, cred *syscall.Credential, req probeRequest, timeout time.Duration) (*child, error) {
	s, err := ps.server(argv, cred)
	if err != nil {
		return nil, err
	}
	c := &child{start: time.Now(), expired: make(chan struct{}), reaped: make(chan struct{}), out: &lockedBuffer{}}
	s.mu.Lock()
	if s.dead || s.closed {
		s.mu.Unlock()
		return nil, errors.New("the probe server just exited")
	}
	s.nextID++
	req.ID = s.nextID
	s.pending[req.ID] = c
	b, _ := json.Marshal(req)
	sent := false
	select {
	case s.reqs <- append(b, '\n'):
		sent = true
	default:
	}
	s.mu.Unlock()
	if !sent {
		s.finish(req.ID, "", errors.New("the probe server is not taking requests"))
		return c, nil
	}
	timer := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.killed = true // no kill: the request stays outstanding until the mount answers
		c.mu.Unlock()
		close(c.expired)
	})
	go func() { <-c.reaped; timer.Stop() }()
	return c, nil
}

// server is the live probe server of cred, started when there is none.
func (ps *probeServers) server(argv []string, cred *syscall.Credential) (*probeServer, error) {
	key := credKey(cred)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.stopped {
		return nil, errors.New("probe servers stopped: the watcher is not running")
	}
	if s := ps.byKey[key]; s != nil {
		s.mu.Lock()
		gone := s.dead || s.closed
		s.mu.Unlock()
		if !gone {
			return s, nil
		}
	}
	// A server of an owner other than root is that owner's, as its commands are
	// (callerArgv): a clean environment (cleanEnv) and the default oom_score_adj of 0, not
	// the daemon's whole environment and its -900 (issue 21).
	run, env := callerArgv(append(append([]string(nil), argv...), "--serve"), cred, cred != nil)
	cmd := exec.Command(run[0], run[1:]...)
	cmd.Env = env // nil (root's): the daemon's own
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("probe server: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("probe server: %w", err)
	}
	// From the stable thread: Pdeathsig follows the forking thread (runas.StartFromStableThread).
	if err := runas.StartFromStableThread(cmd); err != nil {
		return nil, fmt.Errorf("start probe server %s: %w", argv[0], err)
	}
	s := &probeServer{reqs: make(chan []byte, 1024), pid: cmd.Process.Pid, pending: map[uint64]*child{}}
	go func() { // writer: ends when the channel closes (closeAll) or the child stops reading
		for b := range s.reqs {
			if _, err := stdin.Write(b); err != nil {
				cmd.Process.Kill()
				break
			}
		}
		stdin.Close()
	}()
	go func() { // reader: answers to their probes; at EOF every pending probe fails
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var a probeAnswer
			if json.Unmarshal(sc.Bytes(), &a) == nil {
				line, _ := json.Marshal(a.probeResult)
				s.finish(a.ID, string(line), nil)
			}
		}
		err := cmd.Wait()
		s.mu.Lock()
		s.dead = true
		ids := make([]uint64, 0, len(s.pending))
		for id := range s.pending {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		for _, id := range ids {
			s.finish(id, "", fmt.Errorf("the probe server exited: %v", err))
		}
	}()
	if ps.byKey == nil {
		ps.byKey = map[string]*probeServer{}
	}
	ps.byKey[key] = s
	return s, nil
}

// finish completes the pending probe id with its answer line (or err).
func (s *probeServer) finish(id uint64, line string, err error) {
	s.mu.Lock()
	c := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.out.Write([]byte(line + "\n"))
	c.mu.Lock()
	c.err, c.end = err, time.Now()
	c.mu.Unlock()
	close(c.reaped)
}

// closeAll stops every probe server (their stdin closes; they exit once their probes
// stuck in a hung mount, if any, are freed) and starts none after.
func (ps *probeServers) closeAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.stopped = true
	for k, s := range ps.byKey {
		s.mu.Lock()
		s.closed = true
		close(s.reqs)
		s.mu.Unlock()
		delete(ps.byKey, k)
	}
}
