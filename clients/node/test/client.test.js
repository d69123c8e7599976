// The Node.js client against a real daemon (see harness.js): node --test.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import * as sandboxd from '../index.js';
import { PKG, alive, eventually, readPid, startDaemon } from './harness.js';

// A command that leaves a double-forked grandchild in its own session: only the job's
// cgroup still holds it.
const doubleFork = (d) => `(setsid sh -c 'echo $$ > ${d}/grand; exec sleep 600' &); echo $$ > ${d}/cmd; exec sleep 600`;

test('a runner SIGKILLed mid-block: the lease lapses and the job ends, grandchild included', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const url = pathToFileURL(path.join(PKG, 'index.js')).href;
  const runner = spawn(process.execPath, ['--input-type=module', '-e', `
    import { Client } from ${JSON.stringify(url)};
    const c = new Client();
    const job = await c.start(['sh', '-c', ${JSON.stringify(doubleFork(d.dir))}], { ttl: '3s', heartbeat: '150ms', site: 's' });
    try {
      console.log(job.id, job.pid);
      await new Promise(() => setInterval(() => {}, 1000));
    } finally {
      await job.end();
    }`], { env: d.env, stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => runner.kill('SIGKILL'));
  const [line] = await once(runner.stdout, 'data');
  const [id, pid] = String(line).trim().split(' ');
  const cmd = await readPid(`${d.dir}/cmd`);
  const grand = await readPid(`${d.dir}/grand`);
  assert.equal(Number(pid), cmd, 'the registered pid is the command (exec\'d behind the gate)');
  const procs = fs.readFileSync(path.join(d.cgroup, 'jobs', id, 'cgroup.procs'), 'utf8').split(/\s+/);
  assert.ok(procs.includes(String(cmd)) && procs.includes(String(grand)), `cgroup.procs ${procs}`);
  // Counted, not timed: 22 heartbeats at least 150 ms apart outlast the 3 s ttl.
  await eventually('22 heartbeats', async () => {
    const j = await d.client.job(id);
    assert.equal(j.state, 'running', `a heartbeating job ended: ${JSON.stringify(j)}`);
    return j.heartbeats >= 22;
  });
  runner.kill('SIGKILL');
  await eventually('the lease to lapse', async () => (await d.client.job(id)).state === 'killed');
  assert.equal((await d.client.job(id)).reason, 'lease_expired');
  assert.ok(!alive(cmd), 'the command outlived its lease');
  assert.ok(!alive(grand), 'the double-forked grandchild outlived its lease');
});

test('try/finally: an exception ends the job and end() returns once its cgroup is empty', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  let job; let cmd; let grand;
  await assert.rejects(async () => {
    job = await d.client.start(['sh', '-c', `trap '' TERM; ${doubleFork(d.dir)}`], { ttl: '1m', site: 's' });
    try {
      cmd = await readPid(`${d.dir}/cmd`);
      grand = await readPid(`${d.dir}/grand`);
      // the subshell that forked the grandchild exits on its own: then two are left
      await eventually('the command and its grandchild in the job', async () => (await d.client.job(job.id)).processes === 2);
      throw new RangeError('boom');
    } finally {
      await job.end();
    }
  }, RangeError);
  const j = await d.client.job(job.id);
  assert.deepEqual([j.state, j.reason, j.processes], ['killed', 'deleted', 0]);
  assert.ok(!alive(cmd) && !alive(grand));
  assert.notEqual(job.child.exitCode ?? job.child.signalCode, null, 'the command was reaped');
});

test('Symbol.asyncDispose ends the job (what `await using` calls)', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const job = await d.client.start(['sh', '-c', doubleFork(d.dir)], { ttl: '2s', heartbeat: '100ms', site: 's' });
  const grand = await readPid(`${d.dir}/grand`);
  await eventually('22 heartbeats (2.2 s > the 2 s ttl)', async () => (await d.client.job(job.id)).heartbeats >= 22);
  assert.equal(typeof job[Symbol.asyncDispose], 'function');
  await job[Symbol.asyncDispose]();
  const j = await d.client.job(job.id);
  assert.deepEqual([j.state, j.reason, j.processes], ['killed', 'deleted', 0]);
  assert.ok(!alive(grand));
});

test('exit status, SANDBOXD_JOB_ID, conflict, a missing command', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const out = path.join(d.dir, 'out');
  const job = await d.client.start(['sh', '-c', `echo "$SANDBOXD_JOB_ID" > ${out}; exit 3`], { id: 'j-env' });
  assert.equal(await job.exited, 3);
  await job.end();
  assert.equal(fs.readFileSync(out, 'utf8').trim(), 'j-env');
  const busy = await d.client.start(['sleep', '600'], { id: 'j-busy' });
  try {
    await assert.rejects(d.client.start(['sleep', '600'], { id: 'j-busy' }), (e) => {
      assert.ok(e instanceof sandboxd.Conflict);
      assert.deepEqual([e.code, e.status, e.exitCode], ['conflict', 409, 65]);
      return true;
    });
  } finally {
    await busy.end();
  }
  await assert.rejects(d.client.start(['no-such-command-xyz']), /not on PATH/);
  // A shared lease (CONTRACT §17): the job joins it, one lease heartbeat renews it.
  const leased = await d.client.start(['sleep', '600'], { lease: 'node-session', heartbeat: '1h' });
  try {
    assert.equal((await d.client.job(leased.id)).lease, 'node-session');
    await d.client.request('POST', '/v1/leases/node-session/heartbeat');
  } finally {
    await leased.end();
  }
});

test("{owner}: root reads, lists, renews and ends uid 65534's build-1, not its own", async (t) => {
  const [nobody, other] = [65534, 65533];
  const d = await startDaemon(t, { server: `socket_mode = "0666"\nwriters = ["uid:${nobody}", "uid:${other}"]\n` });
  if (!d) return;
  fs.chmodSync(d.dir, 0o755); // uid 65534 reaches the socket
  const c = d.client;
  // uids 65534 (under lease ci) and 65533 register build-1 first (sandboxd run --detach:
  // its sleep is the job).
  for (const [uid, lease] of [[nobody, ['--lease', 'ci']], [other, []]]) {
    const reg = spawnSync(d.bin, ['run', '--socket', d.socket, '--detach', '--id', 'build-1', ...lease, '--ttl', '10m', '--', 'sleep', '600'],
      { uid, gid: uid, cwd: '/', encoding: 'utf8', timeout: 60_000 });
    assert.equal(reg.status, 0, `${uid} registers build-1: ${reg.stderr}`);
  }
  const theirs = Number(fs.readFileSync(path.join(d.cgroup, 'jobs', `build-1@${nobody}`, 'cgroup.procs'), 'utf8').split('\n')[0]);
  // Root holds no build-1 yet: which of the two is meant is for {owner} to say.
  await assert.rejects(c.job('build-1'), (e) => e instanceof sandboxd.Conflict && e.status === 409);
  assert.equal((await c.job('build-1', { owner: nobody })).pid, theirs);
  const mine = spawn('sleep', ['600'], { stdio: 'ignore' });
  t.after(() => mine.kill('SIGKILL'));
  await once(mine, 'spawn');
  await c.registerJob({ pid: mine.pid, id: 'build-1', ttl: '10m', lease: 'ci' });

  assert.equal((await c.job('build-1')).pid, mine.pid, "no owner: the caller's own build-1");
  const j = await c.job('build-1', { owner: nobody });
  assert.deepEqual([j.pid, j.owner.uid, j.state], [theirs, nobody, 'running']);
  assert.deepEqual((await c.jobs()).jobs.map((x) => x.owner.uid).sort((x, y) => x - y), [0, other, nobody]);
  assert.deepEqual((await c.jobs({ owner: nobody })).jobs.map((x) => [x.id, x.pid]), [['build-1', theirs]]);
  assert.deepEqual((await c.jobs({ owner: 0 })).jobs.map((x) => x.pid), [mine.pid]);
  const hb = await c.heartbeat('build-1', { owner: nobody });
  assert.deepEqual([hb.owner.uid, hb.heartbeats], [nobody, 1]);
  assert.equal((await c.job('build-1')).heartbeats, 0, "root's build-1 was not the one renewed");
  assert.deepEqual((await c.leases({ owner: nobody })).leases.map((x) => [x.name, x.owner.uid, x.running]), [['ci', nobody, 1]]);
  assert.equal((await c.leases()).leases.length, 2);
  assert.equal((await c.heartbeatLease('ci', { owner: nobody })).owner.uid, nobody);

  const ended = await c.endJob('build-1', { owner: nobody });
  assert.deepEqual([ended.owner.uid, ended.state], [nobody, 'killed']);
  await eventually("65534's sleep to be gone", () => !alive(theirs));
  assert.equal((await c.job('build-1')).state, 'running', "root's build-1 ended with 65534's");
  assert.ok(alive(mine.pid));
  assert.equal((await c.endLease('ci', { owner: 0 })).owner.uid, 0);
  assert.equal((await c.job('build-1')).state, 'killed');
  assert.throws(() => c.job('build-1', { owner: -1 }), TypeError);
});

test('a failed heartbeat is surfaced: the callback at once, end() throws it', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const seen = [];
  const job = await d.client.start(['sleep', '600'], { ttl: '1m', heartbeat: '100ms', onHeartbeatError: (e) => seen.push(e) });
  await d.client.endJob(job.id); // someone else ends it
  await eventually('the failed heartbeat', () => job.heartbeatError !== null);
  await assert.rejects(job.end(), (e) => {
    assert.ok(e instanceof sandboxd.HeartbeatFailed);
    assert.ok(e.cause instanceof sandboxd.NotFound);
    assert.equal(seen[0], e);
    return true;
  });
});

test('disk_full on a full tmpfs: OutOfSpace with the figures; start spawns nothing', async (t) => {
  const d = await startDaemon(t, { size: 8 << 20 });
  if (!d) return;
  const fd = fs.openSync(path.join(d.site, 'fill'), 'w');
  const mb = Buffer.alloc(1 << 20, 120);
  try { for (;;) fs.writeSync(fd, mb); } catch (e) { assert.equal(e.code, 'ENOSPC'); }
  fs.closeSync(fd);
  await eventually('a sample of the full filesystem', async () => (await d.client.status()).filesystems[0].avail_bytes === 0);
  await assert.rejects(d.client.launch({ site: 's', needBytes: '1MiB' }), (e) => {
    assert.ok(e instanceof sandboxd.OutOfSpace);
    assert.deepEqual([e.code, e.status, e.exitCode, e.title], ['disk_full', 507, 73, 'disk full']);
    assert.ok(e.detail.includes(d.mnt) && e.detail.includes('0 B free'), e.detail);
    assert.equal(e.filesystem.avail_bytes, 0);
    assert.equal(e.filesystem.size_bytes, 8 << 20);
    assert.equal(e.doc.code, 'disk_full');
    return true;
  });
  const marker = path.join(d.dir, 'ran');
  await assert.rejects(d.client.start(['sh', '-c', `touch ${marker}`], { site: 's' }), sandboxd.OutOfSpace);
  assert.ok(!fs.existsSync(marker));
  assert.deepEqual((await d.client.jobs()).jobs, []);
});

test('a mount registered, its credentials pushed, removed', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const c = d.client;
  const p = path.join(d.dir, 'agent');
  fs.mkdirSync(p);
  const exp = new Date('2030-01-02T03:04:05Z');
  const m = await c.addMount({ name: 'node-agent', path: p, required: false, credential_expires_at: exp });
  assert.deepEqual([m.name, m.path], ['node-agent', p]);
  await assert.rejects(c.addMount({ name: 'node-agent', path: p }), sandboxd.Conflict);
  const later = new Date(exp.getTime() + 3600_000);
  assert.equal((await c.pushCredentials('node-agent', later)).credential_expires_at, '2030-01-02T04:04:05Z');
  assert.equal((await c.mount('node-agent')).credential_expires_at, '2030-01-02T04:04:05Z');
  assert.ok((await c.mounts()).mounts.some((x) => x.name === 'node-agent'));
  assert.equal((await c.removeMount('node-agent')).mount.name, 'node-agent');
  await assert.rejects(c.mount('node-agent'), (e) => e instanceof sandboxd.NotFound && e.exitCode === 78);
  await assert.rejects(c.pushCredentials('nope', 'yesterday'), sandboxd.Problem);
});

test('reads, and an unreachable daemon', async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const c = d.client;
  assert.equal((await c.livez()).status, 'ok');
  assert.ok((await c.status()).features.includes('jobs'));
  assert.ok(['ok', 'warning', 'critical'].includes((await c.health()).status));
  assert.ok(Array.isArray((await c.reclaim({ dryRun: true })).actions));
  assert.ok(Array.isArray((await c.events(0)).events));
  assert.deepEqual((await c.leaks()).leaks, []);
  assert.ok('verdict' in await c.resume());
  const gone = new sandboxd.Client({ socket: path.join(d.dir, 'nope.sock') });
  await assert.rejects(gone.status(), (e) => e instanceof sandboxd.Unreachable && /no socket/.test(e.message));
  gone.close();
});

test("the README's example runs as written", async (t) => {
  const d = await startDaemon(t);
  if (!d) return;
  const readme = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  const code = readme.split('```js\n')[1].split('```')[0];
  assert.ok(code.trim().split('\n').length <= 10);
  // From inside the package, its own name resolves to it (package self-reference).
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: PKG, env: d.env, encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /hello from/);
});

test('npm install ./clients/node works offline (into a temp prefix)', async (t) => {
  const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' });
  if (npm.status !== 0) { t.skip('no npm'); return; }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sandboxd-npm-'));
  t.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  fs.writeFileSync(path.join(tmp, 'package.json'), '{"name": "t", "private": true, "type": "module"}');
  const r = spawnSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--install-links', PKG], { cwd: tmp, encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const installed = path.join(tmp, 'node_modules', 'sandboxd');
  for (const f of ['index.js', 'index.d.ts', 'package.json']) assert.ok(fs.existsSync(path.join(installed, f)), f);
  const i = spawnSync(process.execPath, ['--input-type=module', '-e', "import { Client, Problem } from 'sandboxd'; console.log(typeof Client, typeof Problem)"], { cwd: tmp, encoding: 'utf8' });
  assert.equal(i.stdout.trim(), 'function function', i.stderr);
  await sleep(0);
});
