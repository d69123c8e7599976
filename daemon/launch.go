package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/reclaim"
	"github.com/sandboxd/sandboxd/retention"
)

// handleLaunch is POST /v1/launch (CONTRACT §5).
func (d *Daemon) handleLaunch(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	req, warnings, err := decodeLaunch(r)
	if err != nil {
		d.metrics.launchDone(string(asProblem(err).Code), start)
		return err
	}
	resp, err := d.launchCall(r.Context(), req, peerFrom(r.Context()).UID, warnings, start)
	if err != nil {
		return err
	}
	writeLaunchAnswer(w, resp)
	return nil
}

// writeLaunchAnswer writes a launch answer as writeJSON would, in the bytes api's hand
// encoding makes (json.Marshal's, without its reflection: issue 27), or through
// writeJSON where that cannot encode it (a NaN: writeJSON then says why).
func writeLaunchAnswer(w http.ResponseWriter, resp *api.LaunchResponse) {
	bp := launchBufs.Get().(*[]byte)
	defer launchBufs.Put(bp)
	b, ok := resp.AppendJSON((*bp)[:0])
	if !ok {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	b = append(b, '\n')
	if cap(b) <= maxPooledAnswer {
		*bp = b
	}
	w.Header()["Content-Type"] = jsonContentType // shared, read-only: no slice per answer
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

var launchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// launchCall is one launch check as a call answers it (POST /v1/launch, or the "launch"
// of a job registration): counted in the metrics, a refusal recorded as an event.
func (d *Daemon) launchCall(ctx context.Context, req api.LaunchRequest, uid uint32, warnings []string, start time.Time) (*api.LaunchResponse, error) {
	resp, err := d.launchAs(ctx, req, uid)
	if err != nil {
		p := asProblem(err)
		p.Warnings = append(p.Warnings, warnings...)
		d.metrics.launchDone(string(p.Code), start)
		if p.Code != api.CodeBadRequest && p.Code != api.CodeNotFound {
			subject := req.Site
			if subject == "" {
				subject = "launch"
			}
			d.events.Record(api.Event{Kind: api.EventRefusal, Subject: subject, Message: "launch refused: " + p.Detail,
				Fields: map[string]any{"code": string(p.Code)}})
		}
		return nil, p
	}
	resp.Warnings = append(resp.Warnings, warnings...)
	d.metrics.launchDone("ok", start)
	d.touchActivity()
	return resp, nil
}

// Launch runs the write-site policy: bounded retention on the site, the space check
// (with reclaim when below the thresholds), and the mount check. A refusal is *api.Problem.
func (d *Daemon) Launch(ctx context.Context, req api.LaunchRequest) (*api.LaunchResponse, error) {
	return d.launchAs(ctx, req, 0)
}

// launchAs is Launch called by uid: the job the request names (req.Job) is uid's own.
func (d *Daemon) launchAs(ctx context.Context, req api.LaunchRequest, uid uint32) (*api.LaunchResponse, error) {
	cfg := d.config()
	c := d.current()
	need := launchNeedsOf(cfg.Launch, req)
	ctx, cancel := withCallDeadline(ctx, need.deadline)
	defer cancel()

	// One mount check serves the whole call (it reads the watcher's last verdicts, never
	// the mounts). Unknown names first: not_found outranks every other refusal.
	jobKey, err := d.launchJob(req.Job, uid)
	if err != nil {
		return nil, err
	}
	mounts, unknownMounts, mdetail, mok := c.mounts.CheckJob(req.Mounts, jobKey)
	if len(unknownMounts) > 0 {
		return nil, api.NewProblem(api.CodeNotFound, "unknown mount(s) %s: neither configured in [[mount]] nor registered (POST /v1/mounts); a durable mount is never skipped",
			strings.Join(unknownMounts, ", "))
	}
	resp := &api.LaunchResponse{OK: true, PrunedJobs: []string{}, Mounts: nonNil(mounts)}
	// Room for the call: no pressure condition on the site's filesystem and, measured now,
	// above its reclaim thresholds with the call's needs fitting. With room and a drain at
	// work on the site's backlog, the call leaves the backlog to the drain.
	roomy := func(path string) bool {
		if d.underPressure(path) {
			return false
		}
		fs, err := c.pressure.MeasureSite(ctx, path)
		return err == nil && !fs.Unavailable() && !need.short(fs) && !fs.BelowReclaim()
	}
	notes, err := c.pruneSite(ctx, req.Site, resp, roomy)
	if err != nil {
		return nil, err
	}
	at := measuredPath{}
	if resp.Site != nil && resp.Site.Path != "" {
		// The site's directory, asked about at every launch: held open between calls
		// while its way is known (pressure.MeasureSite, issue 27).
		at = measuredPath{path: resp.Site.Path, site: true}
	}
	if at.path == "" && len(cfg.Filesystems) > 0 {
		at.path = cfg.Filesystems[0].Path
	}
	fs, notes, err := d.ensureSpace(ctx, c, at, need, notes)
	if p, ok := err.(*api.Problem); ok && p.Code == api.CodeFilesystemUnavailable && !mok {
		return nil, mergeProblems([]*api.Problem{p, api.NewProblem(api.CodeMountUnavailable, "%s", mdetail)}, p.Filesystem, resp.Mounts)
	}
	if err != nil {
		return nil, err
	}
	resp.Filesystem = &fs
	return launchVerdict(resp, need, mok, mdetail, notes)
}

// launchNeeds is what one launch call asks for: the [launch] defaults, overridden by
// the request's own fields.
type launchNeeds struct {
	deadline time.Duration
	bytes    uint64
	inodes   uint64
}

func launchNeedsOf(cfg config.Launch, req api.LaunchRequest) launchNeeds {
	n := launchNeeds{deadline: cfg.Deadline, bytes: uint64(cfg.NeedBytes), inodes: cfg.NeedInodes}
	if req.Deadline != nil {
		n.deadline = req.Deadline.D()
	}
	if req.NeedBytes != nil {
		n.bytes = uint64(*req.NeedBytes)
	}
	if req.NeedInodes != nil {
		n.inodes = *req.NeedInodes
	}
	return n
}

// short says the filesystem cannot hold what the call needs.
func (n launchNeeds) short(fs api.Filesystem) bool { return short(fs, n.bytes, n.inodes) }

// pruneSite runs the call's bounded retention on its site (name "" = the only site) and
// fills resp's site and prune fields; it returns the notes the detail line carries. No
// site is pruned when none is configured; a missing name among several is bad_request.
// While the site's background drain works on its backlog and roomy says the site's
// filesystem already has what the call needs, the call prunes nothing itself: the drain
// deletes at its drain_rate, with one event, and the call reports pending_prune
// (CONTRACT §5). A call under pressure, or whose needs do not fit, still prunes.
func (c *components) pruneSite(ctx context.Context, name string, resp *api.LaunchResponse, roomy func(path string) bool) ([]string, error) {
	if name == "" {
		names := c.sites.SiteNames() // a copy: asked only when the call names no site
		if len(names) > 1 {
			return nil, api.NewProblem(api.CodeBadRequest, "field \"site\": required when several sites are configured (%s)",
				strings.Join(names, ", "))
		}
		if len(names) == 0 {
			return nil, nil
		}
	}
	var notes []string
	var pr retention.PruneResult
	var err error
	left := false
	if path, draining, derr := c.sites.Draining(name); derr == nil && draining && roomy(path) {
		pr, err = c.sites.LeaveToDrain(ctx, name)
		left = true
	} else {
		pr, err = c.sites.Prune(ctx, name, retention.DefaultCallBudget)
	}
	if errors.Is(err, retention.ErrUnknownSite) {
		return nil, api.NewProblem(api.CodeNotFound, "%v", err)
	}
	if err != nil && ctx.Err() == nil {
		notes = append(notes, fmt.Sprintf("prune failed: %v", err))
	}
	site, serr := c.sites.Site(pr.Site)
	if serr == nil {
		resp.Site = &site
		name = site.Name
	}
	resp.Pruned, resp.FreedBytes = pr.Files, pr.Bytes
	if pr.Jobs != nil {
		resp.PrunedJobs = pr.Jobs
	}
	verb := "pruned"
	if pr.Observed {
		verb = "would prune (observe mode)"
	}
	// Every launch says it: appended with strconv, not fmt (issue 27).
	// "site NAME holds N files; VERB N files (SIZE) in this call"
	var noteBuf [160]byte // on the stack: the note is copied into its string below
	note := append(noteBuf[:0], "site "...)
	note = append(note, name...)
	note = append(note, " holds "...)
	note = api.AppendCount(note, uint64(max(site.Files, 0)))
	note = append(note, " files; "...)
	note = append(note, verb...)
	note = append(note, ' ')
	note = api.AppendCount(note, uint64(max(pr.Files, 0)))
	note = append(note, " files ("...)
	note = api.AppendSize(note, uint64(max(pr.Bytes, 0)))
	note = append(note, ") in this call"...)
	notes = append(notes, string(note))
	switch {
	case left && pr.Pending > 0:
		notes = append(notes, fmt.Sprintf("%s expired files left to the background drain at work on the site (the filesystem has room for this call)",
			api.FormatCount(uint64(max(pr.Pending, 0)))))
	case pr.Pending > 0:
		notes = append(notes, fmt.Sprintf("%s expired files left to the background drain", api.FormatCount(uint64(max(pr.Pending, 0)))))
	}
	if pr.Problem != "" {
		notes = append(notes, "site not cleaned: "+pr.Problem)
	}
	// The call still answers (a launcher must not break over sandboxd's config), but a
	// site that is not cleaned at all (its root a symlink, unsafe, or inside a protected
	// path: issue 9) is a warning too, so a launcher that prints warnings shows it.
	if site.Problem != nil && *site.Problem != retention.NotScanned {
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("site %s is not cleaned: %s", name, *site.Problem))
	}
	return notes, nil
}

// measuredPath is the path a launch measures: its site's directory (site), or the first
// watched filesystem's path.
type measuredPath struct {
	path string
	site bool // measured with MeasureSite, else MeasureExisting
}

// measure measures the filesystem that holds at's path, now.
func (at measuredPath) measure(ctx context.Context, c *components) (api.Filesystem, error) {
	if at.site {
		return c.pressure.MeasureSite(ctx, at.path)
	}
	return c.pressure.MeasureExisting(ctx, at.path)
}

// ensureSpace measures the filesystem that holds at's path and, when the call's needs do not
// fit or it is below a reclaim threshold, runs reclaim and measures again. It refuses
// with busy (a call that does not fit while another reclaim holds the lock, or a passed
// deadline) and filesystem_unavailable (a statfs that fails).
func (d *Daemon) ensureSpace(ctx context.Context, c *components, at measuredPath, need launchNeeds, notes []string) (api.Filesystem, []string, error) {
	path := at.path
	fs, err := at.measure(ctx, c)
	if err != nil && ctx.Err() != nil {
		return fs, notes, d.deadlineProblem(fs, need.deadline, notes)
	}
	if err != nil || fs.Unavailable() {
		// A statfs that fails (or a watched filesystem whose own statfs fails, measured
		// here through another path on its device) has no verdict: nothing is reclaimed.
		if fs.Path == "" {
			fs.Path = path
		}
		return fs, notes, unavailableProblem([]api.Filesystem{fs}, notes)
	}
	if !need.short(fs) && !fs.BelowReclaim() {
		return fs, notes, nil
	}
	if need.short(fs) {
		// A need no reclaim can meet is refused at once: running the ladder for it only
		// deleted caches an offline sandbox cannot download again (issue 10).
		if ok, why := c.reclaim.Meetable(ctx, fs, need.bytes, need.inodes); !ok {
			return fs, append(notes, why), nil
		}
	}
	req := reclaim.Request{Trigger: reclaim.TriggerLaunch, NeedBytes: int64(need.bytes),
		NeedInodes: need.inodes, Filesystems: []string{fs.Path}}
	if need.short(fs) {
		// While another reclaim holds the lock (the start-up reclaim right after a watchdog
		// restart), the call shares it: once what it frees makes the call fit, the call
		// answers without waiting for the lock, instead of busy at its deadline (issue 25).
		var waiting sync.Once
		req.Satisfied = func() bool {
			// Asked only while another reclaim holds the lock: say once that the call waits
			// for it (a launch that seems slow after a restart shows why in the log).
			waiting.Do(func() {
				d.logger.Debug("launch waits for the reclaim in progress, sharing what it frees",
					"filesystem", fs.Path, "need_bytes", need.bytes, "avail_bytes", fs.WorkloadAvail())
			})
			m, err := at.measure(ctx, c)
			return err == nil && !m.Unavailable() && !need.short(m)
		}
	}
	run, rerr := c.reclaim.Reclaim(ctx, req)
	switch {
	case errors.Is(rerr, reclaim.ErrSatisfied):
		notes = append(notes, "another reclaim (running) freed what the call needs")
	case errors.Is(rerr, reclaim.ErrBusy):
		if need.short(fs) {
			return fs, notes, d.busyProblem(fs, notes)
		}
	case errors.Is(rerr, reclaim.ErrDeadline):
		if need.short(fs) {
			return fs, notes, d.deadlineProblem(fs, need.deadline, notes)
		}
	case rerr != nil:
		notes = append(notes, fmt.Sprintf("reclaim failed: %v", rerr))
	default:
		notes = append(notes, reclaimNote(run))
	}
	if m, err := at.measure(context.WithoutCancel(ctx), c); err == nil {
		fs = m
	}
	return fs, notes, nil
}

// launchVerdict answers the call from what it measured: every failure (space, mounts)
// merged into one refusal, else ok, with replace advice below a replace threshold.
func launchVerdict(resp *api.LaunchResponse, need launchNeeds, mountsOK bool, mountDetail string, notes []string) (*api.LaunchResponse, error) {
	fs := *resp.Filesystem
	var fails []*api.Problem
	if need.short(fs) {
		fails = append(fails, spaceProblem(fs, need.bytes, need.inodes, notes))
	}
	if !mountsOK {
		fails = append(fails, api.NewProblem(api.CodeMountUnavailable, "%s", mountDetail))
	}
	if len(fails) > 0 {
		return nil, mergeProblems(fails, resp.Filesystem, resp.Mounts)
	}
	resp.Verdict = fs.Judge()
	if resp.Verdict == api.VerdictReplace {
		a := "replace"
		resp.Advice = &a
		notes = append(notes, replaceNote(fs))
	}
	var buf [512]byte // on the stack when the line fits: it is copied into Detail below
	d := buf[:0]
	if n := 224 + len(notes)*2 + notesLen(notes); n > len(buf) {
		d = make([]byte, 0, n)
	}
	d = append(append(fs.AppendFingerprint(d), "; verdict "...), resp.Verdict...)
	d = append(d, "; "...)
	for i, s := range notes {
		if i > 0 {
			d = append(d, "; "...)
		}
		d = append(d, s...)
	}
	resp.Detail = string(d)
	return resp, nil
}

func notesLen(notes []string) int {
	n := 0
	for _, s := range notes {
		n += len(s)
	}
	return n
}

// short says the call's needs do not fit in the workload's free space: the room of a
// released reserve is not the workload's (CONTRACT §13).
func short(fs api.Filesystem, needBytes, needInodes uint64) bool {
	return fs.WorkloadAvail() < needBytes || (fs.Files > 0 && fs.FilesFree < needInodes)
}

// reserveNote is what a refusal says of the reserve: held so the sandbox can boot and be
// read, and how to release it on purpose; or, released, that its room is not for new work.
func reserveNote(fs api.Filesystem) string {
	switch {
	case fs.ReserveReleasedBytes > 0:
		return fmt.Sprintf("the %s reserve was released: its room is kept for booting, reading and removing files, never for new work",
			api.FormatSize(fs.ReserveReleasedBytes))
	case fs.ReserveBytes > 0:
		return fmt.Sprintf("the %s reserve file is held so the sandbox can boot and be read after a stop, never given to a workload; "+
			"release it on purpose with `sandboxd reserve release --reason TEXT` (or release_reserve in POST /v1/reclaim)", api.FormatSize(fs.ReserveBytes))
	}
	return ""
}

func replaceNote(fs api.Filesystem) string {
	switch {
	case fs.ReplaceMark != "" && !fs.BelowReplace():
		return "replace this sandbox: " + fs.ReplaceMark
	case fs.BytesBelowReplace():
		return fmt.Sprintf("below filesystem.replace_below %s: replace this sandbox", api.FormatSize(fs.ReplaceThresholdBytes))
	}
	return fmt.Sprintf("below filesystem.replace_below_inodes %s inodes: replace this sandbox", api.FormatCount(fs.ReplaceThresholdFiles))
}

// spaceProblem is the refusal for a call whose needs do not fit: replace_sandbox when
// the filesystem is below a replace threshold, else disk_full or inodes_exhausted.
func spaceProblem(fs api.Filesystem, needBytes, needInodes uint64, notes []string) *api.Problem {
	code := api.CodeInodesExhausted
	if fs.WorkloadAvail() < needBytes {
		code = api.CodeDiskFull
	}
	var what []string
	if fs.WorkloadAvail() < needBytes {
		what = append(what, fmt.Sprintf("the call needs %s free", api.FormatSize(needBytes)))
	}
	if fs.Files > 0 && fs.FilesFree < needInodes {
		what = append(what, fmt.Sprintf("the call needs %s free inodes", api.FormatCount(needInodes)))
	}
	if fs.Judge() == api.VerdictReplace {
		code = api.CodeReplaceSandbox
		what = append(what, replaceNote(fs))
	} else if fs.WorkloadAvail() < fs.ReclaimThresholdBytes {
		what = append(what, "below "+fs.ReclaimThresholdName())
	}
	if n := reserveNote(fs); n != "" && fs.WorkloadAvail() < needBytes {
		what = append(what, n)
	}
	parts := append([]string{fs.Fingerprint()}, notes...)
	for _, w := range what {
		// A note may already say it ("the call needs 1.0 TiB free, more than the
		// filesystem's whole size ...": an impossible need): once is enough.
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, w) }) {
			parts = append(parts, w)
		}
	}
	p := api.NewProblem(code, "%s", strings.Join(parts, "; "))
	return p
}

func (d *Daemon) busyProblem(fs api.Filesystem, notes []string) *api.Problem {
	parts := append([]string{fs.Fingerprint()}, notes...)
	parts = append(parts, "the call's deadline passed while another reclaim held the lock")
	p := api.NewProblem(api.CodeBusy, "%s", strings.Join(parts, "; "))
	p.RetryAfterSeconds = 2
	return p
}

// mergeProblems answers the first problem in CONTRACT §3's order with a detail that
// names every failure.
func mergeProblems(ps []*api.Problem, fs *api.Filesystem, mounts []api.Mount) *api.Problem {
	best := ps[0]
	var details []string
	for _, p := range ps {
		if p.Code.Precedence() < best.Code.Precedence() {
			best = p
		}
	}
	details = append(details, best.Detail)
	for _, p := range ps {
		if p != best {
			details = append(details, "also "+string(p.Code)+": "+p.Detail)
		}
	}
	out := api.NewProblem(best.Code, "%s", strings.Join(details, "; "))
	out.Filesystem = fs
	out.Mounts = mounts
	out.RetryAfterSeconds = best.RetryAfterSeconds
	return out
}
