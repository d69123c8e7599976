// A real sandboxd for the client tests: bin/sandboxd serve on a temp config and socket, its
// jobs under a cgroup of this test's own, its site on a small tmpfs. Everything it makes is
// removed when the test ends, also when it fails. Root-only: skipped with a reason when not
// root, except under CI=true, where skipping is a failure.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from '../index.js';

export const PKG = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
export const REPO = path.dirname(path.dirname(PKG));
let counter = 0;

/** Skips t (or fails it under CI=true) with why. Returns true when the test must stop. */
export function unavailable(t, why) {
  if (process.env.CI === 'true') throw new Error(`${why}; CI=true forbids skipping`);
  t.skip(why);
  return true;
}

export async function eventually(what, cond, timeout = 60_000) {
  const end = performance.now() + timeout;
  for (;;) {
    if (await cond()) return;
    if (performance.now() > end) throw new Error(`timed out after ${timeout / 1000}s waiting for ${what}`);
    await sleep(50);
  }
}

/** pid runs (a zombie does not). */
export function alive(pid) {
  let s;
  try { s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8'); } catch { return false; }
  const i = s.lastIndexOf(')');
  return i > 0 && s[i + 2] !== 'Z';
}

export async function readPid(file) {
  await eventually(`pid file ${file}`, () => { try { return /^\d+\s*$/.test(fs.readFileSync(file, 'utf8')); } catch { return false; } });
  return Number(fs.readFileSync(file, 'utf8'));
}

function cgroup2Mount() {
  let mount = null;
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [left, right] = line.split(' - ');
    if (right && right.split(' ')[0] === 'cgroup2') mount = left.split(' ')[4];
  }
  return mount;
}

async function removeCgroupTree(root) {
  const dirs = [];
  const walk = (d) => {
    let ents;
    try { ents = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
    dirs.push(d);
    try { fs.writeFileSync(path.join(d, 'cgroup.kill'), '1'); } catch { /* gone */ }
    for (const e of ents) if (e.isDirectory()) walk(path.join(d, e.name));
  };
  walk(root);
  for (const d of dirs.reverse()) {
    for (let i = 0; i < 200; i++) {
      try { fs.rmdirSync(d); break; } catch (e) { if (e.code === 'ENOENT') break; await sleep(20); }
    }
  }
  return !fs.existsSync(root);
}

/**
 * Starts a daemon for test t: site "s" on a tmpfs of size bytes. Returns null when the
 * test was skipped. Cleanup is registered with t.after.
 */
export async function startDaemon(t, { size = 16 << 20, jobs = 'grace = "500ms"\n', server = '' } = {}) {
  if (process.getuid() !== 0 && unavailable(t, 'needs root (cgroups, tmpfs)')) return null;
  const bin = process.env.SANDBOXD_BIN || path.join(REPO, 'bin', 'sandboxd');
  try { fs.accessSync(bin, fs.constants.X_OK); } catch {
    if (unavailable(t, `no sandboxd binary at ${bin}: run \`make build\` or set SANDBOXD_BIN`)) return null;
  }
  const cg = cgroup2Mount();
  if (!cg && unavailable(t, 'no cgroup2 mount')) return null;
  counter++;
  const cleanups = [];
  t.after(async () => {
    for (const f of cleanups.reverse()) await f();
  });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandboxd-node-'));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const cgroup = path.join(cg, `sandboxd-nodetest-${process.pid}-${counter}`);
  cleanups.push(async () => { if (!await removeCgroupTree(cgroup)) throw new Error(`cgroup ${cgroup} left behind`); });
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(mnt);
  const m = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0755`, 'tmpfs', mnt]);
  if (m.status !== 0) throw new Error(`mount tmpfs: ${m.stderr}`);
  cleanups.push(() => { if (spawnSync('umount', [mnt]).status !== 0) spawnSync('umount', ['-l', mnt]); });
  const site = path.join(mnt, 'site');
  fs.mkdirSync(site);
  const socket = path.join(dir, 's.sock');
  const cfg = path.join(dir, 'sandboxd.toml');
  fs.writeFileSync(cfg, `[server]
socket = "${socket}"
state_dir = "${dir}/state"
${server}
[health]
sample_interval = "100ms"
[reclaim]
auto_caches = []
[[site]]
name = "s"
path = "${site}"
[[filesystem]]
path = "${mnt}"
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
[jobs]
cgroup_root = "${cgroup}"
registry_dir = "${dir}/registry"
${jobs}`);
  const logFile = path.join(dir, 'daemon.log');
  const logFd = fs.openSync(logFile, 'w');
  const proc = spawn(bin, ['serve', '--config', cfg], { stdio: ['ignore', logFd, logFd] });
  fs.closeSync(logFd);
  let exitCode = null;
  const exited = new Promise((r) => proc.once('exit', (c) => { exitCode = c; r(); }));
  cleanups.push(async () => {
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  });
  const client = new Client({ socket });
  cleanups.push(() => client.close());
  const logs = () => fs.readFileSync(logFile, 'utf8');
  await eventually('the daemon to be ready', async () => {
    if (exitCode !== null) throw new Error(`sandboxd exited ${exitCode}: ${logs()}`);
    try { await client.request('GET', '/readyz'); return true; } catch { return false; }
  }, 60_000);
  return { bin, dir, mnt, site, socket, cgroup, client, logs, env: { ...process.env, SANDBOXD_SOCKET: socket } };
}
