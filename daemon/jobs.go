package daemon

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/jobs"
	"github.com/sandboxd/sandboxd/retention"
)

// The job registry (CONTRACT §11) lives as long as the daemon, not as one config's
// components: its cgroups and leases outlive a reload. A reload changes its limits in
// place; a new cgroup_root takes effect at the next start.

// jobsOptions are the registry's options from cfg.
func (d *Daemon) jobsOptions(cfg *config.Config) jobs.Options {
	j := cfg.Jobs
	return jobs.Options{CgroupRoot: j.CgroupRoot, DefaultTTL: j.DefaultTTL, MaxLifetime: j.MaxLifetime,
		Grace: j.Grace, UnleasedMax: j.UnleasedMax, KeepEnded: j.KeepEnded, RegistryDir: j.RegistryDir,
		MaxEnded: int(j.KeepEndedMax), MaxPerUID: int(j.MaxPerUID),
		State: d.state, Now: d.now, Events: d.events.For("jobs"), Logger: d.logger.With("component", "jobs"),
		ProcRoot: d.opts.ProcRoot,
		SiteKnown: func(name string) bool {
			for _, s := range d.current().sites.SiteNames() {
				if s == name {
					return true
				}
			}
			return false
		},
		PidFiles: func() []jobs.PidFile {
			var out []jobs.PidFile
			for _, p := range d.current().sites.PidJobs() {
				out = append(out, jobs.PidFile{Site: p.Site, Job: p.Job, PID: p.PID, FileUID: p.FileUID, FileMtime: p.FileMtime})
			}
			return out
		},
	}
}

// jobRegistry builds the registry on the first call (from buildComponents, before
// retention, which asks it which site jobs it holds) and ties registered mounts to it.
func (d *Daemon) jobRegistry(cfg *config.Config) *jobs.Manager {
	if d.jobReg == nil {
		d.jobReg = jobs.New(d.jobsOptions(cfg))
		if d.opts.mountJobs == nil { // tests may tie mounts to a registry of their own
			d.wireJobTie(managerTie{d.jobReg})
		}
	}
	return d.jobReg
}

// jobHolder is the registry as retention sees it; nil-safe while it is being built.
type jobHolder struct{ d *Daemon }

func (h jobHolder) Holds(site, id string) bool {
	return h.d.jobReg != nil && h.d.jobReg.Holds(site, id)
}

var _ retention.JobHolder = jobHolder{}

func (d *Daemon) jobRoutes() []route {
	rs := []route{
		{api.RouteJobsRegister, d.handleJobRegister, true},
		{api.RouteJobsSpawn, d.handleJobSpawn, true},
		{api.RouteJobsList, d.handleJobsList, false},
		{api.RouteJobsLeaks, d.handleJobsLeaks, false},
		{api.RouteJobGet, d.handleJobGet, false},
		{api.RouteJobDelete, d.handleJobDelete, true},
		{api.RouteJobHeartbeat, d.handleJobHeartbeat, true},
		{api.RouteLeasesList, d.handleLeasesList, false},
		{api.RouteLeaseHeartbeat, d.handleLeaseHeartbeat, true},
		{api.RouteLeaseDelete, d.handleLeaseDelete, true},
	}
	for i := range rs {
		rs[i].handler = d.whileRegistryHeld(rs[i].handler)
	}
	return rs
}

// whileRegistryHeld refuses every job call, 503 state_unavailable (retry), while another
// sandboxd holds the job registry (jobs/acquire.go: the daemon before this one, still
// stopping): an empty list or a 404 then would tell a runner its job is gone, and a leak
// check would take that daemon's jobs for leaks.
func (d *Daemon) whileRegistryHeld(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := d.jobReg.Waiting(); err != nil {
			return err
		}
		return h(w, r)
	}
}

// registrySettled says whether the job registry is this daemon's, or the wait for it
// passed (JobRegistryHeld is critical then): the daemon is not ready before.
func registrySettled(m *jobs.Manager) bool {
	if m == nil {
		return true
	}
	since, stuck := m.Held()
	return since.IsZero() || stuck
}

// RegistryHeld says whether another process holds the job registry of cfg: serve
// --wait-for-socket waits for the daemon before it to let go of it before it starts.
func RegistryHeld(cfg *config.Config) bool { return jobs.RegistryHeld(cfg.Jobs.RegistryDir) }

func (d *Daemon) jobsAvailable() error {
	if ok, why := d.jobReg.Available(); !ok {
		return api.NewProblem(api.CodeJobsUnavailable, "jobs are unavailable on this host: %s", why)
	}
	return nil
}

func (d *Daemon) handleJobRegister(w http.ResponseWriter, r *http.Request) error {
	jc, err := d.beginJobCall(r)
	if err != nil {
		return err
	}
	defer jc.close()
	j, err := d.jobReg.Register(jc.req, jc.by)
	if err != nil {
		return err
	}
	d.touchActivity()
	j.Launch = jc.launch
	j.Warnings = append(j.Warnings, jc.warnings...)
	writeJSON(w, http.StatusCreated, j)
	return nil
}

// jobCall is what a registration (POST /v1/jobs) and a spawn (POST /v1/jobs/spawn) share
// before they register: the request, its caller pinned by pidfd, and the launch check the
// request carries, already passed.
type jobCall struct {
	req      api.JobRequest
	warnings []string
	by       jobs.Caller
	launch   *api.LaunchResponse
}

func (c *jobCall) close() { c.by.Peer.Close() }

// beginJobCall decodes a job request, checks that jobs are available, pins the caller and
// runs the launch check the request carries; on an error nothing is held.
func (d *Daemon) beginJobCall(r *http.Request) (*jobCall, error) {
	c := &jobCall{}
	var err error
	if c.warnings, err = api.DecodeRequest(r.Body, &c.req); err != nil {
		return nil, err
	}
	if err := d.jobsAvailable(); err != nil {
		return nil, err
	}
	p := peerFrom(r.Context())
	proc, err := peerProcess(p)
	if err != nil {
		return nil, err
	}
	c.by = jobs.Caller{UID: p.UID, Peer: proc}
	if c.launch, err = d.jobLaunch(r.Context(), c.req.Launch, p.UID); err != nil {
		proc.Close()
		return nil, err
	}
	return c, nil
}

// jobLaunch is the launch check a registration carries (issue 27 item 2: one call where a
// runner made two), before anything is registered: its refusal is the call's answer.
func (d *Daemon) jobLaunch(ctx context.Context, req *api.LaunchRequest, uid uint32) (*api.LaunchResponse, error) {
	if req == nil {
		return nil, nil
	}
	return d.launchCall(ctx, *req, uid, nil, time.Now())
}

// peerProcess pins the process at the other end of p's connection (jobs.PeerOf): a job
// registration learns which process calls from the kernel, never from a pid number alone.
func peerProcess(p Peer) (*jobs.Peer, error) {
	if p.conn == nil {
		return nil, api.NewProblem(api.CodeForbidden, "the calling process cannot be known on this connection (not a Unix socket)")
	}
	raw, err := p.conn.SyscallConn()
	if err != nil {
		return nil, api.NewProblem(api.CodeInternal, "peer of the connection: %v", err)
	}
	var proc *jobs.Peer
	var perr error
	if err := raw.Control(func(fd uintptr) { proc, perr = jobs.PeerOf(int(fd)) }); err != nil {
		perr = err
	}
	if perr != nil {
		return nil, api.NewProblem(api.CodeInternal, "peer of the connection: %v", perr)
	}
	return proc, nil
}

func (d *Daemon) handleJobsList(w http.ResponseWriter, r *http.Request) error {
	ok, why := d.jobReg.Available()
	limit := jobs.DefaultPageSize
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > jobs.MaxPageSize {
			return api.NewProblem(api.CodeBadRequest, "query parameter \"limit\": want 1 to %d jobs per page, got %q", jobs.MaxPageSize, s)
		}
		limit = n
	}
	owner, err := queryOwner(r)
	if err != nil {
		return err
	}
	page, next, err := d.jobReg.Page(r.URL.Query().Get("after"), limit, owner)
	if err != nil {
		return api.NewProblem(api.CodeBadRequest, "query parameter \"after\": %v", err)
	}
	writeJSON(w, http.StatusOK, api.JobsPage{Jobs: nonNil(page), Next: next, Available: ok, Reason: why, Root: d.jobReg.Root()})
	return nil
}

func (d *Daemon) handleJobGet(w http.ResponseWriter, r *http.Request) error {
	owner, err := queryOwner(r)
	if err != nil {
		return err
	}
	j, err := d.jobReg.GetAs(r.PathValue("id"), jobs.Caller{UID: peerFrom(r.Context()).UID, Owner: owner})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// handleJobDelete ends the job and answers once its cgroup is empty (CONTRACT §11), or
// at once with ?wait=false. The wait is bounded by the job's grace plus the kill wait,
// which the ending itself keeps; the request's context ends it early only when the
// client goes away.
func (d *Daemon) handleJobDelete(w http.ResponseWriter, r *http.Request) error {
	wait, err := queryBool(r, "wait", true)
	if err != nil {
		return err
	}
	by, done, err := jobCaller(r)
	if err != nil {
		return err
	}
	defer done()
	j, err := d.jobReg.EndAs(r.Context(), r.PathValue("id"), api.ReasonDeleted, wait, by)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// heartbeatRequest decodes a heartbeat's body (whose, "job" or "lease", names the default
// of a missing extend) and knows the caller; done releases what jobCaller holds.
func heartbeatRequest(r *http.Request, whose string) (extend time.Duration, warnings []string, by jobs.Caller, done func(), err error) {
	var req api.HeartbeatRequest
	if warnings, err = api.DecodeRequest(r.Body, &req); err != nil {
		return 0, nil, by, nil, err
	}
	if req.Extend != nil {
		if extend = req.Extend.D(); extend <= 0 {
			return 0, nil, by, nil, api.NewProblem(api.CodeBadRequest, "field \"extend\": must be longer than 0s (leave it out for the %s's ttl)", whose)
		}
	}
	by, done, err = jobCaller(r)
	return extend, warnings, by, done, err
}

func (d *Daemon) handleJobHeartbeat(w http.ResponseWriter, r *http.Request) error {
	extend, warnings, by, done, err := heartbeatRequest(r, "job")
	if err != nil {
		return err
	}
	defer done()
	j, err := d.jobReg.HeartbeatAs(r.PathValue("id"), extend, by)
	if err != nil {
		return err
	}
	d.touchActivity()
	j.Warnings = append(j.Warnings, warnings...)
	writeJSON(w, http.StatusOK, api.HeartbeatAnswer{Job: j})
	return nil
}

// handleJobsLeaks is the loud leak check; ?clean=true ends what it finds first (a writer's
// call) and still lists it.
func (d *Daemon) handleJobsLeaks(w http.ResponseWriter, r *http.Request) error {
	clean, err := queryBool(r, "clean", false)
	if err != nil {
		return err
	}
	if clean {
		p := peerFrom(r.Context())
		if ok, why := d.writers().allowed(p, d.selfUID); !ok {
			return api.NewProblem(api.CodeForbidden, "GET /v1/jobs/leaks?clean=true ends processes: %s", why)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	rep, err := d.jobReg.Leaks(ctx, clean)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (d *Daemon) touchActivity() { d.activity.Store(d.now().UnixNano()) }

// jobsCollector exports the registry's series (CONTRACT §11).
type jobsCollector struct{ d *Daemon }

var (
	descJobs         = desc("sandboxd_jobs", "Registered jobs by state.", "state")
	descJobsEnded    = desc("sandboxd_jobs_ended_total", "Jobs that stopped running since start, by reason.", "reason")
	descJobsLeaked   = desc("sandboxd_jobs_leaked", "Leaks the last leak check found, by kind.", "kind")
	descLastActivity = desc("sandboxd_last_activity_timestamp_seconds", "The last launch, job registration or heartbeat (Unix time); absent before the first.")
)

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descJobs
	ch <- descJobsEnded
	ch <- descJobsLeaked
	ch <- descLastActivity
}

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.d.jobReg
	for state, n := range m.Counts() {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), state)
	}
	for reason, n := range m.EndedTotals() {
		ch <- prometheus.MustNewConstMetric(descJobsEnded, prometheus.CounterValue, float64(n), reason)
	}
	for kind, n := range m.LastLeaks() {
		ch <- prometheus.MustNewConstMetric(descJobsLeaked, prometheus.GaugeValue, float64(n), kind)
	}
	last := c.d.activity.Load()
	if t := m.LastActivity(); t.UnixNano() > last {
		last = t.UnixNano()
	}
	if last > 0 {
		ch <- prometheus.MustNewConstMetric(descLastActivity, prometheus.GaugeValue, float64(last)/1e9)
	}
}

func jobsSummary(m *jobs.Manager) *api.JobsSummary {
	s := m.Summary()
	return &s
}

// reconfigureJobs applies a reload's [jobs] limits to the running registry; they hold
// for jobs registered from then on. The cgroup root cannot move under running jobs.
func (d *Daemon) reconfigureJobs(_ context.Context, c *components, prev, next *config.Config) (string, bool, error) {
	if prev.Jobs == next.Jobs {
		return "", false, nil
	}
	d.jobReg.SetLimits(d.jobsOptions(next))
	note := "jobs limits changed"
	if prev.Jobs.CgroupRoot != next.Jobs.CgroupRoot {
		note += "; jobs.cgroup_root takes effect at the next restart"
	}
	return note, false, nil
}
