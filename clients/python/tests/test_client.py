"""The Python client against a real daemon (see harness.py)."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import textwrap
import unittest

from harness import SRC, Daemon, alive, eventually

import sandboxd

# A command that leaves a double-forked grandchild in its own session: only the job's
# cgroup still holds it.
DOUBLE_FORK = ("(setsid sh -c 'echo $$ > {d}/grand; exec sleep 600' &); "
               "echo $$ > {d}/cmd; exec sleep 600")


def read_pid(path: str) -> int:
    def ok() -> bool:
        try:
            with open(path) as f:
                return f.read().strip().isdigit()
        except OSError:
            return False
    eventually(f"pid file {path}", ok)
    with open(path) as f:
        return int(f.read())


class OwnerTests(unittest.TestCase):
    def test_owner_addresses_another_uids_job_and_lease(self) -> None:
        """Ids are each owner's own: uid 65534 and root both hold job build-1 (lease ci);
        owner=65534 reads, lists, renews and ends 65534's alone, root's keeps running."""
        nobody, other = 65534, 65533
        d = Daemon(self, server=f'socket_mode = "0666"\nwriters = ["uid:{nobody}", "uid:{other}"]\n')
        os.chmod(d.dir, 0o755)  # uid 65534 reaches the socket
        c = d.client
        # uids 65534 (under lease ci) and 65533 register build-1 first (sandboxd run --detach:
        # its sleep is the job).
        for uid, lease in ((nobody, ["--lease", "ci"]), (other, [])):
            reg = subprocess.run([d.bin, "run", "--socket", d.socket, "--detach", "--id", "build-1",
                                  *lease, "--ttl", "10m", "--", "sleep", "600"],
                                 user=uid, group=uid, extra_groups=[], cwd="/",
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(reg.returncode, 0, f"{uid} registers build-1: {reg.stderr}")
        with open(os.path.join(d.cgroup, "jobs", f"build-1@{nobody}", "cgroup.procs")) as f:
            theirs = int(f.read().split()[0])
        # Root holds no build-1 yet: which of the two is meant is for owner= to say.
        with self.assertRaises(sandboxd.Conflict) as cm:
            c.job("build-1")
        self.assertEqual(cm.exception.status, 409)
        self.assertEqual(c.job("build-1", owner=nobody)["pid"], theirs)
        mine = subprocess.Popen(["sleep", "600"])
        self.addCleanup(lambda: (mine.kill(), mine.wait()))
        c.register_job(mine.pid, id="build-1", ttl="10m", lease="ci")

        self.assertEqual(c.job("build-1")["pid"], mine.pid, "no owner: the caller's own build-1")
        j = c.job("build-1", owner=nobody)
        self.assertEqual((j["pid"], j["owner"]["uid"], j["state"]), (theirs, nobody, "running"))
        self.assertEqual(sorted(x["owner"]["uid"] for x in c.jobs()["jobs"]), [0, other, nobody])
        self.assertEqual([(x["id"], x["pid"]) for x in c.jobs(owner=nobody)["jobs"]], [("build-1", theirs)])
        self.assertEqual([x["pid"] for x in c.jobs(owner=0)["jobs"]], [mine.pid])
        hb = c.heartbeat("build-1", owner=nobody)
        self.assertEqual((hb["owner"]["uid"], hb["heartbeats"]), (nobody, 1))
        self.assertEqual(c.job("build-1")["heartbeats"], 0, "root's build-1 was not the one renewed")
        ls = c.leases(owner=nobody)["leases"]
        self.assertEqual([(x["name"], x["owner"]["uid"], x["running"]) for x in ls], [("ci", nobody, 1)])
        self.assertEqual(len(c.leases()["leases"]), 2)
        self.assertEqual(c.heartbeat_lease("ci", owner=nobody)["owner"]["uid"], nobody)

        async def read_async() -> None:
            a = sandboxd.AsyncClient(d.socket)
            try:
                self.assertEqual((await a.job("build-1", owner=nobody))["pid"], theirs)
                self.assertEqual(len((await a.leases(owner=0))["leases"]), 1)
            finally:
                a.close()
        asyncio.run(read_async())

        ended = c.end_job("build-1", owner=nobody)
        self.assertEqual((ended["owner"]["uid"], ended["state"]), (nobody, "killed"))
        eventually("65534's sleep to be gone", lambda: not alive(theirs))
        self.assertEqual(c.job("build-1")["state"], "running", "root's build-1 ended with 65534's")
        self.assertTrue(alive(mine.pid))
        self.assertEqual(c.end_lease("ci", owner=0)["owner"]["uid"], 0)
        self.assertEqual(c.job("build-1")["state"], "killed")
        with self.assertRaises(ValueError):
            c.job("build-1", owner=-1)


class JobTests(unittest.TestCase):
    def setUp(self) -> None:
        self.d = Daemon(self)
        self.c = self.d.client

    def test_runner_sigkilled_mid_block(self) -> None:
        """The runner dies (SIGKILL) inside its with-block: no finally runs, the lease
        lapses, and the daemon ends the command and its double-forked grandchild."""
        runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys, time, sandboxd
            c = sandboxd.Client()
            with c.start(["sh", "-c", {DOUBLE_FORK.format(d=self.d.dir)!r}], ttl="3s", heartbeat="150ms", site="s") as job:
                print(job.id, job.pid, flush=True)
                time.sleep(600)
            """)], env=self.d.env(), stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (runner.kill(), runner.wait(), runner.stdout and runner.stdout.close()))
        assert runner.stdout is not None
        job_id, pid = runner.stdout.readline().split()
        cmd, grand = read_pid(f"{self.d.dir}/cmd"), read_pid(f"{self.d.dir}/grand")
        self.assertEqual(int(pid), cmd, "the registered pid is the command's own (exec'd behind the gate)")
        with open(os.path.join(self.d.cgroup, "jobs", job_id, "cgroup.procs")) as f:
            procs = f.read().split()
        self.assertIn(str(cmd), procs)
        self.assertIn(str(grand), procs)
        # Counted, not timed: 22 heartbeats at least 150 ms apart outlast the 3 s ttl.
        def beats() -> bool:
            j = self.c.job(job_id)
            self.assertEqual(j["state"], "running", f"a heartbeating job ended: {j}")
            return j["heartbeats"] >= 22
        eventually("22 heartbeats", beats)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        eventually("the lease to lapse", lambda: self.c.job(job_id)["state"] == "killed")
        j = self.c.job(job_id)
        self.assertEqual(j["reason"], "lease_expired")
        self.assertFalse(alive(cmd), "the command outlived its lease")
        self.assertFalse(alive(grand), "the double-forked grandchild outlived its lease")

    def test_block_exception_ends_job(self) -> None:
        """An exception in the block ends the job (SIGTERM, SIGKILL after grace) and the
        block is left only once its cgroup is empty; the exception propagates."""
        with self.assertRaises(ZeroDivisionError):
            with self.c.start(["sh", "-c", "trap '' TERM; " + DOUBLE_FORK.format(d=self.d.dir)], ttl="1m", site="s") as job:
                cmd, grand = read_pid(f"{self.d.dir}/cmd"), read_pid(f"{self.d.dir}/grand")
                # the subshell that forked the grandchild exits on its own: then two are left
                eventually("the command and its grandchild in the job", lambda: self.c.job(job.id)["processes"] == 2)
                1 / 0
        j = self.c.job(job.id)
        self.assertEqual((j["state"], j["reason"], j["processes"]), ("killed", "deleted", 0))
        self.assertFalse(alive(cmd) or alive(grand))
        self.assertIsNotNone(job.process.returncode, "the command was reaped")

    def test_exit_status_and_env(self) -> None:
        out = os.path.join(self.d.dir, "out")
        with self.c.start(["sh", "-c", f'echo "$SANDBOXD_JOB_ID" > {out}; exit 3'], id="j-env") as job:
            self.assertEqual(job.wait(), 3)
        with open(out) as f:
            self.assertEqual(f.read().strip(), "j-env")
        self.assertIsNone(job.heartbeat_error)
        with self.assertRaises(sandboxd.Conflict) as cm:
            with self.c.start(["sleep", "600"], id="j-busy"):
                self.c.start(["sleep", "600"], id="j-busy")
        self.assertEqual((cm.exception.status, cm.exception.exit_code), (409, 65))
        with self.assertRaises(FileNotFoundError):
            self.c.start(["no-such-command-xyz"])
        # A shared lease (CONTRACT §17): the job joins it, one lease heartbeat renews it.
        with self.c.start(["sleep", "600"], lease="py-session", heartbeat="1h") as job:
            self.assertEqual(self.c.job(job.id).get("lease"), "py-session")
            self.c.request("POST", "/v1/leases/py-session/heartbeat")

    def test_failed_heartbeat_is_surfaced(self) -> None:
        """Someone else ends the job: the next heartbeat fails; the callback sees it at
        once and leaving the block raises it."""
        seen = []
        with self.assertRaises(sandboxd.HeartbeatFailed) as cm:
            with self.c.start(["sleep", "600"], ttl="1m", heartbeat="100ms", on_heartbeat_error=seen.append) as job:
                self.c.end_job(job.id)
                eventually("the failed heartbeat", lambda: job.heartbeat_error is not None)
        self.assertIsInstance(cm.exception.cause, sandboxd.NotFound)
        self.assertEqual(seen, [cm.exception])

    def test_async_with(self) -> None:
        async def main() -> None:
            ac = sandboxd.AsyncClient(self.d.socket)
            with self.assertRaises(KeyError):
                async with ac.start(["sh", "-c", DOUBLE_FORK.format(d=self.d.dir)], ttl="2s", heartbeat="100ms", site="s") as job:
                    await asyncio.to_thread(read_pid, f"{self.d.dir}/grand")
                    end = asyncio.get_running_loop().time() + 60  # a condition wait, never a hang
                    while (await ac.job(job.id))["heartbeats"] < 22:  # 2.2 s > the 2 s ttl
                        if asyncio.get_running_loop().time() > end:
                            raise AssertionError("timed out after 60s waiting for 22 heartbeats")
                        await asyncio.sleep(0.05)
                    raise KeyError("boom")
            j = await ac.job(job.id)
            self.assertEqual((j["state"], j["reason"], j["processes"]), ("killed", "deleted", 0))
            job2 = await ac.start(["true"])
            self.assertEqual(await job2.wait(), 0)
            await job2.end()
            ac.close()
        asyncio.run(main())


class ProblemTests(unittest.TestCase):
    def test_disk_full_on_full_tmpfs(self) -> None:
        """The site's tmpfs filled to 100%: launch (and start, before it spawns anything)
        raise OutOfSpace with code disk_full and the filesystem's figures."""
        d = Daemon(self, size=8 << 20)
        c = d.client
        with open(os.path.join(d.site, "fill"), "wb") as f:
            try:
                while True:
                    f.write(b"x" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        st = os.statvfs(d.mnt)
        self.assertEqual(st.f_bavail, 0, "the tmpfs is full")
        eventually("a sample of the full filesystem",
                   lambda: c.status()["filesystems"][0]["avail_bytes"] == 0)
        with self.assertRaises(sandboxd.OutOfSpace) as cm:
            c.launch(site="s", need_bytes="1MiB")
        p = cm.exception
        self.assertEqual((p.code, p.status, p.exit_code, p.title), ("disk_full", 507, 73, "disk full"))
        self.assertIn(d.mnt, p.detail)
        self.assertIn("0 B free", p.detail)
        self.assertIsNotNone(p.filesystem)
        assert p.filesystem is not None
        self.assertEqual(p.filesystem["avail_bytes"], 0)
        self.assertEqual(p.filesystem["size_bytes"], 8 << 20)
        self.assertEqual(p.doc["code"], "disk_full")
        marker = os.path.join(d.dir, "ran")
        with self.assertRaises(sandboxd.OutOfSpace):
            c.start(["sh", "-c", f"touch {marker}"], site="s")
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(c.jobs()["jobs"], [])

    def test_mount_registered_and_credentials_pushed(self) -> None:
        d = Daemon(self)
        c = d.client
        path = os.path.join(d.dir, "agent")
        os.mkdir(path)
        exp = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        m = c.add_mount("py-agent", path, required=False, credential_expires_at=exp)
        self.assertEqual((m["name"], m["path"]), ("py-agent", path))
        with self.assertRaises(sandboxd.Conflict):
            c.add_mount("py-agent", path)
        later = exp + datetime.timedelta(hours=1)
        m = c.push_credentials("py-agent", later)
        self.assertEqual(m["credential_expires_at"], "2030-01-02T04:04:05Z")
        self.assertEqual(c.mount("py-agent")["credential_expires_at"], "2030-01-02T04:04:05Z")
        names = [x["name"] for x in c.mounts()["mounts"]]
        self.assertIn("py-agent", names)
        r = c.remove_mount("py-agent")
        self.assertEqual(r["mount"]["name"], "py-agent")
        with self.assertRaises(sandboxd.NotFound) as cm:
            c.mount("py-agent")
        self.assertEqual((cm.exception.status, cm.exception.exit_code), (404, 78))
        with self.assertRaises(sandboxd.InvalidRequest) as bad:
            c.push_credentials("nope", "yesterday")
        self.assertIn(bad.exception.code, ("bad_request", "not_found"))

    def test_reads_and_unreachable(self) -> None:
        d = Daemon(self)
        c = d.client
        self.assertEqual(c.livez()["status"], "ok")
        st = c.status()
        self.assertIn("jobs", st["features"])
        self.assertIn(c.health()["status"], ("ok", "warning", "critical"))
        self.assertIn("actions", c.reclaim(dry_run=True))
        self.assertIn("events", c.events(0))
        self.assertEqual(c.leaks()["leaks"], [])
        self.assertIn("verdict", c.resume())
        gone = sandboxd.Client(os.path.join(d.dir, "nope.sock"))
        with self.assertRaises(sandboxd.Unreachable) as cm:
            gone.status()
        self.assertIn("no socket", str(cm.exception))


class ReadmeTest(unittest.TestCase):
    def test_readme_example_runs(self) -> None:
        """The README's example, as written, against a real daemon."""
        d = Daemon(self)
        with open(os.path.join(os.path.dirname(SRC), "README.md")) as f:
            readme = f.read()
        code = readme.split("```python\n", 1)[1].split("```", 1)[0]
        self.assertLessEqual(len(code.strip().splitlines()), 10)
        r = subprocess.run([sys.executable, "-c", code], env=d.env(), capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hello from", r.stdout)



class PackagingTest(unittest.TestCase):
    def test_pip_installs_offline(self) -> None:
        """pip builds and installs the package with no index (into a temp target)."""
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                                "--disable-pip-version-check", "--target", tmp, os.path.dirname(SRC)],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for f in ("__init__.py", "client.py", "aio.py", "py.typed"):
                self.assertTrue(os.path.exists(os.path.join(tmp, "sandboxd", f)), f)
            r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {tmp!r}); import sandboxd; print(sandboxd.__file__)"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(tmp), r.stdout)


if __name__ == "__main__":
    unittest.main()
