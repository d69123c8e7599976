package api

import "time"

// Job routes (CONTRACT §11).
const (
	RouteJobsRegister = "POST /v1/jobs"
	RouteJobsList     = "GET /v1/jobs"
	RouteJobsLeaks    = "GET /v1/jobs/leaks"
	RouteJobGet       = "GET /v1/jobs/{id}"
	RouteJobDelete    = "DELETE /v1/jobs/{id}"
	RouteJobHeartbeat = "POST /v1/jobs/{id}/heartbeat"
	// RouteJobsSpawn registers a job whose first process the caller has yet to start: on
	// success the connection switches protocols (101, Upgrade: SpawnProtocol), the daemon
	// sends the job's cgroup directory fd (SCM_RIGHTS) and the caller starts its command
	// straight in that cgroup with clone3(CLONE_INTO_CGROUP), then reports the child's
	// pidfd (issue 27; docs/api.md "Spawning a job").
	RouteJobsSpawn = "POST /v1/jobs/spawn"
)

// SpawnProtocol is the Upgrade token of POST /v1/jobs/spawn.
const SpawnProtocol = "sandboxd-spawn/1"

// SpawnOffer is the first line the daemon sends after the 101 of POST /v1/jobs/spawn,
// with the job's cgroup directory fd attached (SCM_RIGHTS, opened O_PATH|O_DIRECTORY).
// Job is registered with pid 0 until the report names its process.
type SpawnOffer struct {
	Job Job `json:"job"`
}

// SpawnReport is the caller's one line after the offer. Exactly one of: Spawned, with the
// child's pidfd attached (SCM_RIGHTS), the process the daemon verifies and pins as the job;
// Migrate, when the spawn into the cgroup failed (a kernel before 5.7, a caller the kernel
// does not let write the cgroup, see docs/operations.md), to register the calling process
// itself by migration instead, as POST /v1/jobs without a pid does; Abort (a reason) to
// register nothing.
type SpawnReport struct {
	Spawned bool   `json:"spawned,omitempty"`
	Migrate bool   `json:"migrate,omitempty"`
	Abort   string `json:"abort,omitempty"`
	// Error is why the spawn failed, with Migrate or Abort (logged by the daemon).
	Error string `json:"error,omitempty"`
}

// SpawnAnswer is the daemon's last line: the job as registered, or why it is not.
type SpawnAnswer struct {
	Job     *Job     `json:"job,omitempty"`
	Problem *Problem `json:"problem,omitempty"`
}

// JobIDEnv is the environment variable sandboxd run exports to its command: the job's id.
const JobIDEnv = "SANDBOXD_JOB_ID"

// JobCgroupEnv is the job's cgroup, exported beside JobIDEnv: with it the leak check
// tells this daemon's jobs from another's of the same id (v1.2).
const JobCgroupEnv = "SANDBOXD_JOB_CGROUP"

// FeatureJobs is listed in status.features when the daemon has the job registry.
const FeatureJobs = "jobs"

// Job states.
const (
	JobRunning = "running"
	JobEnding  = "ending"
	JobEnded   = "ended"  // its processes exited by themselves
	JobKilled  = "killed" // ended by sandboxd
	JobLeaked  = "leaked" // still had processes after SIGKILL and the wait after it
)

// Reasons a job ended (or is ending).
const (
	ReasonLeaseExpired = "lease_expired"
	ReasonMaxLifetime  = "max_lifetime"
	ReasonDeleted      = "deleted"
	ReasonExited       = "exited"
)

// JobRequest is the body of POST /v1/jobs. Nil durations take the [jobs] defaults.
type JobRequest struct {
	ID string `json:"id,omitempty"`
	// PID is a process id of the caller's pid namespace, taken only when that is the daemon's own
	// (CONTRACT §17); left out (0), the job is the calling process, as the kernel names it.
	PID         int               `json:"pid,omitempty"`
	TTL         *Duration         `json:"ttl,omitempty"`
	MaxLifetime *Duration         `json:"max_lifetime,omitempty"`
	Grace       *Duration         `json:"grace,omitempty"`
	Site        string            `json:"site,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Lease names a shared lease (v1.2): every job of it is renewed by one heartbeat
	// (POST /v1/leases/{name}/heartbeat) and ended with it. "" = the job's own lease.
	Lease string `json:"lease,omitempty"`
	// Launch, when present, is the launch check (POST /v1/launch) made in the same call,
	// before anything is registered: a refused launch answers its own problem and
	// registers nothing (issue 27 item 2). Its answer is the job's "launch".
	Launch *LaunchRequest `json:"launch,omitempty"`
}

// HeartbeatRequest is the body of POST /v1/jobs/{id}/heartbeat.
type HeartbeatRequest struct {
	Extend *Duration `json:"extend,omitempty"`
}

// Job is one registered job (CONTRACT §11).
type Job struct {
	ID   string `json:"id"`
	Site string `json:"site,omitempty"`
	// Lease is the shared lease the job lives under ("" = its own), v1.2.
	Lease  string `json:"lease,omitempty"`
	PID    int    `json:"pid"`
	Cgroup string `json:"cgroup"`
	State  string `json:"state"`
	// Reason is why the job ended or is ending; "" while it runs.
	Reason         string            `json:"reason"`
	StartedAt      time.Time         `json:"started_at"`
	LeaseExpiresAt time.Time         `json:"lease_expires_at"`
	DeadlineAt     time.Time         `json:"deadline_at"`
	EndedAt        *time.Time        `json:"ended_at"`
	TTLSeconds     float64           `json:"ttl_seconds"`
	GraceSeconds   float64           `json:"grace_seconds"`
	Heartbeats     int64             `json:"heartbeats"`
	Processes      int               `json:"processes"`
	Labels         map[string]string `json:"labels"`
	// Owner is who registered the job: only that uid or root may end or heartbeat it.
	Owner *JobOwner `json:"owner,omitempty"`
	// Launch is the launch check's answer when the registration carried one.
	Launch   *LaunchResponse `json:"launch,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
}

// JobOwner is the uid that registered a job and the pid namespace it called from.
type JobOwner struct {
	UID   uint32 `json:"uid"`
	PidNS string `json:"pidns,omitempty"`
}

// JobsPage is the body of GET /v1/jobs.
type JobsPage struct {
	Jobs []Job `json:"jobs"`
	// Next is the cursor of the following page (?after=), "" on the last (issue 21).
	Next string `json:"next,omitempty"`
	// Available is false when the host has no usable cgroup v2; Reason says why.
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Root      string `json:"cgroup_root"`
}

// Leak kinds (the kind label of sandboxd_jobs_leaked).
const (
	LeakRegistered    = "registered"     // a job in state leaked
	LeakUnleased      = "unleased"       // a site's pid file names a live process no job holds
	LeakUnknownCgroup = "unknown_cgroup" // a non-empty cgroup under the jobs root the registry does not know
	LeakEscaped       = "escaped"        // a process outside its job's cgroup that carries SANDBOXD_JOB_ID (v1.2)
)

// Leak is one finding of the leak check.
type Leak struct {
	Kind       string  `json:"kind"`
	Job        string  `json:"job,omitempty"`
	Site       string  `json:"site,omitempty"`
	PID        int     `json:"pid,omitempty"`
	Cgroup     string  `json:"cgroup,omitempty"`
	Processes  int     `json:"processes"`
	AgeSeconds float64 `json:"age_seconds"`
	Detail     string  `json:"detail"`
	// Cleaned is true when ?clean=true ended it; Error says why it could not be.
	Cleaned bool   `json:"cleaned"`
	Error   string `json:"error,omitempty"`
}

// LeaksReport is the body of GET /v1/jobs/leaks.
type LeaksReport struct {
	Leaks     []Leak    `json:"leaks"`
	CheckedAt time.Time `json:"checked_at"`
	Cleaned   bool      `json:"cleaned"`
}

// JobsSummary is the jobs part of GET /v1/status.
type JobsSummary struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Root      string `json:"cgroup_root"`
	Running   int    `json:"running"`
	Ending    int    `json:"ending"`
	Leaked    int    `json:"leaked"`
	Ended     int    `json:"ended"`
	// Oldest is the id of the oldest running job; NextLapse the job whose lease lapses first.
	Oldest          string     `json:"oldest,omitempty"`
	OldestStartedAt *time.Time `json:"oldest_started_at,omitempty"`
	NextLapse       string     `json:"next_lapse,omitempty"`
	NextLapseAt     *time.Time `json:"next_lapse_at,omitempty"`
	// Registry is where the live registry is kept (v1.2, [jobs] registry_dir).
	Registry *JobsRegistry `json:"registry,omitempty"`
}

// JobsRegistry is the state of the job registry's journal (CONTRACT §17).
type JobsRegistry struct {
	Dir string `json:"dir"`
	// JournalBytes is the journal's size now; WrittenBytes every byte written to the
	// registry since start (appends and rewrites).
	JournalBytes int64 `json:"journal_bytes"`
	WrittenBytes int64 `json:"written_bytes"`
	// Error is why registrations are refused with state_unavailable now ("" while the
	// registry can be written).
	Error string `json:"error,omitempty"`
}

// EventJob is the event kind of a job's registration; its end is an EventKill.
const EventJob = "job"

// HeartbeatAnswer is the answer of POST /v1/jobs/{id}/heartbeat: the job object with
// "processes" null. A heartbeat stays about as cheap as /livez, and counting the job's
// processes (a walk of its cgroup) would take most of it (docs/benchmarks.md): GET
// /v1/jobs/{id} counts them. Null, never a count of 0 that is not one.
type HeartbeatAnswer struct {
	Job
	Processes *int `json:"processes"`
}
