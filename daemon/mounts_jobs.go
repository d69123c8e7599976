package daemon

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/jobs"
)

// The tie of a registered mount to its job (CONTRACT §11, §12): when the job ends (lease
// lapsed, deleted, or its processes exited) the daemon releases the job's mounts; a mount
// whose job is gone when the daemon starts is released too. mountwatch knows jobs only by
// id; the jobs registry is reached through this interface: where the daemon builds its
// jobs.Manager m, it calls d.wireJobTie(managerTie{m}). Without one, a registration that
// names a job is refused (503 jobs_unavailable) rather than accepted and never released.

// jobTie is what the mount tie needs of the jobs registry.
type jobTie interface {
	// alive reports whether the job runs; why says what it is otherwise ("has ended
	// (lease_expired)", "is not registered").
	alive(id string) (ok bool, why string)
	// onEnd registers f to be called once for every job that ends, with its reason.
	onEnd(f func(id, reason string))
	// available says whether jobs can run here at all, and if not, why.
	available() (bool, string)
	// owner is the uid that owns the job (false: no such job).
	owner(id string) (uint32, bool)
}

// managerTie is the jobs registry (package jobs) as a jobTie.
type managerTie struct{ m *jobs.Manager }

func (t managerTie) alive(id string) (bool, string) {
	j, ok := t.m.Get(id)
	switch {
	case !ok:
		return false, "is not registered"
	case j.State == api.JobRunning:
		return true, ""
	}
	return false, fmt.Sprintf("has ended (%s, %s)", j.State, j.Reason)
}

func (t managerTie) onEnd(f func(id, reason string)) { t.m.OnEnd(f) }

func (t managerTie) available() (bool, string) { return t.m.Available() }

func (t managerTie) owner(id string) (uint32, bool) { return t.m.OwnerUID(id) }

// wireJobTie ties registered mounts to jobs' ends; called once before Run.
func (d *Daemon) wireJobTie(j jobTie) {
	d.mountJobs = j
	j.onEnd(func(id, reason string) {
		go d.releaseJobMounts(id, fmt.Sprintf("job %s ended (%s)", id, reason))
	})
}

// releaseJobMounts releases every registered mount of job (with the unmount each was
// registered with: by default a job-tied mount is unmounted).
func (d *Daemon) releaseJobMounts(job, why string) {
	for _, name := range d.current().mounts.JobMounts(job) {
		if _, err := d.releaseMount(d.baseCtx, name, nil, why); err != nil {
			d.logger.Error("release of a job's mount failed", "mount", name, "job", job, "err", err)
		}
	}
}

// releaseOrphanMounts releases, at start-up, the registered mounts whose job ended while
// the daemon was down.
func (d *Daemon) releaseOrphanMounts(ctx context.Context) {
	if d.mountJobs == nil {
		return
	}
	for _, r := range d.current().mounts.Registered() {
		if r.Reg.Job == "" {
			continue
		}
		if ok, why := d.mountJobs.alive(r.Reg.Job); !ok {
			if _, err := d.releaseMount(ctx, r.Config.Name, nil, fmt.Sprintf("job %s %s (found at start-up)", r.Reg.Job, why)); err != nil {
				d.logger.Error("release of an orphaned mount failed", "mount", r.Config.Name, "err", err)
			}
		}
	}
}
