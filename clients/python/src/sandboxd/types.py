"""The daemon's answers as TypedDicts: one per schema of docs/openapi.yaml (JobInfo is its
Job, ProblemDocument its Problem), with the daemon's field names. A test
(daemon/openapi_clients_test.go) checks every class here against the document, field for
field, so the two cannot drift. At run time they are plain dicts."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, TypedDict, Union

# --- generated from docs/openapi.yaml by daemon/openapi_clients_test.go (-update) ---


class Action(TypedDict, total=False):
    error: str
    freed_bytes: int
    freed_files: int
    kind: Literal["prune_site", "command", "delete", "release_reserve"]
    path: str
    source: str
    status: Literal["done", "planned", "skipped", "failed", "observed"]


class CacheRoot(TypedDict, total=False):
    declared: bool
    estimated_bytes: int
    estimated_files: int
    kind: str
    ladder: Literal["gc", "entries", "all"]
    name: str
    order: int
    owner_uid: int
    partial: bool
    path: str
    problem: str
    sized_at: Union[str, None]


class Condition(TypedDict, total=False):
    message: str
    reason: str
    severity: Literal["warning", "critical"]
    since: str
    status: bool
    subject: str
    type: Literal["DiskPressure", "InodePressure", "DiskFillingUp", "ReplaceRecommended", "MountUnavailable", "SiteProblem", "ReserveReleased", "JobOverdue", "FilesystemUnavailable", "StateNotPersistent", "CacheThrashing", "BootedFull", "JobRegistryHeld"]


class Event(TypedDict, total=False):
    fields: Dict[str, Any]
    kind: str
    message: str
    seq: int
    subject: str
    time: str


class EventsPage(TypedDict, total=False):
    dropped: bool
    events: List["Event"]
    next: int


class Filesystem(TypedDict, total=False):
    avail_bytes: int
    device: str
    devno: str
    errno: str
    error: str
    error_since: str
    files: int
    files_free: int
    free_bytes: int
    fstype: str
    growth_bytes_per_second: float
    growth_window: str
    mountpoint: str
    path: str
    predicted_full_seconds: Union[float, None]
    reclaim_threshold_bytes: int
    reclaim_threshold_inodes: int
    reclaim_threshold_reason: str
    replace_mark: str
    replace_threshold_bytes: int
    replace_threshold_inodes: int
    reserve_bytes: int
    reserve_released_bytes: int
    sampled_at: str
    size_bytes: int
    size_setting: str
    stale: bool
    used_ratio: float
    verdict: Literal["ok", "low", "replace"]


class Health(TypedDict, total=False):
    conditions: List["Condition"]
    status: Literal["ok", "warning", "critical"]
    summary: str


class JobInfo(TypedDict, total=False):
    cgroup: str
    deadline_at: str
    ended_at: Union[str, None]
    grace_seconds: float
    heartbeats: int
    id: str
    labels: Dict[str, str]
    launch: "LaunchResponse"
    lease: str
    lease_expires_at: str
    owner: Dict[str, Any]
    pid: int
    processes: Union[int, None]
    reason: Literal["lease_expired", "max_lifetime", "deleted", "exited", ""]
    site: str
    started_at: str
    state: Literal["running", "ending", "ended", "killed", "leaked"]
    ttl_seconds: float
    warnings: List[str]


class JobList(TypedDict, total=False):
    available: bool
    cgroup_root: str
    jobs: List["JobInfo"]
    next: str
    reason: str


class LaunchResponse(TypedDict, total=False):
    advice: Union[Literal["replace"], None]
    detail: str
    filesystem: "Filesystem"
    freed_bytes: int
    mounts: List["Mount"]
    ok: bool
    pruned: int
    pruned_jobs: List[str]
    site: Union["Site", None]
    verdict: Literal["ok", "low", "replace"]
    warnings: List[str]


class Leak(TypedDict, total=False):
    age_seconds: float
    cgroup: str
    cleaned: bool
    detail: str
    error: str
    job: str
    kind: Literal["registered", "unleased", "unknown_cgroup", "escaped"]
    pid: int
    processes: int
    site: str


class LeaksReport(TypedDict, total=False):
    checked_at: str
    cleaned: bool
    leaks: List["Leak"]


class Lease(TypedDict, total=False):
    heartbeats: int
    jobs: List[str]
    lease_expires_at: str
    name: str
    owner: Dict[str, Any]
    running: int
    ttl_seconds: float
    warnings: List[str]


class Link(TypedDict, total=False):
    path: str
    state: str
    target: str


class Livez(TypedDict, total=False):
    reason: str
    status: str


class Mount(TypedDict, total=False):
    credential_error: str
    credential_expires_at: Union[str, None]
    errno: str
    fstype: str
    job: str
    last_probe_at: Union[str, None]
    last_probe_seconds: float
    links: List["Link"]
    name: str
    path: str
    recovery: str
    registered: bool
    registered_by: Dict[str, Any]
    remounts_total: int
    required: bool
    since: str
    source: str
    state: Literal["healthy", "denied", "hung", "disconnected", "missing", "remounting", ""]


class MountList(TypedDict, total=False):
    max_registered: int
    max_registered_per_uid: int
    mounts: List["Mount"]
    quarantined: List[Dict[str, Any]]
    registered: int


class MountRegistration(TypedDict, total=False):
    canary: bool
    credential_expires_at: str
    credential_file: str
    guard: bool
    job: str
    links: List[Dict[str, Any]]
    max_remounts_per_hour: int
    name: str
    path: str
    probe_interval: str
    probe_timeout: str
    refresh_at: float
    refresh_command: List[str]
    remount_command: List[str]
    remount_timeout: str
    remount_unit: str
    required: bool
    unmount: bool


class MountRelease(TypedDict, total=False):
    mount: "Mount"
    steps: List[Dict[str, Any]]
    unmounted: bool


class ProblemDocument(TypedDict, total=False):
    code: Literal["bad_request", "forbidden", "not_found", "method_not_allowed", "payload_too_large", "replace_sandbox", "disk_full", "inodes_exhausted", "mount_unavailable", "filesystem_unavailable", "busy", "conflict", "jobs_unavailable", "state_unavailable", "internal"]
    detail: str
    filesystem: "Filesystem"
    mounts: List["Mount"]
    retry_after_seconds: int
    status: int
    title: str
    type: str
    warnings: List[str]


class ReclaimRun(TypedDict, total=False):
    actions: List["Action"]
    after: List["Filesystem"]
    before: List["Filesystem"]
    cached: bool
    detail: str
    dry_run: bool
    finished_at: str
    freed_bytes: int
    freed_files: int
    projected: List["Filesystem"]
    started_at: str
    trigger: Literal["launch", "resume", "startup", "pressure", "manual"]
    unmeasured: List["Filesystem"]
    usage: List["Usage"]
    verdict: Literal["healthy", "reclaimed", "low", "replace"]
    warnings: List[str]


class Site(TypedDict, total=False):
    bytes: int
    files: int
    jobs: int
    last_prune_at: Union[str, None]
    max_age_seconds: float
    name: str
    oldest_age_seconds: float
    path: str
    pending_prune: int
    problem: Union[str, None]
    pruned_total: int
    running_jobs: int


class StateInfo(TypedDict, total=False):
    dir: str
    error: str
    persistent: bool


class Status(TypedDict, total=False):
    api_version: int
    caches: Union[List["CacheRoot"], None]
    conditions: List["Condition"]
    features: List[str]
    filesystems: List["Filesystem"]
    jobs: Dict[str, Any]
    mode: Literal["enforce", "observe"]
    mounts: List["Mount"]
    offline: bool
    other_fuse_mounts: Union[List["Mount"], None]
    ready: bool
    reclaim: Union["ReclaimRun", None]
    sites: List["Site"]
    started_at: str
    state: "StateInfo"
    version: str
    warnings: List[str]


class Usage(TypedDict, total=False):
    bytes: int
    files: int
    path: str
