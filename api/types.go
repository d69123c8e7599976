package api

import "time"

// Filesystem is one watched filesystem as GET /v1/status shows it (CONTRACT §4).
// Bytes are blocks × f_frsize. Files == 0 means the filesystem has no inode limit.
type Filesystem struct {
	Path                  string   `json:"path"`
	Mountpoint            string   `json:"mountpoint"`
	Device                string   `json:"device"` // the mount source, as node_exporter's device label (v1.1)
	Devno                 string   `json:"devno"`  // st_dev as "major:minor" (v1.1)
	FSType                string   `json:"fstype"`
	SizeBytes             uint64   `json:"size_bytes"`
	AvailBytes            uint64   `json:"avail_bytes"`
	FreeBytes             uint64   `json:"free_bytes"`
	UsedRatio             float64  `json:"used_ratio"`
	Files                 uint64   `json:"files"`
	FilesFree             uint64   `json:"files_free"`
	GrowthBytesPerSecond  float64  `json:"growth_bytes_per_second"`
	PredictedFullSeconds  *float64 `json:"predicted_full_seconds"`
	ReclaimThresholdBytes uint64   `json:"reclaim_threshold_bytes"`
	ReclaimThresholdWhy   string   `json:"reclaim_threshold_reason,omitempty"`
	ReplaceThresholdBytes uint64   `json:"replace_threshold_bytes"`
	ReclaimThresholdFiles uint64   `json:"reclaim_threshold_inodes"`
	ReplaceThresholdFiles uint64   `json:"replace_threshold_inodes"`
	ReserveBytes          uint64   `json:"reserve_bytes"`
	// ReserveReleasedBytes is the room of a reserve released and not re-armed yet: it is
	// in avail_bytes but it is not the workload's (CONTRACT §13), so the verdict
	// (Filesystem.Judge), a launch's fit and the reclaim thresholds are judged on
	// avail_bytes minus it (v1.2).
	ReserveReleasedBytes uint64 `json:"reserve_released_bytes,omitempty"`
	// Verdict is the filesystem's one verdict (ok, low, replace; Filesystem.Judge),
	// filled in with every sample; ReplaceMark is why reclaim holds it at replace although
	// the figures are above replace_below* (empty when it does not).
	Verdict     string `json:"verdict,omitempty"`
	ReplaceMark string `json:"replace_mark,omitempty"`
	SizeSetting string `json:"size_setting,omitempty"` // [[filesystem]] size_setting: what sizes this disk
	Stale       bool   `json:"stale"`
	Error       string `json:"error,omitempty"`
	// Errno names the errno of the failed statfs ("ENOTCONN") and ErrorSince when the
	// failures began (the first failed sample of the run of failures); both are empty
	// while statfs answers. SampledAt stays the time of the last good sample.
	Errno      string     `json:"errno,omitempty"`
	ErrorSince *time.Time `json:"error_since,omitempty"`
	SampledAt  time.Time  `json:"sampled_at"`

	// GrowthWindow is the window growth_bytes_per_second (and so predicted_full_seconds)
	// was measured over: the fastest whose trend is significant; "0s" when not filling (v1.2).
	GrowthWindow Duration `json:"growth_window"`
}

// Site is one write site (a launcher's temp dir) as status shows it.
type Site struct {
	Name             string     `json:"name"`
	Path             string     `json:"path"`
	Files            int64      `json:"files"`
	Bytes            int64      `json:"bytes"`
	Jobs             int64      `json:"jobs"`
	RunningJobs      int64      `json:"running_jobs"`
	OldestAgeSeconds float64    `json:"oldest_age_seconds"`
	MaxAgeSeconds    float64    `json:"max_age_seconds"`
	PendingPrune     int64      `json:"pending_prune"`
	PrunedTotal      int64      `json:"pruned_total"`
	LastPruneAt      *time.Time `json:"last_prune_at"`
	Problem          *string    `json:"problem"`
}

// Mount states (CONTRACT §4).
const (
	MountHealthy      = "healthy"
	MountDenied       = "denied"
	MountHung         = "hung"
	MountDisconnected = "disconnected"
	MountMissing      = "missing"
	MountRemounting   = "remounting"
)

// Link is a symlink into a mount that sandboxd keeps in place.
type Link struct {
	Path   string `json:"path"`
	Target string `json:"target"`
	State  string `json:"state,omitempty"`
}

// Mount is one watched FUSE mount.
type Mount struct {
	Name                string     `json:"name"`
	Path                string     `json:"path"`
	FSType              string     `json:"fstype"`
	Source              string     `json:"source"`
	Required            bool       `json:"required"`
	State               string     `json:"state"`
	Errno               string     `json:"errno"`
	Since               time.Time  `json:"since"`
	LastProbeAt         *time.Time `json:"last_probe_at"`
	LastProbeSeconds    float64    `json:"last_probe_seconds"`
	RemountsTotal       int64      `json:"remounts_total"`
	CredentialExpiresAt *time.Time `json:"credential_expires_at"`
	// CredentialError is why the credential file could not be read at the last try, or
	// why the last refresh failed; empty when the last read or refresh succeeded.
	CredentialError string `json:"credential_error,omitempty"`
	Links           []Link `json:"links"`
	// Registered is true for a mount registered at run time (POST /v1/mounts), false for
	// one of the config file; Job is the job it is tied to (v1.1).
	Registered bool   `json:"registered"`
	Job        string `json:"job,omitempty"`
	// RegisteredBy is the peer that registered it, whose rights its commands, probes and
	// links act with (api/mounts.go).
	RegisteredBy *Registrant `json:"registered_by,omitempty"`
	// Recovery is what sandboxd does when the mount fails (issue 23): "remount_unit" or
	// "remount_command" (a hung connection is aborted, then the mount remounted), or
	// "wait" (no remount is configured: nothing is aborted, the mount is probed until it
	// answers again, so a backend that comes back heals it by itself). "refresh, then" is
	// prefixed when a refresh_command is tried first on a denial.
	Recovery string `json:"recovery"`
}

// Condition types (CONTRACT §4).
const (
	CondDiskPressure       = "DiskPressure"
	CondInodePressure      = "InodePressure"
	CondDiskFillingUp      = "DiskFillingUp"
	CondReplaceRecommended = "ReplaceRecommended"
	CondMountUnavailable   = "MountUnavailable"
	CondSiteProblem        = "SiteProblem"
	CondReserveReleased    = "ReserveReleased"
	// CondBootedFull: `sandboxd boot` found the filesystem full and released its reserve
	// to boot (recovery mode); kept until free space is back above the reclaim threshold.
	CondBootedFull = "BootedFull"
	CondJobOverdue = "JobOverdue"
	// CondFilesystemUnavailable: a watched filesystem's statfs fails (reason
	// StatfsFailed, with the errno) or does not answer within statfs_timeout (reason
	// StatfsHung, the filesystem is stale). Critical: no verdict about its space exists.
	CondFilesystemUnavailable = "FilesystemUnavailable"
	// CondStateNotPersistent (subject: the state dir) is true while the state directory
	// refuses writes: cooldowns, run counts and first-seen pids live in memory only.
	CondStateNotPersistent = "StateNotPersistent"
	// CondCacheThrashing (subject: the cache's name, warning) is true while a cache got
	// back at least half of what each of its last 3 prunes freed within an hour: it is
	// load-bearing, reclaim takes it last (CONTRACT §14, issue 28).
	CondCacheThrashing = "CacheThrashing"
	// CondJobRegistryHeld (subject: [jobs] registry_dir) is true while another sandboxd
	// holds the job registry: the one before this one, still stopping after a handover
	// (reason Waiting, warning), or still after [jobs]'s wait of 30 s (reason Stuck,
	// critical). Job calls are refused (503 state_unavailable) until it is free; the
	// registry is taken as soon as it is.
	CondJobRegistryHeld = "JobRegistryHeld"
)

// Condition is one health condition about one subject.
type Condition struct {
	Type    string    `json:"type"`
	Subject string    `json:"subject"`
	Status  bool      `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
	// Severity is "warning" or "critical"; it decides /v1/health's status.
	Severity string `json:"severity,omitempty"`
}

// Action kinds and statuses of a reclaim.
const (
	ActionPruneSite      = "prune_site"
	ActionCommand        = "command"
	ActionDelete         = "delete"
	ActionReleaseReserve = "release_reserve"

	ActionDone     = "done"
	ActionPlanned  = "planned"
	ActionSkipped  = "skipped"
	ActionFailed   = "failed"
	ActionObserved = "observed"
)

// Action is one step of a reclaim.
type Action struct {
	Source     string `json:"source"`
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	FreedBytes int64  `json:"freed_bytes"`
	FreedFiles int64  `json:"freed_files"`
	Status     string `json:"status"`
	Error      string `json:"error"`
}

// Event is one entry of the audit trail (GET /v1/events).
type Event struct {
	Seq     uint64         `json:"seq"`
	Time    time.Time      `json:"time"`
	Kind    string         `json:"kind"`
	Subject string         `json:"subject"`
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
}

// Event kinds.
const (
	EventCondition  = "condition"
	EventPrune      = "prune"
	EventDelete     = "delete"
	EventCommand    = "command"
	EventKill       = "kill"
	EventRemount    = "remount"
	EventCredential = "credential_refresh"
	EventReserve    = "reserve"
	EventRefusal    = "refusal"
	EventConfig     = "config"
	EventState      = "state"
	EventLifecycle  = "lifecycle"
	EventMountProbe = "mount_state"
	EventReclaimRun = "reclaim"
	EventLinkRepair = "link"
	EventMountAbort = "abort"
	EventMountGuard = "guard"
)

// StateInfo says where the daemon keeps its state and whether it could write it.
type StateInfo struct {
	Dir        string `json:"dir"`
	Persistent bool   `json:"persistent"`
	Error      string `json:"error,omitempty"`
}

// Status is the body of GET /v1/status.
type Status struct {
	APIVersion  int          `json:"api_version"`
	Features    []string     `json:"features"`
	Mode        string       `json:"mode"`
	Offline     bool         `json:"offline"` // [reclaim] offline: caches only a download refills are kept at rung 2
	Version     string       `json:"version"`
	StartedAt   time.Time    `json:"started_at"`
	Ready       bool         `json:"ready"`
	Filesystems []Filesystem `json:"filesystems"`
	Sites       []Site       `json:"sites"`
	Mounts      []Mount      `json:"mounts"`
	OtherMounts []Mount      `json:"other_fuse_mounts"`
	Jobs        *JobsSummary `json:"jobs"`
	Caches      []CacheRoot  `json:"caches"`
	Reclaim     *ReclaimRun  `json:"reclaim"`
	Conditions  []Condition  `json:"conditions"`
	State       StateInfo    `json:"state"`
	Warnings    []string     `json:"warnings,omitempty"`
}

// Health statuses.
const (
	HealthOK       = "ok"
	HealthWarning  = "warning"
	HealthCritical = "critical"
)

// Health is the body of GET /v1/health.
type Health struct {
	Status     string      `json:"status"`
	Conditions []Condition `json:"conditions"`
	Summary    string      `json:"summary"`
}

// Livez is the body of /livez and /readyz.
type Livez struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// EventsPage is the body of GET /v1/events.
type EventsPage struct {
	Events []Event `json:"events"`
	// Next is the sequence number to pass as since= to get only newer events.
	Next uint64 `json:"next"`
	// Dropped is true when events between since and the oldest kept one were lost.
	Dropped bool `json:"dropped"`
}

// LaunchRequest is the body of POST /v1/launch (CONTRACT §5). Nil fields take defaults.
type LaunchRequest struct {
	Site       string    `json:"site,omitempty"`
	NeedBytes  *Size     `json:"need_bytes,omitempty"`
	NeedInodes *uint64   `json:"need_inodes,omitempty"`
	Mounts     []string  `json:"mounts,omitempty"`
	Deadline   *Duration `json:"deadline,omitempty"`
	// Job is the caller's own job the launch is for (issue 21): the required mounts tied
	// to that job gate it as if named in Mounts. A writer's required mount gates only the
	// launches that name it or its job, never every launch on the host.
	Job string `json:"job,omitempty"`
}

// LaunchResponse is the 200 answer of POST /v1/launch.
type LaunchResponse struct {
	OK         bool        `json:"ok"`
	Site       *Site       `json:"site"`
	Pruned     int64       `json:"pruned"`
	PrunedJobs []string    `json:"pruned_jobs"`
	FreedBytes int64       `json:"freed_bytes"`
	Filesystem *Filesystem `json:"filesystem"`
	Mounts     []Mount     `json:"mounts"`
	Advice     *string     `json:"advice"`
	// Verdict is the site filesystem's one verdict after the call (ok, low, replace:
	// api.Filesystem.Judge); advice is "replace" exactly when it is replace.
	Verdict  string   `json:"verdict,omitempty"`
	Detail   string   `json:"detail,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// ResumeRequest is the body of POST /v1/resume.
type ResumeRequest struct {
	Deadline *Duration `json:"deadline,omitempty"`
}

// Verdicts of a resume.
const (
	VerdictHealthy   = "healthy"
	VerdictReclaimed = "reclaimed"
	VerdictReplace   = "replace"
	// VerdictLow: after reclaim still short of what the run was for (a reclaim threshold,
	// the call's need, target_free) but above every replace_below* threshold: the command
	// may run; reclaim found too little to free. "reclaimed" would say it was fixed.
	VerdictLow = "low"
)

// Usage is one of the largest directories of a filesystem.
type Usage struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Files int64  `json:"files"`
}

// ReclaimRun is the result of one run of the reclaim policy (resume, reclaim, launch).
type ReclaimRun struct {
	Trigger    string       `json:"trigger"`
	Verdict    string       `json:"verdict"`
	DryRun     bool         `json:"dry_run"`
	Cached     bool         `json:"cached"`
	StartedAt  time.Time    `json:"started_at"`
	FinishedAt time.Time    `json:"finished_at"`
	Before     []Filesystem `json:"before"`
	After      []Filesystem `json:"after"`
	// Projected are the figures a dry run or an observe-mode run would leave (its after
	// and freed figures are what is on disk: nothing was changed).
	Projected  []Filesystem `json:"projected,omitempty"`
	FreedBytes int64        `json:"freed_bytes"`
	FreedFiles int64        `json:"freed_files"`
	Actions    []Action     `json:"actions"`
	Detail     string       `json:"detail"`
	Usage      []Usage      `json:"usage,omitempty"`
	Warnings   []string     `json:"warnings,omitempty"`
	// Unmeasured are the watched filesystems the run could not measure (their statfs
	// failed): the verdict is about the measured ones only, and the detail names these.
	Unmeasured []Filesystem `json:"unmeasured,omitempty"`
}

// ReclaimRequest is the body of POST /v1/reclaim.
type ReclaimRequest struct {
	DryRun         bool  `json:"dry_run,omitempty"`
	TargetFree     *Size `json:"target_free,omitempty"`
	ReleaseReserve bool  `json:"release_reserve,omitempty"`
	// Reason says what the room of a released reserve is for ("download the work"):
	// recorded with the release in the ReserveReleased condition and the event (v1.2).
	Reason   string    `json:"reason,omitempty"`
	Deadline *Duration `json:"deadline,omitempty"`
}

// CacheRoot is a declared or discovered cache root that reclaim may draw on.
type CacheRoot struct {
	Name           string     `json:"name"`
	Kind           string     `json:"kind"`
	Path           string     `json:"path"`
	Declared       bool       `json:"declared"`
	OwnerUID       uint32     `json:"owner_uid"`
	Ladder         string     `json:"ladder"`
	Order          int        `json:"order"`
	EstimatedBytes int64      `json:"estimated_bytes"`
	EstimatedFiles int64      `json:"estimated_files"`
	Partial        bool       `json:"partial,omitempty"`
	SizedAt        *time.Time `json:"sized_at"`
	Problem        string     `json:"problem,omitempty"`
}
