package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
)

// spawnReportWait bounds how long the daemon waits for the report of a spawned job's
// process after it sent the cgroup's fd; a caller that says nothing by then (stopped,
// stuck) gets nothing registered, and what it started in the cgroup is killed.
const spawnReportWait = 30 * time.Second

// handleJobSpawn is POST /v1/jobs/spawn (issue 27, docs/api.md "Spawning a job"): the
// launch check and the registration in one call, then, on the same connection switched
// to api.SpawnProtocol, the job's cgroup fd to the caller and the caller's report of the
// child it started there with clone3(CLONE_INTO_CGROUP). A refusal before the switch is an
// ordinary problem answer and registers nothing.
func (d *Daemon) handleJobSpawn(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.SpawnProtocol) {
		return api.NewProblem(api.CodeBadRequest, "POST /v1/jobs/spawn switches protocols to pass file descriptors: send \"Connection: Upgrade\" and \"Upgrade: %s\" (or register an existing process with POST /v1/jobs)", api.SpawnProtocol)
	}
	jc, err := d.beginJobCall(r)
	if err != nil {
		return err
	}
	defer jc.close()
	req, warnings, launch, by := jc.req, jc.warnings, jc.launch, jc.by
	p := peerFrom(r.Context())
	sp, err := d.jobReg.Reserve(req, by)
	if err != nil {
		return err
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		sp.Abandon("the connection could not be switched")
		return api.NewProblem(api.CodeInternal, "switch protocols: %v", err)
	}
	defer conn.Close()
	uc := p.conn
	if brw.Reader.Buffered() > 0 {
		sp.Abandon("the caller sent data before the switch")
		return nil // the caller broke the protocol; closing is the answer
	}
	uc.SetDeadline(time.Now().Add(spawnReportWait))
	// A stop lets the report come within its grace (the job is then registered and
	// journaled as ever); once the grace passed, the wait ends (stop.go).
	defer context.AfterFunc(d.baseCtx, func() { uc.SetReadDeadline(time.Now()) })()

	offer := api.SpawnOffer{Job: sp.View()}
	offer.Job.Launch = launch
	offer.Job.Warnings = append(offer.Job.Warnings, warnings...)
	line, _ := json.Marshal(offer)
	msg := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.SpawnProtocol + "\r\n\r\n" + string(line) + "\n"
	_, _, err = uc.WriteMsgUnix([]byte(msg), unix.UnixRights(sp.Fd), nil)
	sp.CloseFd()
	if err != nil {
		sp.Abandon("the offer could not be sent: " + err.Error())
		return nil
	}
	rep, fds, err := readSpawnReport(uc)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var j api.Job
	switch {
	case err != nil && d.baseCtx.Err() != nil:
		sp.Abandon("sandboxd is stopping: no report within the stop grace")
		err = stoppingSpawnProblem(offer.Job.ID)
	case err != nil:
		sp.Abandon("no report: " + err.Error())
		err = api.NewProblem(api.CodeBadRequest, "the spawn report: %v", err)
	case rep.Spawned && len(fds) == 1:
		j, err = sp.Adopt(fds[0])
	case rep.Spawned:
		sp.Abandon("a report without one pidfd")
		err = api.NewProblem(api.CodeBadRequest, "the spawn report says spawned but carries %d file descriptors, not the child's pidfd", len(fds))
	case rep.Migrate:
		d.logger.Info("spawn into the job's cgroup failed: the caller is moved into it instead", "job", offer.Job.ID, "error", rep.Error)
		j, err = sp.Migrate(by)
	default:
		why := rep.Abort
		if why == "" {
			why = "the report names nothing to do"
		}
		sp.Abandon("the caller aborted: " + why)
		err = api.NewProblem(api.CodeBadRequest, "job %q not registered: the caller aborted (%s)", offer.Job.ID, why)
	}
	var ans api.SpawnAnswer
	if err != nil {
		ans.Problem = asProblem(err)
	} else {
		d.touchActivity()
		j.Launch = launch
		j.Warnings = append(j.Warnings, warnings...)
		ans.Job = &j
	}
	b, _ := json.Marshal(ans)
	uc.Write(append(b, '\n'))
	sp.Settle() // after the answer: the end of a job whose process is gone already
	return nil
}

// readSpawnReport reads the caller's one report line and the fds sent with it.
func readSpawnReport(uc *net.UnixConn) (api.SpawnReport, []int, error) {
	var rep api.SpawnReport
	var fds []int
	var line []byte
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	retried := false
	for !bytes.Contains(line, []byte{'\n'}) {
		if len(line) > 16<<10 {
			return rep, fds, errors.New("the report line is longer than 16 KiB")
		}
		n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
		if n < 0 {
			n = 0 // a passed read deadline returns -1 (it panicked on buf[:n])
		}
		if oobn > 0 {
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if got, err := unix.ParseUnixRights(&m); err == nil {
						for _, fd := range got {
							unix.CloseOnExec(fd)
						}
						fds = append(fds, got...)
					}
				}
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return rep, fds, errors.New("the report carried more file descriptors than the one pidfd")
		}
		line = append(line, buf[:n]...)
		if err != nil {
			if n > 0 && bytes.Contains(line, []byte{'\n'}) {
				break
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && !retried {
				// The wait may have passed while sandboxd itself was stopped (SIGSTOP, a
				// frozen cgroup) with the report already in the socket: look once more.
				retried = true
				uc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				continue
			}
			return rep, fds, fmt.Errorf("the caller closed or went silent before it reported (%v)", err)
		}
	}
	line, _, _ = bytes.Cut(line, []byte{'\n'})
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, fds, fmt.Errorf("malformed report: %v", err)
	}
	return rep, fds, nil
}

// stoppingSpawnProblem is the answer of a spawn whose report had not come when the stop
// grace ended: nothing is registered and what was started in the cgroup is killed; the
// next daemon takes the retry.
func stoppingSpawnProblem(id string) *api.Problem {
	p := api.NewProblem(api.CodeBusy, "job %q not registered: sandboxd is stopping and the spawn's report did not come within the stop grace; what was started in its cgroup is killed; retry: the next daemon answers it", id)
	p.RetryAfterSeconds = 1
	return p
}
