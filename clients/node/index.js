// sandboxd: the runner client for sandboxd's Unix-socket API. ESM, no runtime dependency:
// node:http with socketPath. Types are in index.d.ts.

import http from 'node:http';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const DEFAULT_SOCKET = '/run/sandboxd/sandboxd.sock';
export const SOCKET_ENV = 'SANDBOXD_SOCKET';
const PROBLEM_TYPE = 'application/problem+json';

// Node ≥ 20.4 and ≥ 18.18 define Symbol.asyncDispose; older ones get the registered symbol
// that TypeScript's downlevelled `await using` also falls back to.
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose');

/** code -> [HTTP status, exit status of the sandboxd CLI] (CONTRACT §3, api/errors.go). */
export const CODES = Object.freeze({
  bad_request: [400, 64],
  forbidden: [403, 77],
  not_found: [404, 78],
  method_not_allowed: [405, 64],
  payload_too_large: [413, 64],
  conflict: [409, 65],
  replace_sandbox: [507, 10],
  disk_full: [507, 73],
  inodes_exhausted: [507, 73],
  mount_unavailable: [503, 75],
  filesystem_unavailable: [503, 75],
  state_unavailable: [503, 75],
  busy: [503, 75],
  jobs_unavailable: [503, 69],
  internal: [500, 70],
});

/** A refusal or failure answered as application/problem+json (RFC 9457). */
export class Problem extends Error {
  constructor(doc, status, retryAfter = null) {
    const code = String(doc?.code || 'internal');
    const st = status ?? doc?.status ?? 500;
    super(`sandboxd: ${code} (${st}): ${doc?.detail ?? ''}`);
    this.name = new.target.name;
    this.doc = { ...doc };
    this.code = code;
    this.status = st;
    this.title = String(doc?.title || code.replaceAll('_', ' '));
    this.detail = String(doc?.detail ?? '');
    this.exitCode = CODES[code]?.[1] ?? 70;
    this.retryAfter = retryAfter;
  }

  /** The filesystem object of a space refusal (disk_full, inodes_exhausted, replace_sandbox). */
  get filesystem() {
    return this.doc.filesystem ?? null;
  }
}
/** bad_request, method_not_allowed, payload_too_large: the call itself is wrong. */
export class InvalidRequest extends Problem {}
/** forbidden: this peer may not make a mutating call. */
export class Forbidden extends Problem {}
/** not_found: no such route, site, mount or job. */
export class NotFound extends Problem {}
/** conflict: the job id or mount name is registered and alive. */
export class Conflict extends Problem {}
/** disk_full, inodes_exhausted, replace_sandbox: the call's needs do not fit. */
export class OutOfSpace extends Problem {}
/** mount_unavailable, filesystem_unavailable, state_unavailable, busy, jobs_unavailable. */
export class Unavailable extends Problem {}
/** internal: a bug in sandboxd. */
export class Internal extends Problem {}

const FAMILIES = {
  bad_request: InvalidRequest, method_not_allowed: InvalidRequest, payload_too_large: InvalidRequest,
  forbidden: Forbidden, not_found: NotFound, conflict: Conflict,
  replace_sandbox: OutOfSpace, disk_full: OutOfSpace, inodes_exhausted: OutOfSpace,
  mount_unavailable: Unavailable, filesystem_unavailable: Unavailable, state_unavailable: Unavailable,
  busy: Unavailable, jobs_unavailable: Unavailable, internal: Internal,
};

/** The daemon could not be reached: no verdict, which is not a refusal. */
export class Unreachable extends Error {
  constructor(socket, reason, cause) {
    super(`sandboxd is not reachable at ${socket}: ${reason}`, { cause });
    this.name = 'Unreachable';
    this.socket = socket;
    this.reason = reason;
  }
}

/** A heartbeat of a started job failed; never swallowed. */
export class HeartbeatFailed extends Error {
  constructor(jobId, cause) {
    super(`heartbeat of job ${jobId} failed: ${cause?.message ?? cause}`, { cause });
    this.name = 'HeartbeatFailed';
    this.jobId = jobId;
  }
}

function reason(err) {
  switch (err?.code) {
    case 'ENOENT': return 'no socket (is the daemon running?)';
    case 'ECONNREFUSED': return 'connection refused (the socket exists but no daemon is accepting on it)';
    case 'EACCES': case 'EPERM': return "permission denied on the socket (is this user in the socket's group?)";
    case 'ENOTSOCK': return 'not a socket';
    case 'ETIMEDOUT': return 'timed out';
    default: return err?.message || String(err);
  }
}

/** Go duration string of d: a string passes through, a number is milliseconds. */
function goDuration(d) {
  if (d === undefined || d === null) return undefined;
  if (typeof d === 'number') return `${Math.round(d)}ms`;
  parseDuration(d);
  return d;
}

const UNITS = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1e3, m: 6e4, h: 3.6e6 };

/** Milliseconds of a Go duration string ("3m", "1m30s", "500ms") or of a number of ms. */
export function parseDuration(d) {
  if (typeof d === 'number') return d;
  const s = String(d).trim();
  if (s === '0') return 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;
  let total = 0; let m;
  const body = s.replace(/^[+-]/, '');
  re.lastIndex = 0;
  while (re.lastIndex < body.length && (m = re.exec(body))) total += parseFloat(m[1]) * UNITS[m[2]];
  if (!body || re.lastIndex !== body.length) throw new TypeError(`invalid duration ${JSON.stringify(d)}: want a Go duration such as "3m" or "500ms"`);
  return s.startsWith('-') ? -total : total;
}

const dropUndefined = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null));
const q = encodeURIComponent;
/** The query of a job or lease call: "?wait=false", "?owner=UID", both, or "". */
function query({ wait = true, owner } = {}) {
  const parts = wait ? [] : ['wait=false'];
  if (owner !== undefined && owner !== null) {
    if (!Number.isInteger(owner) || owner < 0 || owner > 0xFFFFFFFF) throw new TypeError(`owner must be a uid (an integer from 0 to 4294967295), not ${JSON.stringify(owner)}`);
    parts.push(`owner=${owner}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}
const iso = (t) => (t instanceof Date ? t.toISOString() : t);

/** Calls one sandboxd daemon over its Unix socket. */
export class Client {
  /** @param {{socket?: string, timeout?: number}} [opts] socket: else $SANDBOXD_SOCKET, else the default path; timeout in ms (30 s). */
  constructor({ socket, timeout = 30_000 } = {}) {
    this.socket = socket || process.env[SOCKET_ENV] || DEFAULT_SOCKET;
    this.timeout = timeout;
    this.agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  }

  /** Closes the kept-alive connections. */
  close() {
    this.agent.destroy();
  }

  /** Any call: the decoded JSON answer of a 2xx, else a Problem. */
  request(method, path, body, { timeout, acceptUnavailable = false } = {}) {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers = { Accept: 'application/json' };
    if (data) Object.assign(headers, { 'Content-Type': 'application/json', 'Content-Length': data.length });
    const limit = timeout ?? this.timeout;
    return new Promise((resolve, reject) => {
      const req = http.request({ socketPath: this.socket, method, path, headers, agent: this.agent, host: 'sandboxd' }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', (e) => reject(new Unreachable(this.socket, reason(e), e)));
        res.on('end', () => {
          clearTimeout(timer);
          const raw = Buffer.concat(chunks).toString('utf8');
          const isProblem = (res.headers['content-type'] || '').split(';')[0].trim() === PROBLEM_TYPE;
          const ok = (res.statusCode >= 200 && res.statusCode < 300) || (acceptUnavailable && res.statusCode === 503 && !isProblem);
          if (ok) {
            try { resolve(raw ? JSON.parse(raw) : null); } catch (e) { reject(e); }
            return;
          }
          let doc = null;
          try { doc = JSON.parse(raw); } catch { /* not a problem document */ }
          if (!doc || typeof doc !== 'object' || !doc.code) {
            doc = { type: 'about:blank', status: res.statusCode, code: 'internal', title: 'internal error',
              detail: `unexpected answer ${res.statusCode} to ${method} ${path}: ${raw.slice(0, 200)}` };
          }
          const ra = res.headers['retry-after'];
          const Cls = FAMILIES[doc.code] ?? Problem;
          reject(new Cls(doc, res.statusCode, ra && /^\d+$/.test(ra) ? Number(ra) : null));
        });
      });
      const timer = setTimeout(() => req.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })), limit);
      req.on('error', (e) => { clearTimeout(timer); reject(new Unreachable(this.socket, reason(e), e)); });
      req.end(data);
    });
  }

  livez() { return this.request('GET', '/livez'); }
  status() { return this.request('GET', '/v1/status'); }
  /** GET /v1/health; a critical sandbox's 503 is returned with status "critical", not thrown. */
  health() { return this.request('GET', '/v1/health', undefined, { acceptUnavailable: true }); }
  events(since = 0) { return this.request('GET', `/v1/events?since=${Number(since)}`); }

  /** POST /v1/launch: the write-site check before a command (throws OutOfSpace, ...). */
  launch({ site, needBytes, needInodes, mounts, deadline, job } = {}) {
    const body = dropUndefined({ site, need_bytes: needBytes, need_inodes: needInodes, mounts, deadline: goDuration(deadline), job });
    const d = deadline === undefined ? 2000 : parseDuration(deadline);
    return this.request('POST', '/v1/launch', body, { timeout: Math.max(this.timeout, d + 1000) });
  }

  resume({ deadline, ...fields } = {}) {
    const d = deadline === undefined ? 30_000 : parseDuration(deadline);
    return this.request('POST', '/v1/resume', dropUndefined({ deadline: goDuration(deadline), ...fields }), { timeout: Math.max(this.timeout, d + 1000) });
  }

  /** POST /v1/reclaim; a dry run (the default here) plans and changes nothing. */
  reclaim({ dryRun = true, targetFree, ...fields } = {}) {
    return this.request('POST', '/v1/reclaim', dropUndefined({ dry_run: dryRun, target_free: targetFree, ...fields }), { timeout: Math.max(this.timeout, 61_000) });
  }

  /** POST /v1/jobs: pid and what it forks from then on go into the job's cgroup. */
  registerJob({ pid, id, ttl, site, lease, maxLifetime, grace, labels }) {
    return this.request('POST', '/v1/jobs', dropUndefined({ id, pid, ttl: goDuration(ttl), site, lease,
      max_lifetime: goDuration(maxLifetime), grace: goDuration(grace), labels }));
  }

  /** POST /v1/jobs/{id}/heartbeat; owner: whose job (ids are each owner's own). */
  heartbeat(id, { extend, owner } = {}) {
    // No extend: no body (an empty POST is {}), the cheapest renewal there is.
    return this.request('POST', `/v1/jobs/${q(id)}/heartbeat${query({ owner })}`, extend === undefined ? undefined : { extend: goDuration(extend) });
  }

  /** DELETE /v1/jobs/{id}: SIGTERM, SIGKILL after its grace; with wait the answer comes once its cgroup is empty. */
  endJob(id, { wait = true, timeout, owner } = {}) {
    return this.request('DELETE', `/v1/jobs/${q(id)}${query({ wait, owner })}`, undefined, { timeout: timeout ?? Math.max(this.timeout, 120_000) });
  }

  /**
   * GET /v1/jobs/{id}. Ids are each owner's own: without owner the caller's own job of that
   * id, else the only one (Conflict when several uids hold it); {owner: UID} names whose.
   */
  job(id, { owner } = {}) { return this.request('GET', `/v1/jobs/${q(id)}${query({ owner })}`); }
  /** GET /v1/jobs; {owner: UID} lists only that uid's jobs. */
  jobs({ owner } = {}) { return this.request('GET', `/v1/jobs${query({ owner })}`); }

  /** GET /v1/leases: {leases: [...]}; {owner: UID} lists only that uid's leases. */
  leases({ owner } = {}) { return this.request('GET', `/v1/leases${query({ owner })}`); }

  /** POST /v1/leases/{name}/heartbeat: renew every job of the lease, one call; owner: whose lease. */
  heartbeatLease(name, { extend, owner } = {}) {
    return this.request('POST', `/v1/leases/${q(name)}/heartbeat${query({ owner })}`, extend === undefined ? undefined : { extend: goDuration(extend) });
  }

  /** DELETE /v1/leases/{name}: end every job of the lease; with wait the answer comes once every cgroup is empty. */
  endLease(name, { wait = true, timeout, owner } = {}) {
    return this.request('DELETE', `/v1/leases/${q(name)}${query({ wait, owner })}`, undefined, { timeout: timeout ?? Math.max(this.timeout, 120_000) });
  }

  /** GET /v1/jobs/leaks: the loud leak check. */
  leaks({ clean = false } = {}) {
    return this.request('GET', `/v1/jobs/leaks${clean ? '?clean=true' : ''}`, undefined, clean ? { timeout: Math.max(this.timeout, 300_000) } : {});
  }

  mounts() { return this.request('GET', '/v1/mounts'); }
  mount(name) { return this.request('GET', `/v1/mounts/${q(name)}`); }
  /** POST /v1/mounts: every key of a [[mount]] table (snake_case), plus job and credential_expires_at. */
  addMount({ name, path, ...fields }) {
    const body = { name, path };
    for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null) body[k] = iso(v);
    return this.request('POST', '/v1/mounts', body);
  }

  /** PUT /v1/mounts/{name}/credentials: the renewed credential's expiry. */
  pushCredentials(name, expiresAt) {
    return this.request('PUT', `/v1/mounts/${q(name)}/credentials`, { expires_at: iso(expiresAt) });
  }

  removeMount(name, { unmount } = {}) {
    const qs = unmount === undefined ? '' : `?unmount=${unmount ? 'true' : 'false'}`;
    return this.request('DELETE', `/v1/mounts/${q(name)}${qs}`, undefined, { timeout: Math.max(this.timeout, 125_000) });
  }

  /**
   * Starts argv as a job under a lease that a background timer renews: the launch check
   * (site, mounts, needBytes, needInodes), then argv is spawned behind a gate, its pid
   * registered as the job (so the lease covers the command, not this runner), and only
   * then let run. Resolves to a Job; `await using job = ...` or try/finally job.end().
   */
  async start(argv, opts = {}) {
    const { ttl, heartbeat, site, lease, mounts, id, maxLifetime, grace, labels, needBytes, needInodes,
      onHeartbeatError, stdio = 'inherit', ...spawnOpts } = opts;
    if (!Array.isArray(argv) || argv.length === 0) throw new TypeError('start: argv must be a non-empty array');
    if (spawnOpts.shell) throw new TypeError('start: shell is not supported; pass argv (or ["sh", "-c", ...])');
    const every = heartbeat === undefined ? undefined : parseDuration(heartbeat);
    if (every !== undefined && !(every > 0)) throw new TypeError('heartbeat must be longer than 0s');
    const envPath = (spawnOpts.env ?? process.env).PATH ?? '/usr/bin:/bin';
    if (!argv[0].includes('/') && !envPath.split(':').some((d) => isExecutable(path.join(d || '.', argv[0])))) {
      throw Object.assign(new Error(`start: ${JSON.stringify(argv[0])} is not on PATH`), { code: 'ENOENT' });
    }
    await this.launch({ site, mounts, needBytes, needInodes });
    const io = typeof stdio === 'string' ? [stdio, stdio, stdio] : [...stdio].slice(0, 3);
    // The gate: sh waits on fd 3 until the job is registered (its pid in the job's cgroup)
    // and only then execs the command in place, so nothing it forks escapes the cgroup. The
    // id it reads is exported as SANDBOXD_JOB_ID; a runner that dies first closes the pipe
    // and the gate exits 125 without running the command.
    const gate = 'IFS= read -r SANDBOXD_JOB_ID <&3 || exit 125; exec 3<&-; export SANDBOXD_JOB_ID; exec "$@"';
    const child = spawn('/bin/sh', ['-c', gate, 'sandboxd-job', ...argv], { ...spawnOpts, stdio: [...io, 'pipe'] });
    // The gate's end of fd 3 is a socket: once the command exits (or is killed) a read on
    // it may fail with ECONNRESET. Nothing is read from it and what matters is the
    // registration's outcome, so its errors are dropped here rather than thrown at the
    // runner as an uncaught exception.
    child.stdio[3].on('error', () => {});
    const exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + (osSignal(signal)) : null)));
      child.once('error', () => resolve(null));
    });
    const spawned = await new Promise((resolve) => {
      child.once('spawn', () => resolve(null));
      child.once('error', (e) => resolve(e));
    });
    if (spawned) throw spawned;
    let info;
    try {
      info = await this.registerJob({ pid: child.pid, id, ttl, site, lease, maxLifetime, grace, labels });
    } catch (e) {
      child.stdio[3].destroy(); // EOF at the gate: the command never runs
      await exited;
      throw e;
    }
    child.stdio[3].end(`${info.id}\n`, () => child.stdio[3].destroy());
    const ttlMs = info.ttl_seconds ? info.ttl_seconds * 1000 : (ttl !== undefined ? parseDuration(ttl) : 180_000);
    const job = new Job(this, info, child, exited, ttlMs);
    job._beat(every ?? ttlMs / 3, onHeartbeatError);
    return job;
  }
}

function isExecutable(p) {
  try { fs.accessSync(p, fs.constants.X_OK); return fs.statSync(p).isFile(); } catch { return false; }
}

const osSignal = (name) => os.constants.signals[name] ?? 0;

/** A command started as a sandboxd job (Client.start). */
export class Job {
  constructor(client, info, child, exited, ttlMs) {
    this.client = client;
    this.info = info;
    this.id = info.id;
    this.pid = child.pid;
    this.child = child;
    /** Resolves to the command's exit status (128+N for signal N) once it exits. */
    this.exited = exited;
    this.ttl = ttlMs;
    this.heartbeats = 0;
    this.heartbeatError = null;
    this.ended = null;
    this._timer = null;
    this._stopped = false;
    this._inflight = null;
  }

  _beat(every, onError) {
    // Node's timers run on libuv's monotonic clock: a wall-clock jump neither skips nor
    // bunches heartbeats. Unref'd: the heartbeat alone keeps no process alive.
    const tick = async () => {
      if (this._stopped) return;
      try {
        this._inflight = this.client.heartbeat(this.id);
        await this._inflight;
        this.heartbeats++;
      } catch (e) {
        if (this._stopped) return;
        if (e instanceof NotFound && await this._exitedByItself()) return;
        const err = new HeartbeatFailed(this.id, e);
        this.heartbeatError ??= err;
        if (onError) onError(err);
        if (e instanceof NotFound) return; // the job is gone: no heartbeat brings it back
      } finally {
        this._inflight = null;
      }
      if (!this._stopped) this._schedule(tick, every);
    };
    this._schedule(tick, every);
  }

  _schedule(fn, ms) {
    this._timer = setTimeout(fn, ms);
    this._timer.unref();
  }

  async _exitedByItself() {
    try { return (await this.client.job(this.id)).reason === 'exited'; } catch { return false; }
  }

  /** Stops the heartbeats (and waits for one in flight). */
  async stopHeartbeats() {
    this._stopped = true;
    clearTimeout(this._timer);
    if (this._inflight) await this._inflight.catch(() => {});
  }

  /**
   * Ends the job: stops the heartbeats, DELETEs it (SIGTERM, SIGKILL after its grace) and,
   * with wait, resolves once its cgroup is empty and the command reaped. Idempotent. Then,
   * if a heartbeat failed, throws it as HeartbeatFailed: never swallowed.
   */
  async end({ wait = true } = {}) {
    await this.stopHeartbeats();
    if (this.ended === null) {
      try {
        this.ended = await this.client.endJob(this.id, { wait });
      } catch (e) {
        if (!(e instanceof NotFound)) throw e;
        this.ended = { id: this.id, state: 'ended', reason: 'exited' };
      }
      if (wait) await this.exited;
    }
    if (this.heartbeatError) throw this.heartbeatError;
    return this.ended;
  }

  /** `await using job = await client.start(...)`: leaving the scope ends the job. */
  async [asyncDispose]() {
    await this.end();
  }
}
