package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/sandboxd/sandboxd/api"
)

// NoSpawnEnv, set to 1, makes BeginSpawn's callers skip clone3(CLONE_INTO_CGROUP) and
// take the migration fallback, as on a kernel before 5.7 (for tests of that path).
const NoSpawnEnv = "SANDBOXD_NO_SPAWN_INTO_CGROUP"

// Spawning is a job the daemon registered for a process the caller has yet to start
// (POST /v1/jobs/spawn, issue 27): CgroupFD is the job's cgroup directory, for
// clone3(CLONE_INTO_CGROUP) (SysProcAttr UseCgroupFD). Report the child with Spawned (or
// ask for Migrate, or Abort), then read the outcome with Result. Close it in every case.
type Spawning struct {
	// Job is the job as registered, pid 0 until its process is reported; Job.Launch is
	// the launch check's answer when the request carried one.
	Job      api.Job
	CgroupFD int

	conn    *net.UnixConn
	r       *bufio.Reader
	sent    bool
	timeout time.Duration
}

// msgReader reads a Unix connection with recvmsg, keeping the fds that come with it.
type msgReader struct {
	c   *net.UnixConn
	fds []int
}

func (m *msgReader) Read(p []byte) (int, error) {
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := m.c.ReadMsgUnix(p, oob)
	if n < 0 {
		n = 0
	}
	if oobn > 0 {
		if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, cm := range msgs {
				if fds, err := syscall.ParseUnixRights(&cm); err == nil {
					for _, fd := range fds {
						syscall.CloseOnExec(fd)
					}
					m.fds = append(m.fds, fds...)
				}
			}
		}
	}
	return n, err
}

// BeginSpawn is POST /v1/jobs/spawn: the launch check (req.Launch) and the registration
// in one call; on success the job's cgroup fd. A refusal is a *ProblemError and
// registers nothing; a daemon without the route answers 404 (SpawnUnsupported says so).
func (c *Client) BeginSpawn(ctx context.Context, req api.JobRequest) (*Spawning, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	limit := time.Duration(0)
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
		limit = timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := DialUnix(c.Socket())
	if len(c.ServerUIDs) > 0 {
		dial = dialChecked(dial, c.ServerUIDs)
	}
	nc, err := dial(ctx, "unix", "")
	if err != nil {
		return nil, c.unreachable(err)
	}
	conn := nc.(*net.UnixConn)
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	// A cancelled ctx (sandboxd run's caught SIGTERM) cuts the call short.
	defer context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode POST /v1/jobs/spawn request: %w", err)
	}
	hr, _ := http.NewRequest(http.MethodPost, "http://sandboxd/v1/jobs/spawn", bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("Connection", "Upgrade")
	hr.Header.Set("Upgrade", api.SpawnProtocol)
	if err := hr.Write(conn); err != nil {
		return nil, c.failed(err, true, limit)
	}
	// While the daemon checks, registers and makes the cgroup, build the decoders of its
	// answers (the offer, the report's answer, a refusal): the first decoding of an
	// api.Job builds them by reflection, 0.2-0.3 ms on sandboxd run's path otherwise.
	warmOnce.Do(func() {
		go warmDecoders(reflect.TypeFor[api.SpawnOffer](), reflect.TypeFor[api.SpawnAnswer](), reflect.TypeFor[api.Problem]())
	})
	mr := &msgReader{c: conn}
	closeFds := func() {
		for _, fd := range mr.fds {
			syscall.Close(fd)
		}
		mr.fds = nil
	}
	br := bufio.NewReader(mr)
	resp, err := http.ReadResponse(br, hr)
	if err != nil {
		closeFds()
		return nil, c.failed(err, true, limit)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		closeFds()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		pe := &ProblemError{StatusCode: resp.StatusCode}
		if err := json.Unmarshal(data, &pe.Problem); err != nil || pe.Problem.Code == "" {
			pe.Problem = api.Problem{Status: resp.StatusCode, Code: api.CodeInternal,
				Detail: fmt.Sprintf("unexpected answer %d to POST /v1/jobs/spawn: %.200s", resp.StatusCode, data)}
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			pe.RetryAfter = time.Duration(s) * time.Second
		}
		return nil, pe
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		closeFds()
		return nil, c.failed(err, true, limit)
	}
	var offer api.SpawnOffer
	if err := json.Unmarshal(line, &offer); err != nil || len(mr.fds) != 1 {
		closeFds()
		return nil, fmt.Errorf("POST /v1/jobs/spawn: a malformed offer (%d fds, %v)", len(mr.fds), err)
	}
	ok = true
	conn.SetDeadline(time.Time{})
	return &Spawning{Job: offer.Job, CgroupFD: mr.fds[0], conn: conn, r: br, timeout: timeout}, nil
}

// SpawnUnsupported says whether err from BeginSpawn means the daemon predates
// POST /v1/jobs/spawn (answered as an unknown route): register the old way then.
func SpawnUnsupported(err error) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && (pe.StatusCode == http.StatusNotFound || pe.StatusCode == http.StatusMethodNotAllowed) &&
		strings.Contains(pe.Problem.Detail, "/v1/jobs/spawn")
}

// CloneIntoCgroupFailed says whether err from starting a process with UseCgroupFD is one
// a fallback to the migration can help: no clone3 or no CLONE_INTO_CGROUP (ENOSYS, E2BIG,
// EINVAL before 5.7), or a cgroup the kernel does not let this process write (EACCES,
// EPERM: a non-root runner of a root daemon), or one it cannot join (EBUSY, EOPNOTSUPP).
// An exec failure (EACCES of the program) looks the same: it fails again after the
// fallback and is reported then.
func CloneIntoCgroupFailed(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSYS, syscall.E2BIG, syscall.EINVAL, syscall.EACCES, syscall.EPERM, syscall.EBUSY, syscall.EOPNOTSUPP} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Spawned reports the child started in the job's cgroup, by its pidfd (SysProcAttr
// PidFD). It does not wait for the daemon's answer, but the caller must not reap the
// child before Result answered: the daemon checks the process the pidfd names (a zombie
// still counts; a reaped one cannot be checked and is refused). Wait for its exit with
// waitid(P_PIDFD, WEXITED|WNOWAIT) meanwhile, as sandboxd run does.
func (s *Spawning) Spawned(pidfd int) error {
	return s.send(api.SpawnReport{Spawned: true}, syscall.UnixRights(pidfd))
}

// Migrate asks the daemon to move the caller itself into the job's cgroup instead (the
// spawn failed with why) and returns the job as registered then.
func (s *Spawning) Migrate(why error) (*api.Job, error) {
	rep := api.SpawnReport{Migrate: true}
	if why != nil {
		rep.Error = why.Error()
	}
	if err := s.send(rep, nil); err != nil {
		return nil, err
	}
	return s.Result()
}

// Abort registers nothing; what was started in the cgroup is killed by the daemon.
func (s *Spawning) Abort(why string) error {
	if err := s.send(api.SpawnReport{Abort: why}, nil); err != nil {
		return err
	}
	_, err := s.Result()
	var pe *ProblemError
	if errors.As(err, &pe) {
		return nil // the abort's own answer
	}
	return err
}

func (s *Spawning) send(rep api.SpawnReport, oob []byte) error {
	if s.sent {
		return errors.New("spawn: already reported")
	}
	s.sent = true
	b, _ := json.Marshal(rep)
	if _, _, err := s.conn.WriteMsgUnix(append(b, '\n'), oob, nil); err != nil {
		return fmt.Errorf("spawn: report to sandboxd: %w", err)
	}
	return nil
}

// Result reads the daemon's answer to the report: the job as registered, or a
// *ProblemError (nothing registered). It waits at most Client.Timeout (30 s by default).
func (s *Spawning) Result() (*api.Job, error) {
	dl := time.Now().Add(s.timeout)
	if s.r.Buffered() == 0 {
		s.awaitReadable(dl)
	}
	s.conn.SetReadDeadline(dl)
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("spawn: no answer from sandboxd: %w", err)
	}
	var ans api.SpawnAnswer
	if err := json.Unmarshal(line, &ans); err != nil {
		return nil, fmt.Errorf("spawn: malformed answer: %v", err)
	}
	if ans.Problem != nil {
		return nil, &ProblemError{StatusCode: ans.Problem.Status, Problem: *ans.Problem}
	}
	if ans.Job == nil {
		return nil, errors.New("spawn: an answer without a job")
	}
	return ans.Job, nil
}

// awaitReadable waits until the connection has something to read (or until dl) in a
// blocking poll(2) on the calling thread, not in Go's network poller: sandboxd run waits
// here on its locked thread, and the poller's hand-off of a locked goroutine to its thread
// is a cross-thread wake-up, which costs tens of µs on a VM (issue 27).
func (s *Spawning) awaitReadable(dl time.Time) {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		// ppoll(2) through syscall: the client stays standard-library only (TestDependencies).
		pfd := struct {
			fd              int32
			events, revents int16
		}{fd: int32(fd), events: pollIn}
		for {
			left := time.Until(dl)
			if left <= 0 {
				return
			}
			ts := syscall.NsecToTimespec(int64(left))
			_, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
			if e != syscall.EINTR {
				return
			}
		}
	})
}

// pollIn is POLLIN of poll(2).
const pollIn = 0x1

// Close closes the connection and the cgroup fd.
func (s *Spawning) Close() {
	if s.CgroupFD >= 0 {
		syscall.Close(s.CgroupFD)
		s.CgroupFD = -1
	}
	s.conn.Close()
}

// spawnDisabled is NoSpawnEnv's test hook.
func spawnDisabled() bool { return os.Getenv(NoSpawnEnv) == "1" }

// SpawnDisabled reports whether NoSpawnEnv asks for the migration fallback.
func SpawnDisabled() bool { return spawnDisabled() }

// warmOnce: the caches are the process's; once built, there is nothing to warm.
var warmOnce sync.Once

// warmDecoders builds encoding/json's decoding caches (the fields of each struct type,
// filled on its first decoding) for types and every struct type their fields reach, by
// decoding "{}" into each. Only speed depends on it: a type it misses is built when
// first decoded, as without it.
func warmDecoders(types ...reflect.Type) {
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || reflect.PointerTo(t).Implements(unmarshaler) {
			return
		}
		seen[t] = true
		json.Unmarshal([]byte("{}"), reflect.New(t).Interface())
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() || f.Anonymous {
				walk(f.Type)
			}
		}
	}
	for _, t := range types {
		walk(t)
	}
}
