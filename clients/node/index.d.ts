// Types of the sandboxd Node.js client (index.js). The wire objects below carry the
// daemon's field names (snake_case) and are checked against docs/openapi.yaml by a test
// (daemon/openapi_clients_test.go): a schema field missing here, or a field here the
// document does not have, fails it.

/// <reference types="node" />
import type { ChildProcess, SpawnOptions, StdioOptions } from 'node:child_process';

export declare const DEFAULT_SOCKET: string;
export declare const SOCKET_ENV: 'SANDBOXD_SOCKET';

/** A Go duration string ("3m", "500ms") or a number of milliseconds. */
export type Duration = string | number;
/** Bytes, or a size string such as "1.5GiB". */
export type Size = number | string;

export type Code =
  | 'bad_request' | 'forbidden' | 'not_found' | 'method_not_allowed' | 'payload_too_large'
  | 'conflict' | 'replace_sandbox' | 'disk_full' | 'inodes_exhausted' | 'mount_unavailable'
  | 'filesystem_unavailable' | 'state_unavailable' | 'busy' | 'jobs_unavailable' | 'internal';

/** code -> [HTTP status, exit status of the sandboxd CLI]. */
export declare const CODES: Readonly<Record<Code, readonly [number, number]>>;

/** Milliseconds of a Go duration string or of a number of ms. */
export declare function parseDuration(d: Duration): number;

/** A refusal or failure answered as application/problem+json (RFC 9457). */
export declare class Problem extends Error {
  constructor(doc: ProblemDocument, status?: number, retryAfter?: number | null);
  readonly code: Code | string;
  readonly status: number;
  readonly title: string;
  /** The failure's fingerprint: filesystem, free bytes and inodes, what reclaim freed, the threshold and its key. */
  readonly detail: string;
  /** The sandboxd CLI's exit status for this code. */
  readonly exitCode: number;
  /** The whole problem document. */
  readonly doc: ProblemDocument;
  /** Retry-After of a busy answer, in seconds. */
  readonly retryAfter: number | null;
  /** The filesystem object of a space refusal. */
  readonly filesystem: Filesystem | null;
}
/** bad_request, method_not_allowed, payload_too_large. */
export declare class InvalidRequest extends Problem {}
export declare class Forbidden extends Problem {}
export declare class NotFound extends Problem {}
export declare class Conflict extends Problem {}
/** disk_full, inodes_exhausted, replace_sandbox. */
export declare class OutOfSpace extends Problem {}
/** mount_unavailable, filesystem_unavailable, state_unavailable, busy, jobs_unavailable. */
export declare class Unavailable extends Problem {}
export declare class Internal extends Problem {}

/** The daemon could not be reached: no verdict. */
export declare class Unreachable extends Error {
  readonly socket: string;
  readonly reason: string;
}

/** A heartbeat of a started job failed. */
export declare class HeartbeatFailed extends Error {
  readonly jobId: string;
  readonly cause: unknown;
}

export interface ClientOptions {
  /** Default: $SANDBOXD_SOCKET, then /run/sandboxd/sandboxd.sock. */
  socket?: string;
  /** Per-call limit in ms (30 000); calls with a deadline of their own get longer. */
  timeout?: number;
}

export interface LaunchOptions {
  site?: string;
  needBytes?: Size;
  needInodes?: number;
  mounts?: string[];
  deadline?: Duration;
  /** Your job the command is for: the required mounts tied to it gate the launch too. */
  job?: string;
}

export interface StartOptions extends Omit<SpawnOptions, 'stdio' | 'shell'> {
  /** The lease: without a heartbeat within it the daemon ends the job. */
  ttl?: Duration;
  /** How often the lease is renewed (default a third of ttl). */
  heartbeat?: Duration;
  site?: string;
  /** A shared lease name (renewed and ended together, POST /v1/leases/{name}/...). */
  lease?: string;
  /** Mounts the command needs healthy (the launch check). */
  mounts?: string[];
  id?: string;
  maxLifetime?: Duration;
  grace?: Duration;
  labels?: Record<string, string>;
  needBytes?: Size;
  needInodes?: number;
  /** Called at once with each failed heartbeat (the first is also thrown by end()). */
  onHeartbeatError?: (err: HeartbeatFailed) => void;
  /** stdin, stdout, stderr of the command (default "inherit"). */
  stdio?: 'inherit' | 'ignore' | 'pipe' | [StdioOptions, StdioOptions, StdioOptions] | any[];
}

export interface MountRegistrationOptions extends Omit<MountRegistration, 'credential_expires_at'> {
  credential_expires_at?: string | Date;
}

export declare class Client {
  constructor(opts?: ClientOptions);
  readonly socket: string;
  readonly timeout: number;
  close(): void;
  request<T = unknown>(method: string, path: string, body?: unknown, opts?: { timeout?: number; acceptUnavailable?: boolean }): Promise<T>;
  livez(): Promise<Livez>;
  status(): Promise<Status>;
  /** A critical sandbox's 503 is returned (status "critical"), not thrown. */
  health(): Promise<Health>;
  events(since?: number): Promise<EventsPage>;
  launch(opts?: LaunchOptions): Promise<LaunchResponse>;
  resume(opts?: { deadline?: Duration; [field: string]: unknown }): Promise<ReclaimRun>;
  reclaim(opts?: { dryRun?: boolean; targetFree?: Size; [field: string]: unknown }): Promise<ReclaimRun>;
  registerJob(req: { pid: number; id?: string; ttl?: Duration; site?: string; lease?: string; maxLifetime?: Duration; grace?: Duration; labels?: Record<string, string> }): Promise<JobInfo>;
  /** owner: whose job, a uid (ids are each owner's own); left out, the caller's own, else the only one of that id. */
  heartbeat(id: string, opts?: { extend?: Duration; owner?: number }): Promise<JobInfo>;
  endJob(id: string, opts?: { wait?: boolean; timeout?: number; owner?: number }): Promise<JobInfo>;
  job(id: string, opts?: { owner?: number }): Promise<JobInfo>;
  /** owner: only that uid's jobs. */
  jobs(opts?: { owner?: number }): Promise<JobList>;
  /** GET /v1/leases; owner: only that uid's leases. */
  leases(opts?: { owner?: number }): Promise<{ leases: Lease[] }>;
  /** owner: whose lease, a uid (names are each owner's own). */
  heartbeatLease(name: string, opts?: { extend?: Duration; owner?: number }): Promise<Lease>;
  endLease(name: string, opts?: { wait?: boolean; timeout?: number; owner?: number }): Promise<Lease>;
  leaks(opts?: { clean?: boolean }): Promise<LeaksReport>;
  mounts(): Promise<MountList>;
  mount(name: string): Promise<Mount>;
  addMount(req: MountRegistrationOptions): Promise<Mount>;
  pushCredentials(name: string, expiresAt: string | Date): Promise<Mount>;
  removeMount(name: string, opts?: { unmount?: boolean }): Promise<MountRelease>;
  /** Starts argv as a job under a heartbeated lease; end it with `await using` or try/finally job.end(). */
  start(argv: string[], opts?: StartOptions): Promise<Job>;
}

/** A command started as a sandboxd job (Client.start). */
export declare class Job {
  readonly client: Client;
  /** The job object answered at registration. */
  readonly info: JobInfo;
  readonly id: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** Resolves to the command's exit status (128+N for signal N). */
  readonly exited: Promise<number | null>;
  readonly heartbeats: number;
  readonly heartbeatError: HeartbeatFailed | null;
  readonly ended: JobInfo | null;
  stopHeartbeats(): Promise<void>;
  /** Ends the job, resolves once its cgroup is empty; then throws a failed heartbeat, if any. */
  end(opts?: { wait?: boolean }): Promise<JobInfo>;
  /** job.end(): what `await using` calls when the scope is left. */
  [Symbol.asyncDispose](): Promise<void>;
}

// --- wire types: generated from docs/openapi.yaml by daemon/openapi_clients_test.go (-update);
// one interface per schema an answer carries (JobInfo is its Job, ProblemDocument its Problem) ---

export interface Action {
  error?: string;
  freed_bytes?: number;
  freed_files?: number;
  kind?: "prune_site" | "command" | "delete" | "release_reserve";
  path?: string;
  source?: string;
  status?: "done" | "planned" | "skipped" | "failed" | "observed";
}

export interface CacheRoot {
  declared?: boolean;
  estimated_bytes?: number;
  estimated_files?: number;
  kind?: string;
  ladder?: "gc" | "entries" | "all";
  name?: string;
  order?: number;
  owner_uid?: number;
  partial?: boolean;
  path?: string;
  problem?: string;
  sized_at?: string | null;
}

export interface Condition {
  message?: string;
  reason?: string;
  severity?: "warning" | "critical";
  since?: string;
  status?: boolean;
  subject?: string;
  type?: "DiskPressure" | "InodePressure" | "DiskFillingUp" | "ReplaceRecommended" | "MountUnavailable" | "SiteProblem" | "ReserveReleased" | "JobOverdue" | "FilesystemUnavailable" | "StateNotPersistent" | "CacheThrashing" | "BootedFull" | "JobRegistryHeld";
}

export interface Event {
  fields?: Record<string, unknown>;
  kind?: string;
  message?: string;
  seq?: number;
  subject?: string;
  time?: string;
}

export interface EventsPage {
  dropped?: boolean;
  events?: Event[];
  next?: number;
}

export interface Filesystem {
  avail_bytes?: number;
  device?: string;
  devno?: string;
  errno?: string;
  error?: string;
  error_since?: string;
  files?: number;
  files_free?: number;
  free_bytes?: number;
  fstype?: string;
  growth_bytes_per_second?: number;
  growth_window?: string;
  mountpoint?: string;
  path?: string;
  predicted_full_seconds?: number | null;
  reclaim_threshold_bytes?: number;
  reclaim_threshold_inodes?: number;
  reclaim_threshold_reason?: string;
  replace_mark?: string;
  replace_threshold_bytes?: number;
  replace_threshold_inodes?: number;
  reserve_bytes?: number;
  reserve_released_bytes?: number;
  sampled_at?: string;
  size_bytes?: number;
  size_setting?: string;
  stale?: boolean;
  used_ratio?: number;
  verdict?: "ok" | "low" | "replace";
}

export interface Health {
  conditions?: Condition[];
  status?: "ok" | "warning" | "critical";
  summary?: string;
}

export interface JobInfo {
  cgroup?: string;
  deadline_at?: string;
  ended_at?: string | null;
  grace_seconds?: number;
  heartbeats?: number;
  id?: string;
  labels?: Record<string, string>;
  launch?: LaunchResponse;
  lease?: string;
  lease_expires_at?: string;
  owner?: { pidns?: string; uid?: number };
  pid?: number;
  processes?: number | null;
  reason?: "lease_expired" | "max_lifetime" | "deleted" | "exited" | "";
  site?: string;
  started_at?: string;
  state?: "running" | "ending" | "ended" | "killed" | "leaked";
  ttl_seconds?: number;
  warnings?: string[];
}

export interface JobList {
  available?: boolean;
  cgroup_root?: string;
  jobs?: JobInfo[];
  next?: string;
  reason?: string;
}

export interface LaunchResponse {
  advice?: "replace" | null;
  detail?: string;
  filesystem?: Filesystem;
  freed_bytes?: number;
  mounts?: Mount[];
  ok?: boolean;
  pruned?: number;
  pruned_jobs?: string[];
  site?: Site | null;
  verdict?: "ok" | "low" | "replace";
  warnings?: string[];
}

export interface Leak {
  age_seconds?: number;
  cgroup?: string;
  cleaned?: boolean;
  detail?: string;
  error?: string;
  job?: string;
  kind?: "registered" | "unleased" | "unknown_cgroup" | "escaped";
  pid?: number;
  processes?: number;
  site?: string;
}

export interface LeaksReport {
  checked_at?: string;
  cleaned?: boolean;
  leaks?: Leak[];
}

export interface Lease {
  heartbeats?: number;
  jobs?: string[];
  lease_expires_at?: string;
  name?: string;
  owner?: { pidns?: string; uid?: number };
  running?: number;
  ttl_seconds?: number;
  warnings?: string[];
}

export interface Link {
  path?: string;
  state?: string;
  target?: string;
}

export interface Livez {
  reason?: string;
  status: string;
}

export interface Mount {
  credential_error?: string;
  credential_expires_at?: string | null;
  errno?: string;
  fstype?: string;
  job?: string;
  last_probe_at?: string | null;
  last_probe_seconds?: number;
  links?: Link[];
  name?: string;
  path?: string;
  recovery?: string;
  registered?: boolean;
  registered_by?: { gid?: number; groups?: number[]; pidns?: string; uid?: number };
  remounts_total?: number;
  required?: boolean;
  since?: string;
  source?: string;
  state?: "healthy" | "denied" | "hung" | "disconnected" | "missing" | "remounting" | "";
}

export interface MountList {
  max_registered?: number;
  max_registered_per_uid?: number;
  mounts?: Mount[];
  quarantined?: { job?: string; name?: string; path?: string; quarantined_at?: string; reason?: string; registered_by?: { gid?: number; groups?: number[]; uid?: number } }[];
  registered?: number;
}

export interface MountRegistration {
  canary?: boolean;
  credential_expires_at?: string;
  credential_file?: string;
  guard?: boolean;
  job?: string;
  links?: { path?: string; target?: string }[];
  max_remounts_per_hour?: number;
  name: string;
  path: string;
  probe_interval?: string;
  probe_timeout?: string;
  refresh_at?: number;
  refresh_command?: string[];
  remount_command?: string[];
  remount_timeout?: string;
  remount_unit?: string;
  required?: boolean;
  unmount?: boolean;
}

export interface MountRelease {
  mount?: Mount;
  steps?: { detail?: string; result?: "done" | "failed" | "skipped" | "observed"; step?: "wait" | "links" | "abort" | "sync" | "umount" | "fusermount3" | "umount_lazy" | "guard" }[];
  unmounted?: boolean;
}

export interface ProblemDocument {
  code: Code;
  detail: string;
  filesystem?: Filesystem;
  mounts?: Mount[];
  retry_after_seconds?: number;
  status: number;
  title: string;
  type: string;
  warnings?: string[];
}

export interface ReclaimRun {
  actions?: Action[];
  after?: Filesystem[];
  before?: Filesystem[];
  cached?: boolean;
  detail?: string;
  dry_run?: boolean;
  finished_at?: string;
  freed_bytes?: number;
  freed_files?: number;
  projected?: Filesystem[];
  started_at?: string;
  trigger?: "launch" | "resume" | "startup" | "pressure" | "manual";
  unmeasured?: Filesystem[];
  usage?: Usage[];
  verdict?: "healthy" | "reclaimed" | "low" | "replace";
  warnings?: string[];
}

export interface Site {
  bytes?: number;
  files?: number;
  jobs?: number;
  last_prune_at?: string | null;
  max_age_seconds?: number;
  name?: string;
  oldest_age_seconds?: number;
  path?: string;
  pending_prune?: number;
  problem?: string | null;
  pruned_total?: number;
  running_jobs?: number;
}

export interface StateInfo {
  dir?: string;
  error?: string;
  persistent?: boolean;
}

export interface Status {
  api_version?: number;
  caches?: CacheRoot[] | null;
  conditions?: Condition[];
  features?: string[];
  filesystems?: Filesystem[];
  jobs?: { available?: boolean; cgroup_root?: string; ended?: number; ending?: number; leaked?: number; next_lapse?: string; next_lapse_at?: string; oldest?: string; oldest_started_at?: string; reason?: string; registry?: { dir?: string; error?: string; journal_bytes?: number; written_bytes?: number }; running?: number };
  mode?: "enforce" | "observe";
  mounts?: Mount[];
  offline?: boolean;
  other_fuse_mounts?: Mount[] | null;
  ready?: boolean;
  reclaim?: ReclaimRun | null;
  sites?: Site[];
  started_at?: string;
  state?: StateInfo;
  version?: string;
  warnings?: string[];
}

export interface Usage {
  bytes?: number;
  files?: number;
  path?: string;
}
