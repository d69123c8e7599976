package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// JobOptions are the options of Start (CONTRACT §15): the launch check's site, mounts and
// needs, the job's lease, and how the command is run.
type JobOptions struct {
	// ID is the job's id (the site's job id when Site is set); empty: the daemon makes one.
	ID string
	// TTL is the lease: without a heartbeat within it the daemon ends the job (0: the
	// daemon's [jobs] default_ttl). Heartbeat is how often Start renews it (0: TTL/3).
	TTL, Heartbeat time.Duration
	// MaxLifetime is the hard cap; Grace the time between SIGTERM and SIGKILL (0: defaults).
	MaxLifetime, Grace time.Duration
	Site               string
	// Lease names a shared lease (CONTRACT §17) the job joins.
	Lease  string
	Mounts []string
	Labels map[string]string
	// NeedBytes and NeedInodes are the launch check's needs (nil: [launch] defaults).
	NeedBytes  *api.Size
	NeedInodes *uint64
	// The command's stdio, directory and environment, as in exec.Cmd (nil Env: this
	// process's). SANDBOXD_JOB_ID is added.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Dir            string
	Env            []string
	// OnHeartbeatError is called at once with each failed heartbeat; the first is also
	// returned by End and Err. Never swallowed.
	OnHeartbeatError func(error)
}

// jobRequest is POST /v1/jobs with the shared lease's name (§17), sent only when set.
type jobRequest struct {
	api.JobRequest
	Lease string `json:"lease,omitempty"`
}

// HeartbeatError is a failed heartbeat of a started job.
type HeartbeatError struct {
	Job string
	Err error
}

func (e *HeartbeatError) Error() string {
	return fmt.Sprintf("heartbeat of job %s failed: %v", e.Job, e.Err)
}
func (e *HeartbeatError) Unwrap() error { return e.Err }

// gate runs the command only once its pid is in the job's cgroup: sh waits on fd 3 until
// the runner has registered it, reads the job id (exported as SANDBOXD_JOB_ID) and execs
// the command in place, so nothing it forks escapes the cgroup. A runner that dies first
// closes the pipe and the gate exits 125 without running the command.
const gate = `IFS= read -r SANDBOXD_JOB_ID <&3 || exit 125; exec 3<&-; export SANDBOXD_JOB_ID; exec "$@"`

// Job is a command started as a sandboxd job by Start. End it with End (defer it): that
// stops the heartbeats, ends the job and returns once its cgroup is empty.
type Job struct {
	ID   string
	PID  int
	Info *api.Job
	Cmd  *exec.Cmd

	c      *Client
	stop   chan struct{}
	beats  sync.WaitGroup
	exited chan struct{} // closed once Cmd.Wait returned
	err    error         // Cmd.Wait's, read after exited

	mu     sync.Mutex
	hbErr  error // the first failed heartbeat
	ended  *api.Job
	endErr error
	once   sync.Once
}

// Start runs the launch check (Site, Mounts, needs), starts argv behind a gate, registers
// the command's pid as the job (so the lease covers the command, not this runner), lets
// it run, and renews its lease every Heartbeat on the monotonic clock until End, or until
// ctx is done (then the lease lapses and the daemon ends the job: the dead-man switch). A
// refusal is a *ProblemError and nothing was started.
func (c *Client) Start(ctx context.Context, argv []string, o JobOptions) (*Job, error) {
	if len(argv) == 0 {
		return nil, errors.New("start: no command")
	}
	if o.TTL < 0 || o.Heartbeat < 0 {
		return nil, errors.New("start: a negative ttl or heartbeat")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	if !spawnDisabled() {
		if j, done, err := c.startSpawned(ctx, argv, o); done {
			return j, err
		}
	}
	if _, err := c.Launch(ctx, api.LaunchRequest{Site: o.Site, Mounts: o.Mounts, NeedBytes: o.NeedBytes, NeedInodes: o.NeedInodes}); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start: gate pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", gate, "sandboxd-job"}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Dir, cmd.Env = o.Stdin, o.Stdout, o.Stderr, o.Dir, o.Env
	cmd.ExtraFiles = []*os.File{r} // fd 3
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	j := &Job{PID: cmd.Process.Pid, Cmd: cmd, c: c, stop: make(chan struct{}), exited: make(chan struct{})}
	go func() { j.err = cmd.Wait(); close(j.exited) }()
	req := jobRequest{JobRequest: api.JobRequest{ID: o.ID, PID: j.PID, Site: o.Site, Labels: o.Labels,
		TTL: dur(o.TTL), MaxLifetime: dur(o.MaxLifetime), Grace: dur(o.Grace)}, Lease: o.Lease}
	var info api.Job
	if err := c.Do(ctx, "POST", "/v1/jobs", req, &info, 0); err != nil {
		w.Close() // EOF at the gate: the command never runs
		<-j.exited
		return nil, err
	}
	_, err = fmt.Fprintf(w, "%s\n", info.ID)
	w.Close()
	j.ID, j.Info = info.ID, &info
	if err != nil { // the gate is gone (killed): the job ends by itself
		return j, fmt.Errorf("start: release the gate of job %s: %w", info.ID, err)
	}
	j.startBeats(ctx, o)
	return j, nil
}

// startSpawned is Start by POST /v1/jobs/spawn (issue 27): the launch check and the
// registration in one call, argv started straight in the job's cgroup with
// clone3(CLONE_INTO_CGROUP), no gate and no migration. done is false when the old path
// must run instead: a daemon without the route, or a kernel that refused the spawn
// (before 5.7; a non-root caller of a root daemon, which cannot write the job's cgroup).
func (c *Client) startSpawned(ctx context.Context, argv []string, o JobOptions) (*Job, bool, error) {
	req := api.JobRequest{ID: o.ID, Site: o.Site, Labels: o.Labels, Lease: o.Lease,
		TTL: dur(o.TTL), MaxLifetime: dur(o.MaxLifetime), Grace: dur(o.Grace),
		Launch: &api.LaunchRequest{Site: o.Site, Mounts: o.Mounts, NeedBytes: o.NeedBytes, NeedInodes: o.NeedInodes}}
	sp, err := c.BeginSpawn(ctx, req)
	if err != nil {
		if SpawnUnsupported(err) {
			return nil, false, nil
		}
		return nil, true, err
	}
	defer sp.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env[:len(env):len(env)], api.JobIDEnv+"="+sp.Job.ID, api.JobCgroupEnv+"="+sp.Job.Cgroup)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Dir = o.Stdin, o.Stdout, o.Stderr, o.Dir
	pidfd := -1
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: sp.CgroupFD, PidFD: &pidfd}
	if err := cmd.Start(); err != nil {
		sp.Abort(err.Error())
		if CloneIntoCgroupFailed(err) {
			return nil, false, nil
		}
		return nil, true, fmt.Errorf("start %s: %w", argv[0], err)
	}
	// Reported, and answered, before anything reaps the child (Spawned says why).
	err = sp.Spawned(pidfd)
	var info *api.Job
	if err == nil {
		info, err = sp.Result()
	}
	syscall.Close(pidfd)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, true, err
	}
	j := &Job{ID: info.ID, PID: cmd.Process.Pid, Info: info, Cmd: cmd, c: c, stop: make(chan struct{}), exited: make(chan struct{})}
	go func() { j.err = cmd.Wait(); close(j.exited) }()
	j.startBeats(ctx, o)
	return j, true, nil
}

// startBeats starts the heartbeats of a registered job.
func (j *Job) startBeats(ctx context.Context, o JobOptions) {
	info := j.Info
	every := o.Heartbeat
	if every == 0 {
		every = time.Duration(info.TTLSeconds*float64(time.Second)) / 3
		if every <= 0 {
			every = time.Minute
		}
	}
	j.beats.Add(1)
	go j.beat(ctx, every, o.OnHeartbeatError)
}

func dur(d time.Duration) *api.Duration {
	if d == 0 {
		return nil
	}
	x := api.Duration(d)
	return &x
}

// beat renews the lease every interval. time.Timer runs on the monotonic clock, so a
// wall-clock jump neither skips nor bunches heartbeats.
func (j *Job) beat(ctx context.Context, every time.Duration, onErr func(error)) {
	defer j.beats.Done()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := j.c.Heartbeat(ctx, j.ID, 0)
		select {
		case <-j.stop:
			return
		default:
		}
		if err != nil {
			var pe *ProblemError
			gone := errors.As(err, &pe) && pe.Code() == api.CodeNotFound
			if gone && j.exitedByItself(ctx) {
				return // the command exited and its job ended: nothing to renew
			}
			he := &HeartbeatError{Job: j.ID, Err: err}
			j.mu.Lock()
			if j.hbErr == nil {
				j.hbErr = he
			}
			j.mu.Unlock()
			if onErr != nil {
				onErr(he)
			}
			if gone {
				return // no heartbeat brings an ended job back
			}
		}
		t.Reset(every)
	}
}

func (j *Job) exitedByItself(ctx context.Context) bool {
	info, err := j.c.Job(ctx, j.ID)
	return err == nil && info.Reason == api.ReasonExited
}

// Err is the first failed heartbeat (a *HeartbeatError), or nil.
func (j *Job) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.hbErr
}

// Exited is closed once the command has exited.
func (j *Job) Exited() <-chan struct{} { return j.exited }

// Wait waits for the command to exit and returns exec.Cmd.Wait's error (an
// *exec.ExitError for a non-zero status).
func (j *Job) Wait() error {
	<-j.exited
	return j.err
}

// End ends the job: it stops the heartbeats, ends the job (DELETE /v1/jobs/{id}: SIGTERM,
// SIGKILL after its grace) and returns once its cgroup is empty and the command is reaped.
// It returns the ended job, and as its error the failure to end it or else the first
// failed heartbeat. Safe to call more than once.
func (j *Job) End(ctx context.Context) (*api.Job, error) {
	j.once.Do(func() {
		close(j.stop)
		j.beats.Wait()
		grace := time.Duration(j.Info.GraceSeconds * float64(time.Second))
		ended, err := j.c.EndJob(ctx, j.ID, true, grace)
		var pe *ProblemError
		if errors.As(err, &pe) && pe.Code() == api.CodeNotFound {
			ended, err = &api.Job{ID: j.ID, State: api.JobEnded, Reason: api.ReasonExited}, nil
		}
		if err == nil {
			select {
			case <-j.exited:
			case <-ctx.Done():
				err = fmt.Errorf("end job %s: wait for the command: %w", j.ID, ctx.Err())
			}
		}
		j.mu.Lock()
		j.ended, j.endErr = ended, err
		j.mu.Unlock()
	})
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.endErr != nil {
		return j.ended, j.endErr
	}
	return j.ended, j.hbErr
}
