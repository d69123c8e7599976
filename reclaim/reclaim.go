package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/api"
)

// Request is one reclaim call.
type Request struct {
	Trigger        string // launch | resume | startup | pressure | manual
	DryRun         bool
	TargetFree     int64  // reclaim until this many bytes are free (0: threshold + headroom)
	ReleaseReserve bool   // salvage: release the reserve files first (a writer's explicit request only)
	Reason         string // what the released room is for, recorded with the release
	Filesystems    []string
	NeedBytes      int64
	NeedInodes     uint64
	// Satisfied, when set, is asked while the call waits for another reclaim's lock (every
	// 100 ms): true ends the wait with ErrSatisfied and nothing run, because the running
	// reclaim (a start-up reclaim after a restart, say) has already freed what the caller
	// needs. A launch shares the running reclaim instead of answering busy (issue 25).
	Satisfied func() bool
}

// ErrSatisfied says the call's Satisfied answered true while another reclaim held the
// lock: nothing was run by this call.
var ErrSatisfied = errors.New("another reclaim running freed what the call needs")

// resumeCacheFor is how long a completed resume may answer later resumes (CONTRACT §1).
const resumeCacheFor = 10 * time.Second

// ErrDeadline says the call's deadline passed before every filesystem it covers was
// measured: nothing is known, so there is no verdict, and nothing is cached.
var ErrDeadline = errors.New("the call's deadline passed before statfs answered")

// Reclaim runs the policy once. Only one reclaim runs at a time: a caller waits for the
// lock within ctx and gets ErrBusy when ctx ends first.
func (r *Reclaimer) Reclaim(ctx context.Context, req Request) (api.ReclaimRun, error) {
	var tick <-chan time.Time
	if req.Satisfied != nil {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
wait:
	for {
		select {
		case r.lock <- struct{}{}:
			break wait
		case <-ctx.Done():
			return api.ReclaimRun{}, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		case <-tick:
			if req.Satisfied() {
				return api.ReclaimRun{}, ErrSatisfied
			}
		}
	}
	defer func() { <-r.lock }()
	return r.run(ctx, req)
}

// Resume is a reclaim with trigger resume. Its healthy path is one fresh statfs per
// watched filesystem and no lock, cheap enough that it is never cached: a resume always
// says what is on disk now. A resume that finds work may answer the result of a resume
// completed within 10 s (Cached set), but only while fresh figures of every filesystem
// agree with that run's (same side of every threshold), so a disk that filled since is
// never answered from the past.
func (r *Reclaimer) Resume(ctx context.Context) (api.ReclaimRun, error) {
	req := Request{Trigger: TriggerResume}
	if run, done, err := r.resumeUnlocked(ctx, req); done {
		return run, err
	}
	select {
	case r.lock <- struct{}{}:
	case <-ctx.Done():
		return api.ReclaimRun{}, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
	}
	defer func() { <-r.lock }()
	m, err := r.measureAll(ctx, req) // a resume may have finished while we waited
	if err != nil {
		return api.ReclaimRun{}, err
	}
	if c := r.cachedResume(m.all); len(m.work) > 0 && len(m.unmeasured) == 0 && c != nil {
		return *c, nil
	}
	return r.conclude(ctx, req, m), nil
}

// resumeUnlocked answers a resume without the reclaim lock when it can: healthy (nothing
// to delete, so nothing to serialise) or a cached result that still agrees. It holds the
// settings for reading, as every reader outside lock and loop does (Reconfigure); done is
// false when the ladder must run.
func (r *Reclaimer) resumeUnlocked(ctx context.Context, req Request) (run api.ReclaimRun, done bool, err error) {
	r.settings.RLock()
	defer r.settings.RUnlock()
	m, err := r.measureAll(ctx, req)
	if err != nil {
		return api.ReclaimRun{}, true, err
	}
	if len(m.work) == 0 {
		return r.conclude(ctx, req, m), true, nil
	}
	if c := r.cachedResume(m.all); len(m.unmeasured) == 0 && c != nil {
		return *c, true, nil
	}
	return api.ReclaimRun{}, false, nil
}

// cachedResume is the last resume's result when it completed within resumeCacheFor and
// every filesystem measured now stands where that run left it.
func (r *Reclaimer) cachedResume(now []*fsRun) *api.ReclaimRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastResume == nil {
		return nil
	}
	if age := r.opts.Now().Sub(r.lastResume.FinishedAt); age < 0 || age >= resumeCacheFor {
		return nil
	}
	if !agrees(r.lastResume.After, now) {
		return nil
	}
	c := *r.lastResume
	c.Cached = true
	return &c
}

// agrees reports whether figures measured now are on the same side of every threshold
// as a run's after figures, filesystem by filesystem.
func agrees(after []api.Filesystem, now []*fsRun) bool {
	if len(after) != len(now) {
		return false
	}
	for i, f := range now {
		a := after[i]
		if a.Path != f.path || f.needed(0) != (&fsRun{cur: a}).needed(0) || f.cur.BelowReplace() != a.BelowReplace() {
			return false
		}
	}
	return true
}

// Last is the last completed run (nil before the first).
func (r *Reclaimer) Last() *api.ReclaimRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return nil
	}
	c := *r.last
	return &c
}

// run is one reclaim with the lock held. A healthy run is a statfs per filesystem and
// nothing else: no discovery, no walk, no sizing.
func (r *Reclaimer) run(ctx context.Context, req Request) (api.ReclaimRun, error) {
	m, err := r.measureAll(ctx, req)
	if err != nil {
		return api.ReclaimRun{}, err
	}
	return r.conclude(ctx, req, m), nil
}

// measured is a run's first step: every filesystem it covers, measured, and those of
// them that need the ladder.
type measured struct {
	started    time.Time
	all, work  []*fsRun
	unmeasured []api.Filesystem // statfs failed: no verdict for these (filesystem_unavailable)
	warnings   []string
}

// measureAll measures every filesystem of req. A measure cut by ctx is ErrDeadline: a
// run that measured nothing has no verdict (a "healthy" of nothing was served to every
// caller for 10 s). A filesystem whose statfs fails is unmeasured: the run answers for
// the others and names it; when none could be measured it is an *UnavailableError.
func (r *Reclaimer) measureAll(ctx context.Context, req Request) (measured, error) {
	out := measured{started: r.opts.Now()}
	paths := req.Filesystems
	if paths == nil {
		paths = r.opts.Filesystems
	}
	for _, p := range paths {
		m, err := r.measure(ctx, p)
		if err != nil && ctx.Err() != nil {
			return measured{}, fmt.Errorf("%w: %s: %w", ErrDeadline, p, ctx.Err())
		}
		if err != nil {
			if m.Path == "" {
				m.Path = p
			}
			if m.Error == "" {
				m.Error = err.Error()
			}
			out.unmeasured = append(out.unmeasured, m)
			continue
		}
		f := newFSRun(p, m, req, r.opts.Headroom, r.opts.HeadroomInodes.Resolve(m.Files), r.rearmBytes(p))
		f.ownFree = r.opts.OwnFree
		out.all = append(out.all, f)
		if f.needed(req.TargetFree) {
			out.work = append(out.work, f)
		}
	}
	if len(out.all) == 0 && len(out.unmeasured) > 0 {
		return measured{}, &UnavailableError{Filesystems: out.unmeasured}
	}
	return out, nil
}

// conclude runs the ladder where m found work and answers the run.
func (r *Reclaimer) conclude(ctx context.Context, req Request, m measured) api.ReclaimRun {
	if req.Trigger == "" {
		req.Trigger = TriggerManual
	}
	run := api.ReclaimRun{Trigger: req.Trigger, DryRun: req.DryRun, StartedAt: m.started, Actions: []api.Action{}, Warnings: m.warnings,
		Unmeasured: m.unmeasured}
	simulate, simStatus := r.opts.Observe || req.DryRun, api.ActionPlanned
	if r.opts.Observe {
		simStatus = api.ActionObserved
	}
	all := m.all
	var work []*fsRun
	for _, f := range all {
		f.measure, f.simulate, f.simStatus = r.measure, simulate, simStatus
		if req.ReleaseReserve {
			r.salvage(ctx, f, req.Reason)
		}
		if f.needed(req.TargetFree) {
			work = append(work, f)
		}
	}
	if req.DryRun && len(work) == 0 {
		// Nothing needed: a plan still shows what would go first, up to the headroom.
		for _, f := range all {
			f.preview = true
			f.targetBytes = f.cur.AvailBytes + uint64(max(r.opts.Headroom, 64<<20))
			if f.cur.SizeBytes > 0 {
				f.targetBytes = min(f.targetBytes, f.cur.SizeBytes)
			}
			work = append(work, f)
		}
	}
	var walks int64
	if len(work) > 0 {
		// A dry-run plan answers within PlanBudget: the estimate is what sizing found by
		// then, and the answer says so (a plan is never worth a long walk on a hot path).
		climbCtx := ctx
		if req.DryRun {
			var cancel context.CancelFunc
			climbCtx, cancel = context.WithTimeout(ctx, r.opts.PlanBudget)
			defer cancel()
		}
		walks = r.climb(climbCtx, req, work)
		if req.DryRun && climbCtx.Err() != nil && ctx.Err() == nil {
			run.Warnings = append(run.Warnings, fmt.Sprintf(
				"plan cut at reclaim's %s planning budget: the rungs after the last planned action were not sized", api.FormatDuration(r.opts.PlanBudget)))
		}
	}
	r.finish(ctx, &run, all, work)
	if !req.DryRun && !req.ReleaseReserve && req.Trigger != TriggerLaunch {
		// Room found (or made) arms the reserve now, not at the next tick; a launch
		// leaves it to the tick, off its hot path, and a salvage keeps what it released.
		for _, f := range all {
			r.maintainReserve(f.cur, f.path)
		}
	}
	r.count(&run, walks)
	if run.Verdict == api.VerdictHealthy && len(run.Actions) == 0 {
		// A healthy run did nothing: counted, logged at debug, not one event per call, so a
		// runner that resumes in a loop (never cached now) cannot push the audit trail out.
		r.opts.Logger.Debug(run.Detail, "kind", api.EventReclaimRun, "subject", req.Trigger)
	} else if held := heldSubject(work); held != "" && !runChanged(run) {
		// A run the cooldown held that changed nothing is a notice, coalesced like a
		// refusal (one event per filesystem per interval, with a count), never one event
		// per launch pushing the deletions and reserve events out of the trail.
		r.emit(api.EventRefusal, held, "reclaim held: "+run.Detail, map[string]any{"verdict": run.Verdict, "trigger": req.Trigger, "changed": false})
	} else {
		r.emit(api.EventReclaimRun, req.Trigger, run.Detail, map[string]any{"verdict": run.Verdict, "freed_bytes": run.FreedBytes, "freed_files": run.FreedFiles, "dry_run": req.DryRun, "cached": false,
			"changed": runChanged(run)})
	}
	r.mu.Lock()
	c := run
	r.last = &c
	if req.Trigger == TriggerResume && !req.DryRun && len(work) > 0 && len(m.unmeasured) == 0 {
		r.lastResume = &c // only a run that walked the ladder is worth not repeating
	}
	r.mu.Unlock()
	return run
}

// salvage releases the reserve of f first (release_reserve: the caller wants the room).
func (r *Reclaimer) salvage(ctx context.Context, f *fsRun, reason string) {
	if f.simulate && !r.opts.Observe {
		return // a dry run: observe mode says what it would release, a plan does not
	}
	why := "released on request (release_reserve)"
	if reason != "" {
		why += ": " + reason
	}
	if a, ok := r.releaseReserve(f.path, why); ok {
		f.add(a)
		f.remeasure(ctx, a.FreedBytes, a.FreedFiles)
	}
}

// climb runs the ladder on every filesystem that needs it. Inside the cooldown (or past
// max_runs_per_hour) only the cheap and certain rungs run (held says why the others do
// not); only a climb of the expensive rungs starts the cooldown (recordRun).
func (r *Reclaimer) climb(ctx context.Context, req Request, work []*fsRun) int64 {
	caches := r.discover()
	lr := &ladderRun{r: r, mounts: readMountPoints(r.opts.ProcRoot)}
	ran := map[string]int64{}
	for _, f := range work {
		if !f.simulate {
			f.cool = r.cooldownFor(req.Trigger, f.path)
			if !f.cool.until.IsZero() {
				f.held = "cooldown until " + f.cool.until.UTC().Format("15:04:05")
			} else if why := r.rateLimited(req.Trigger); why != "" {
				f.held = why
			}
		}
		dev := statDev(f.path)
		lr.caches = lr.caches[:0]
		for _, c := range caches {
			if r.unsafeRoot(c.Path) == "" && dev != 0 && statDev(c.Path) == dev {
				lr.caches = append(lr.caches, c)
			}
		}
		r.ladder(ctx, f, lr)
		if f.simulate {
			continue
		}
		freed := int64(f.cur.AvailBytes) - int64(f.before.AvailBytes)
		// The cooldown starts with a climb of the rungs it limits, or with an automatic
		// run that freed space outside it; a cheap run inside it does not prolong it, and
		// a writer's resume that only pruned does not start it.
		if f.expensive || automatic(req.Trigger) && f.held == "" && f.changed() {
			ran[f.path] = max(freed, 0)
		}
		if f.held != "" && !f.satisfied() && f.cool.freed > 0 && f.cur.BelowReclaim() {
			// Below the threshold again within the cooldown after a purge that freed space:
			// the sign to replace, not to purge again. After a purge that freed nothing it
			// is no such sign, and the verdict stays what the disk says.
			why := fmt.Sprintf("below the threshold again within reclaim.cooldown %s after a purge at %s freed %s; %s",
				api.FormatDuration(r.opts.Cooldown), f.cool.last.UTC().Format("15:04:05"), api.FormatSize(uint64(f.cool.freed)), f.heldClause())
			r.markReplace(f.path, why)
			f.cur.ReplaceMark = why
		}
		if f.belowReplace {
			// The reserve stays: released here, the next command ate it and the box
			// stopped at 100% with nothing left to release (CONTRACT §13). It goes at
			// shutdown, on a writer's explicit request, or by `sandboxd boot`.
			r.markReplace(f.path, "below the replace threshold after reclaim")
		}
		if f.changed() && r.opts.Answered != nil && !r.opts.Observe {
			r.opts.Answered(f.path)
		}
	}
	if len(ran) > 0 {
		r.recordRun(req.Trigger, ran)
	}
	return lr.walks
}

// heldSubject is the filesystem of a run whose expensive rungs were held ("" when none).
func heldSubject(work []*fsRun) string {
	for _, f := range work {
		if f.held != "" {
			return f.path
		}
	}
	return ""
}

// runChanged reports whether a run changed anything on disk: freed bytes or inodes, or a
// deletion or command that did work (a real run; a plan changes nothing).
func runChanged(run api.ReclaimRun) bool {
	if run.DryRun || len(run.Projected) > 0 {
		return false
	}
	if run.FreedBytes > 0 || run.FreedFiles > 0 {
		return true
	}
	for _, a := range run.Actions {
		if a.Status == api.ActionDone && (a.FreedBytes > 0 || a.FreedFiles > 0) {
			return true
		}
	}
	return false
}

// heldClause says what the held rungs would free once they may run: "cooldown until
// 15:04:05, 38.0 MiB reclaimable then".
func (f *fsRun) heldClause() string {
	return fmt.Sprintf("%s, %s reclaimable then", f.held, api.FormatSize(uint64(max(f.later, 0))))
}

// changed reports whether the run freed bytes or inodes on the filesystem.
func (f *fsRun) changed() bool {
	return !f.simulate && (f.cur.AvailBytes > f.before.AvailBytes || f.cur.FilesFree > f.before.FilesFree)
}

func (r *Reclaimer) markReplace(fs, why string) {
	if r.opts.MarkReplace != nil && !r.opts.Observe {
		r.opts.MarkReplace(fs, why)
	}
}

// finish fills the run's verdict, figures, actions, detail and usage. The verdict says
// what is on disk: a simulated run (dry run, observe) changed nothing, so it is the
// verdict of its before figures, and its projection goes to Projected.
func (r *Reclaimer) finish(ctx context.Context, run *api.ReclaimRun, all, work []*fsRun) {
	run.Verdict = api.VerdictHealthy
	for _, f := range all {
		run.Before = append(run.Before, f.before)
		run.Actions = append(run.Actions, coalesce(f.actions)...)
		if f.simulate {
			run.After = append(run.After, f.before)
			run.Projected = append(run.Projected, f.cur)
		} else {
			run.After = append(run.After, f.cur)
			run.FreedBytes += int64(f.cur.AvailBytes - min(f.before.AvailBytes, f.cur.AvailBytes))
			run.FreedFiles += int64(f.cur.FilesFree - min(f.before.FilesFree, f.cur.FilesFree))
		}
		if f.err != nil {
			run.Warnings = append(run.Warnings, fmt.Sprintf("measure %s: %v", f.path, f.err))
		}
	}
	var worst *fsRun
	rank := map[string]int{api.VerdictHealthy: 0, api.VerdictReclaimed: 1, api.VerdictLow: 2, api.VerdictReplace: 3}
	for _, f := range work {
		if f.preview {
			continue
		}
		v := f.verdict()
		if worst == nil || rank[v] > rank[run.Verdict] {
			worst = f
		}
		if rank[v] > rank[run.Verdict] {
			run.Verdict = v
		}
	}
	if worst == nil && len(all) > 0 {
		worst = all[0]
	}
	if worst != nil {
		run.Detail = r.fingerprint(run, worst)
		if run.Verdict == api.VerdictReplace {
			run.Usage = r.usage(ctx, worst.now())
		}
	} else {
		run.Detail = "no filesystem is watched: nothing to measure"
	}
	if len(run.Unmeasured) > 0 {
		run.Detail += "; " + UnmeasuredClause(run.Unmeasured)
	}
	for _, l := range [][]api.Filesystem{run.Before, run.After, run.Projected} {
		for i := range l {
			l[i].Verdict = l[i].Judge() // the one verdict, of these very figures
		}
	}
	run.FinishedAt = r.opts.Now()
}

// now is what is on disk after the run: the projection of a simulated run is not.
func (f *fsRun) now() api.Filesystem {
	if f.simulate {
		return f.before
	}
	return f.cur
}

// verdict is this filesystem's verdict from what is on disk after the run.
func (f *fsRun) verdict() string {
	m := f.now()
	cur := &fsRun{cur: m, needBytes: f.needBytes, needFiles: f.needFiles}
	switch {
	case f.belowReplace || m.Judge() == api.VerdictReplace:
		return api.VerdictReplace
	case cur.needed(0) || f.targetFree && m.AvailBytes < f.targetBytes:
		return api.VerdictLow
	case !f.simulate && (m.AvailBytes > f.before.AvailBytes || m.FilesFree > f.before.FilesFree):
		return api.VerdictReclaimed
	}
	return api.VerdictHealthy
}

// Cooldown is the reclaim cooldown in force (0: none), for /v1/config's in_force.
func (r *Reclaimer) Cooldown() time.Duration { return r.opts.Cooldown }

// coalesce merges the actions of one cache that differ only in their figures (a plan or a
// deletion done in batches), so each cache is listed once per kind of step.
func coalesce(in []api.Action) []api.Action {
	type key struct{ source, path, kind, status, err string }
	at := map[key]int{}
	out := make([]api.Action, 0, len(in))
	for _, a := range in {
		if a.Kind != api.ActionDelete {
			out = append(out, a)
			continue
		}
		k := key{a.Source, a.Path, a.Kind, a.Status, a.Error}
		if i, ok := at[k]; ok {
			out[i].FreedBytes += a.FreedBytes
			out[i].FreedFiles += a.FreedFiles
			continue
		}
		at[k] = len(out)
		out = append(out, a)
	}
	return out
}
