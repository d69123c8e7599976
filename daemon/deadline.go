package daemon

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/reclaim"
)

// deadlineProblem is the answer of a call whose deadline passed before it could measure:
// busy (503, Retry-After), with the last figures known, marked stale. A passed deadline
// is the caller's choice or a slow disk, never a bug, so never `internal` (issue 10).
//
// A call cut short because the daemon is stopping (its requests' base context ends when
// the stop grace after SIGTERM passed with the call still waiting: stop.go) did not run
// out of its deadline: it says so, and that a retry reaches the
// next daemon, rather than "retry with a longer deadline" (a launch across a DaemonSet's
// label flip got that, 0.3 s into a 2-s deadline).
func (d *Daemon) deadlineProblem(fs api.Filesystem, deadline time.Duration, notes []string) *api.Problem {
	parts := []string{}
	if fs.Path != "" && !fs.SampledAt.IsZero() {
		parts = append(parts, fs.Fingerprint()+" (last sample)")
	}
	parts = append(parts, notes...)
	if d.baseCtx.Err() != nil {
		parts = append(parts, "sandboxd is stopping: the call was cut short before statfs answered; retry: the next daemon answers it")
	} else {
		parts = append(parts, fmt.Sprintf("the call's deadline (%s) passed before statfs answered: retry with a longer deadline", api.FormatDuration(deadline)))
	}
	p := api.NewProblem(api.CodeBusy, "%s", strings.Join(parts, "; "))
	p.RetryAfterSeconds = 1
	return p
}

// reclaimProblem maps what Reclaim and Resume refuse with to the problem a caller gets:
// busy for both another reclaim holding the lock and a deadline passed before anything
// was measured; filesystem_unavailable when every statfs failed.
func (d *Daemon) reclaimProblem(err error, c *components, deadline time.Duration) error {
	fs := firstFS(c.pressure.Snapshot())
	switch {
	case errors.Is(err, reclaim.ErrBusy):
		return d.busyProblem(fs, nil)
	case errors.Is(err, reclaim.ErrDeadline):
		return d.deadlineProblem(fs, deadline, nil)
	}
	var ue *reclaim.UnavailableError
	if errors.As(err, &ue) {
		return unavailableProblem(ue.Filesystems, nil)
	}
	return err
}
