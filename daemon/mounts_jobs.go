package daemon

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/jobs"
	"github.com/sandboxd/sandboxd/mountwatch"
)

// The tie of a registered mount to its job (CONTRACT §11, §12): when the job ends (lease
// lapsed, deleted, or its processes exited) the daemon releases the job's mounts; a mount
// whose job is gone when the daemon starts is released too. mountwatch knows jobs only by
// id; the jobs registry is reached through this interface: where the daemon builds its
// jobs.Manager m, it calls d.wireJobTie(managerTie{m}). Without one, a registration that
// names a job is refused (503 jobs_unavailable) rather than accepted and never released.

// jobTie is what the mount tie needs of the jobs registry.
type jobTie interface {
	// job is the job id names for uid (its own, else the only one of that id): its key
	// (which onEnd names), its owner, whether it runs, and what it is otherwise ("has
	// ended (lease_expired)", "is not registered").
	job(id string, uid uint32) (key string, owner uint32, alive bool, why string)
	// onEnd registers f to be called once for every job that ends, with its key and reason.
	onEnd(f func(key, reason string))
	// available says whether jobs can run here at all, and if not, why.
	available() (bool, string)
	// cgroup is the cgroup of the job of key, where its mounts' commands start.
	cgroup(key string) string
	// waiting is the refusal (503, retry) while another sandboxd holds the registry: no
	// job can be named then (jobs/acquire.go); nil once it is the daemon's.
	waiting() error
}

// managerTie is the jobs registry (package jobs) as a jobTie.
type managerTie struct{ m *jobs.Manager }

func (t managerTie) job(id string, uid uint32) (string, uint32, bool, string) {
	key, owner, state, reason, err := t.m.Resolve(id, jobs.Caller{UID: uid})
	switch {
	case err != nil:
		if p, ok := err.(*api.Problem); ok && p.Code == api.CodeConflict {
			return "", 0, false, "is ambiguous: " + p.Detail
		}
		return "", 0, false, "is not registered"
	case state == api.JobRunning:
		return key, owner, true, ""
	}
	return key, owner, false, fmt.Sprintf("has ended (%s, %s)", state, reason)
}

func (t managerTie) onEnd(f func(key, reason string)) { t.m.OnEnd(f) }

func (t managerTie) available() (bool, string) { return t.m.Available() }

func (t managerTie) cgroup(key string) string { return t.m.CgroupOf(key) }

func (t managerTie) waiting() error { return t.m.Waiting() }

// wireJobTie ties registered mounts to jobs' ends; called once before Run.
func (d *Daemon) wireJobTie(j jobTie) {
	d.mountJobs = j
	j.onEnd(func(key, reason string) {
		// Not once Run returned: the next daemon's start-up releases them (stop.go).
		d.goBackground(func() { d.releaseJobMounts(key, fmt.Sprintf("job %s ended (%s)", key, reason)) })
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

// registryLoaded says whether the job registry is loaded (or known not to be: memory
// only, unusable), as it is at New unless another sandboxd holds it still.
func registryLoaded(m *jobs.Manager) bool {
	if m == nil {
		return true
	}
	select {
	case <-m.Loaded():
		return true
	default:
		return false
	}
}

// retieJobMounts ties every job-tied registered mount of w to its job as the loaded
// registry names it: a job the registry re-keyed at load (a non-root owner's, saved by a
// version before per-owner ids: jobs/store.go) keeps its mounts, whose saved key follows
// it, and their commands start in the job's cgroup as the registry has it. Until then a
// mount restored while another sandboxd held the registry carries its saved key, and the
// start-up release (releaseOrphanMounts) would take a re-keyed job for another job of the
// same id and release the mount. True when a mount changed.
func (d *Daemon) retieJobMounts(w *mountwatch.Watcher) bool {
	var rekeyed map[string]string
	if d.jobReg != nil {
		rekeyed = d.jobReg.Rekeyed()
	}
	changed := false
	for _, r := range w.Registered() {
		if r.Reg.Job == "" {
			continue
		}
		key, cg := r.Reg.JobKey, ""
		if nk, ok := rekeyed[key]; ok {
			key = nk
		}
		if d.mountJobs != nil {
			cg = d.mountJobs.cgroup(key)
		}
		changed = w.Retie(r.Config.Name, key, cg) || changed
	}
	return changed
}

// settleJobMounts runs once the job registry is loaded: each job-tied mount restored at
// start-up is tied to its job as the registry names it, and released if its job ended
// while no daemon watched it. The event that says so is the sign the start-up judgement of
// job-tied mounts is done.
func (d *Daemon) settleJobMounts(ctx context.Context) {
	w := d.current().mounts
	if d.retieJobMounts(w) {
		d.saveMounts()
	}
	kept, released := d.releaseOrphanMounts(ctx)
	if kept+released == 0 {
		return
	}
	d.events.Record(api.Event{Time: d.now(), Kind: api.EventMountRegistry, Subject: "mounts",
		Message: fmt.Sprintf("job-tied mounts restored at start-up checked against the job registry: %d kept (their jobs run), %d released (their jobs ended)", kept, released),
		Fields:  map[string]any{"kept": kept, "released": released}})
}

// releaseOrphanMounts releases, at start-up, the registered mounts whose job ended while
// the daemon was down; it counts the job-tied mounts kept and released.
func (d *Daemon) releaseOrphanMounts(ctx context.Context) (kept, released int) {
	if d.mountJobs == nil {
		return 0, 0
	}
	for _, r := range d.current().mounts.Registered() {
		if r.Reg.Job == "" {
			continue
		}
		uid := uint32(0)
		if r.Reg.By != nil {
			uid = r.Reg.By.UID
		}
		key, _, ok, why := d.mountJobs.job(r.Reg.Job, uid)
		if ok && r.Reg.JobKey != "" && key != r.Reg.JobKey {
			// Another job of that id runs; the mount's own is gone.
			ok, why = false, "is not registered"
		}
		if ok {
			kept++
			continue
		}
		released++
		if _, err := d.releaseMount(ctx, r.Config.Name, nil, fmt.Sprintf("job %s %s (found at start-up)", r.Reg.Job, why)); err != nil {
			d.logger.Error("release of an orphaned mount failed", "mount", r.Config.Name, "err", err)
		}
	}
	return kept, released
}

// launchJob is the key of the job a launch names ("job": the caller's own, else the only
// one of that id), whose required mounts gate the launch; "" for none. A job that is not
// registered is 404, as an unknown mount is; a launch naming a job where no jobs registry
// runs is refused rather than run ungated.
func (d *Daemon) launchJob(id string, uid uint32) (string, error) {
	if id == "" {
		return "", nil
	}
	if d.mountJobs == nil {
		return "", api.NewProblem(api.CodeJobsUnavailable, "field \"job\": this daemon runs no jobs registry, so no mount is tied to job %q", id)
	}
	if err := d.mountJobs.waiting(); err != nil {
		return "", err
	}
	// An ended job's key still answers: its mounts were released with it, nothing gates.
	key, _, _, why := d.mountJobs.job(id, uid)
	if key == "" {
		return "", api.NewProblem(api.CodeNotFound, "field \"job\": job %q %s (POST /v1/jobs first, or leave \"job\" out)", id, why)
	}
	return key, nil
}
