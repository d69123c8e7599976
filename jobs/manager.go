package jobs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/state"
)

// Options configure a Manager. Zero durations take the defaults of [jobs] (CONTRACT §10).
type Options struct {
	// CgroupRoot is [jobs] cgroup_root; "" finds it with FindRoot.
	CgroupRoot  string
	DefaultTTL  time.Duration // 3m
	MaxLifetime time.Duration // 12h: the cap for jobs that ask for more or for nothing
	Grace       time.Duration // 0 = SIGKILL at once (the daemon passes [jobs] grace, 10s)
	UnleasedMax time.Duration // 1h
	// PidFileSlack is how long before its pid file was written a process may have started
	// and still count as the one the file was written for (`cmd & echo $! > id.pid`); the
	// leak clean-up leaves an earlier one running. 10s.
	PidFileSlack time.Duration
	KeepEnded    time.Duration // 1h
	// KillWait is how long a job may still have processes after SIGKILL before it is
	// leaked (10s, CONTRACT §11).
	KillWait time.Duration
	// MaxJobs bounds the live jobs (4096) and MaxEnded the ended ones kept listed ([jobs]
	// keep_ended_max, 1024), so a flood of registrations cannot grow the daemon without
	// bound; MaxPerUID bounds the live jobs of one uid other than root (1024, [jobs]
	// max_per_uid).
	MaxJobs, MaxEnded, MaxPerUID int
	// SweepInterval is the period of the background leak check (1m).
	SweepInterval time.Duration

	// RegistryDir is [jobs] registry_dir, where the journal of live jobs is kept (journal.go);
	// "" keeps the registry in memory only.
	RegistryDir string
	// RegistryWait is how long Run waits for a registry another sandboxd holds (the one
	// before it, still stopping) before it says the registry is stuck (30s); it goes on
	// trying after that (acquire.go).
	RegistryWait time.Duration
	// State is the state directory, read only for the registry document of versions before
	// the journal (nil: none).
	State    *state.Store
	Now      func() time.Time
	Events   func(api.Event)
	Logger   *slog.Logger
	ProcRoot string // "/proc"

	// SiteKnown says whether a site name is configured; nil accepts any.
	SiteKnown func(name string) bool
	// PidFiles lists the live processes that sites' <id>.pid files name, for the leak
	// check (nil: none). Declared here so that jobs does not import retention.
	PidFiles func() []PidFile
	// OnEnd, when set, is called once for every job that stops running (see Manager.OnEnd).
	OnEnd func(id, reason string)

	// NoCgroupKill makes ending use freeze, kill, thaw even where cgroup.kill exists (tests
	// of the fallback for kernels before 5.14).
	NoCgroupKill bool
}

// PidFile is one site job whose pid file names a live process.
type PidFile struct {
	Site string
	Job  string
	PID  int
	// FileUID and FileMtime are the pid file's owner and mtime. The leak check ages an
	// unleased process by the file, and the clean-up ends it only when it runs as the
	// file's owner and did not start before the file was written (leaks.go).
	FileUID   uint32
	FileMtime time.Time
}

// Caller is who registers a job: a peer with uid 0 may register any process, any other
// only its own.
type Caller struct {
	UID uint32
	// Peer is the calling process as the kernel names it (PeerOf); nil for a call from
	// within sandboxd itself (its leak check), whose pid numbers are its own. A request
	// without a pid registers Peer; a pid in the body is taken only when Peer runs in
	// sandboxd's own pid namespace.
	Peer *Peer
	// Owner, when set, names whose job (or lease) an id means (?owner=UID); nil: the
	// caller's own, else the only one of that id (findLocked).
	Owner *uint32
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.DefaultTTL, 3*time.Minute)
	def(&o.MaxLifetime, 12*time.Hour)
	def(&o.UnleasedMax, time.Hour)
	def(&o.PidFileSlack, 10*time.Second)
	def(&o.KeepEnded, time.Hour)
	def(&o.KillWait, 10*time.Second)
	def(&o.SweepInterval, time.Minute)
	def(&o.RegistryWait, 30*time.Second)
	if o.Grace < 0 {
		o.Grace = 10 * time.Second
	}
	if o.MaxJobs <= 0 {
		o.MaxJobs = 4096
	}
	if o.MaxEnded <= 0 {
		o.MaxEnded = 1024
	}
	if o.MaxPerUID <= 0 {
		o.MaxPerUID = 1024
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Events == nil {
		o.Events = func(api.Event) {}
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
}

// job is one registered job. Exported fields are what the state document keeps.
type job struct {
	// ID is the job's key: its id, and "@UID" for an owner other than root (owner.go);
	// the API shows pubID(ID).
	ID        string            `json:"id"`
	Site      string            `json:"site,omitempty"`
	Lease     string            `json:"lease,omitempty"` // a shared lease's key (lease.go)
	PID       int               `json:"pid"`
	Cgroup    string            `json:"cgroup"`
	State     string            `json:"state"`
	Reason    string            `json:"reason,omitempty"`
	StartedAt time.Time         `json:"started_at"`
	EndedAt   time.Time         `json:"ended_at,omitzero"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Boot-relative instants (CLOCK_BOOTTIME, ns): these, not the wall times, decide.
	StartBoot    int64         `json:"start_boot"`
	LeaseBoot    int64         `json:"lease_boot"`
	DeadlineBoot int64         `json:"deadline_boot"`
	EndedBoot    int64         `json:"ended_boot,omitempty"`
	TTL          time.Duration `json:"ttl"`
	Grace        time.Duration `json:"grace"`
	Heartbeats   int64         `json:"heartbeats"`
	// Adopted marks a job the leak check made for an unleased process it ended.
	Adopted bool `json:"adopted,omitempty"`
	// Owner registered the job (owner.go); nil in a registry saved before owners.
	Owner *Owner `json:"owner,omitempty"`

	askedBy string // who asked for the end (DELETE), for the kill event

	done    chan struct{} // closed when the job stops running or ending
	endOnce bool          // an ending goroutine was started
	placing bool          // registration is making its cgroup: the dead-man switch waits
	wd      int           // inotify watch of its cgroup.events; 0 = none
}

func (j *job) live() bool { return j.State == api.JobRunning || j.State == api.JobEnding }

// Manager is the job registry and its dead-man switch. Create it with New, run it with Run.
type Manager struct {
	opts        Options
	cg          cgroupFS
	root        string // <root>/jobs/<id> holds each job
	delegated   bool   // root is the daemon's own delegated cgroup
	unavailable string // why jobs cannot run here; "" when they can
	boot        string // boot id the leases belong to

	mu           sync.Mutex // guards the fields below
	jobs         map[string]*job
	rootReady    bool
	onEnd        []func(id, reason string)
	endedTotal   map[string]int64
	lastLeaks    map[string]int
	lastActivity time.Time
	runCtx       context.Context
	wg           *sync.WaitGroup
	watch        *watcher

	// Owned by Run's loop (stall.go): its last tick and when it meant to tick next, on
	// CLOCK_BOOTTIME, and the file the tick is written down in.
	lastTick, dueTick int64
	restartGap        bool // the first tick measures the gap since the last saved tick
	tickFile          *os.File

	leases map[string]*lease // shared leases by name (lease.go)
	// leaseJobs are the listed jobs of each shared lease, by its key (listLocked), so
	// that a lease's renewal or a job joining it touches its jobs, not every job.
	// unusedLeases: leases whose last listed job left the list since the last prune.
	leaseJobs    map[string]map[*job]struct{}
	unusedLeases []string
	// liveOf counts the listed live jobs (running, ending) of each owner's uid, kept by
	// listLocked, unlistLocked and finishLocked: max_per_uid is checked at every
	// registration of a uid other than root's, which counted them by walking every job.
	liveOf      map[uint32]int
	forgot      map[string]forgotten // ended jobs dropped from the list (forgotten.go)
	forgotOrder []string             // their ids, oldest first

	journal *journal // the registry on disk (journal.go); nil: memory only
	regErr  error    // why the registry cannot be written now; nil while it can
	// heldSince is when New found the registry held by another sandboxd (acquire.go);
	// zero once it is loaded, or when it never was held. heldStuck: RegistryWait passed.
	heldSince time.Time
	heldStuck bool
	// rekeyed is the new key of each job the load re-keyed, by its old (store.go);
	// otherCgroups is set once a job's cgroup is not named by its key.
	rekeyed      map[string]string
	otherCgroups bool

	// ended are the ended jobs (state ended or killed) by EndedBoot, oldest first from
	// endedHead: pruneEndedLocked drops from the front, where it sorted every ended job
	// on each call (issue 27). An entry whose job left the list since (forgotten, or its
	// key registered again) is skipped when reached; endedN counts those still listed.
	ended     []*job
	endedHead int
	endedN    int

	// armedAt is when (CLOCK_BOOTTIME) the dead-man switch next looks at the jobs, set
	// by each tick; 0 before the first. idle: its last look found no live job, so the
	// tick is not being written down (stall.go). rearmLocked reads both.
	armedAt int64
	idle    bool

	wake chan struct{} // a lease changed: recompute the next deadline
	// loaded is closed once the registry is loaded, or known not to be (memory only,
	// unusable): never while another sandboxd holds it.
	loaded chan struct{}
}

// New builds a Manager: it works out the cgroup root (a host without usable cgroup v2
// gives a Manager whose calls answer jobs_unavailable with the reason) and loads the
// registry of an earlier run from the state directory. It creates no cgroup: the root is
// made on the first registration, so a daemon that never runs a job leaves nothing.
func New(opts Options) *Manager {
	opts.setDefaults()
	m := &Manager{opts: opts, jobs: map[string]*job{}, endedTotal: map[string]int64{},
		lastLeaks: map[string]int{api.LeakRegistered: 0, api.LeakUnleased: 0, api.LeakUnknownCgroup: 0, api.LeakEscaped: 0},
		runCtx:    context.Background(), wg: &sync.WaitGroup{},
		wake: make(chan struct{}, 1), loaded: make(chan struct{})}
	for _, r := range []string{api.ReasonLeaseExpired, api.ReasonMaxLifetime, api.ReasonDeleted, api.ReasonExited} {
		m.endedTotal[r] = 0
	}
	m.boot = bootID(opts.ProcRoot)
	m.unavailable = m.findRoot()
	m.load()
	return m
}

func (m *Manager) findRoot() string {
	mount, err := cgroup2Mount(m.opts.ProcRoot)
	if err != nil {
		return err.Error()
	}
	m.cg = cgroupFS{mount: mount, procRoot: m.opts.ProcRoot}
	if m.opts.CgroupRoot != "" {
		m.root = filepath.Clean(m.opts.CgroupRoot)
		if err := checkCgroup2(m.root); err != nil {
			return "[jobs] cgroup_root: " + err.Error()
		}
		if rel, err := filepath.Rel(mount, m.root); err != nil || rel == ".." || len(rel) > 1 && rel[:2] == ".." {
			return "[jobs] cgroup_root " + m.root + " is not below the cgroup2 mount " + mount
		}
	} else {
		root, delegated, err := FindRoot(m.opts.ProcRoot)
		if err != nil {
			return err.Error()
		}
		if why := inContainerCgroup(m.opts.ProcRoot); why != "" && !delegated {
			return why
		}
		m.root, m.delegated = root, delegated
	}
	if err := writableAncestor(m.root); err != nil {
		return err.Error()
	}
	if err := checkRootPath(m.root); err != nil {
		return err.Error()
	}
	return ""
}

func writableAncestor(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			if err := accessW(d); err != nil {
				return err
			}
			return nil
		}
		if d == "/" {
			return nil
		}
	}
}

// Available says whether jobs can run here, and if not, why.
func (m *Manager) Available() (bool, string) { return m.unavailable == "", m.unavailable }

// Root is the cgroup root jobs live under (each in <root>/jobs/<id>).
func (m *Manager) Root() string { return m.root }

// OnEnd registers f to be called once for every job that stops running — it ended, was
// killed, or leaked — with its key (its id for root's job, ID@UID for another uid's:
// Key) and reason, after its cgroup was emptied (or given up
// on). f runs on the goroutine that ended the job and must not block for long.
func (m *Manager) OnEnd(f func(id, reason string)) {
	m.mu.Lock()
	m.onEnd = append(m.onEnd, f)
	m.mu.Unlock()
}

// Get returns the job id (running or ended and still listed) as root names it: root's
// own, else the only job of that id.
func (m *Manager) Get(id string) (api.Job, bool) {
	v, err := m.GetAs(id, Caller{})
	return v, err == nil
}

// GetAs returns the job id names for by (findLocked); its error is the 404 or 409.
func (m *Manager) GetAs(id string, by Caller) (api.Job, error) {
	m.mu.Lock()
	j, err := m.findLocked(id, by)
	if err == nil && j.placing {
		err = m.notFoundLocked(j.ID)
	}
	if err != nil {
		m.mu.Unlock()
		return api.Job{}, err
	}
	m.mu.Unlock()
	return m.view(j), nil
}

// view is j as the API shows it, with its processes counted.
func (m *Manager) view(j *job) api.Job {
	m.mu.Lock()
	out := m.viewLocked(j)
	m.mu.Unlock()
	if out.State != api.JobEnded && out.State != api.JobKilled {
		out.Processes = countProcs(out.Cgroup)
	}
	return out
}

// List returns every job, oldest first.
func (m *Manager) List() []api.Job {
	m.mu.Lock()
	js := m.sortedLocked(nil)
	out := make([]api.Job, 0, len(js))
	for _, j := range js {
		out = append(out, m.viewLocked(j))
	}
	m.mu.Unlock()
	return m.countAll(out)
}

// sortedLocked are the listed jobs, oldest first (then by key); owner, when set, keeps
// only that uid's. Caller holds m.mu.
func (m *Manager) sortedLocked(owner *uint32) []*job {
	out := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		if !j.placing && (owner == nil || m.ownerUIDLocked(j) == *owner) {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].StartedAt.Equal(out[b].StartedAt) {
			return out[a].StartedAt.Before(out[b].StartedAt)
		}
		return out[a].ID < out[b].ID
	})
	return out
}

func (m *Manager) countAll(out []api.Job) []api.Job {
	for i := range out {
		if out[i].State != api.JobEnded && out[i].State != api.JobKilled {
			out[i].Processes = countProcs(out[i].Cgroup)
		}
	}
	return out
}

func countProcs(dir string) int {
	p, err := procsOf(dir)
	if err != nil {
		return 0
	}
	return len(p)
}

// viewLocked is j as the API shows it, with boot-relative instants turned into wall
// times against the clock of now.
func (m *Manager) viewLocked(j *job) api.Job {
	now, boot := m.opts.Now(), boottime()
	wall := func(b int64) time.Time { return now.Add(time.Duration(b - boot)).Round(time.Millisecond) }
	v := api.Job{ID: pubID(j.ID), Site: j.Site, Lease: pubID(j.Lease), PID: j.PID, Cgroup: j.Cgroup, State: j.State, Reason: j.Reason,
		StartedAt: j.StartedAt, LeaseExpiresAt: wall(j.LeaseBoot), DeadlineAt: wall(j.DeadlineBoot),
		TTLSeconds: j.TTL.Seconds(), GraceSeconds: j.Grace.Seconds(), Heartbeats: j.Heartbeats,
		Labels: j.Labels, Owner: m.ownerView(j)}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	if !j.EndedAt.IsZero() {
		t := j.EndedAt
		v.EndedAt = &t
	}
	return v
}

func (m *Manager) emit(ev api.Event) { m.opts.Events(ev) }

// rearmLocked wakes the dead-man switch for a job that is due at due (CLOCK_BOOTTIME):
// only when that comes before the switch's next look at the jobs, or when no job was live
// at its last one (the first live job has its tick written down at once). A registration
// or a heartbeat so costs a comparison, where each used to wake a tick that walked every
// job under mu (issue 27). Caller holds mu.
func (m *Manager) rearmLocked(due int64) {
	if m.armedAt == 0 || m.idle || due < m.armedAt {
		m.kick()
	}
}

func (m *Manager) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Holds says whether a registered job of site with id, whoever owns it, still has its
// processes (running, ending or leaked): retention counts such a job's files as running
// (CONTRACT §11).
func (m *Manager) Holds(site, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.heldSince.IsZero() {
		return true // another sandboxd holds the registry (acquire.go): cannot know, keep its files
	}
	for _, j := range m.jobs {
		if pubID(j.ID) == id && j.Site == site && (j.live() || j.State == api.JobLeaked) {
			return true
		}
	}
	return false
}

// SetLimits applies new [jobs] durations (a config reload); they hold for jobs registered
// from then on. The cgroup root is fixed for the Manager's life.
func (m *Manager) SetLimits(o Options) {
	o.setDefaults()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opts.DefaultTTL, m.opts.MaxLifetime, m.opts.Grace = o.DefaultTTL, o.MaxLifetime, o.Grace
	m.opts.UnleasedMax, m.opts.KeepEnded, m.opts.MaxEnded = o.UnleasedMax, o.KeepEnded, o.MaxEnded
	m.opts.MaxPerUID = o.MaxPerUID
}
