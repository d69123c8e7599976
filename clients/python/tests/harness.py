"""A real sandboxd for the client tests: bin/sandboxd serve on a temp config and socket,
its jobs under a cgroup of this test's own, its site on a small tmpfs. Everything it makes
is removed when the test ends, also when it fails. Root-only: skipped with a reason when
not root, except under CI=true, where skipping is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Callable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
SRC = os.path.join(PKG, "src")
REPO = os.path.dirname(os.path.dirname(PKG))
sys.path.insert(0, SRC)

import sandboxd  # noqa: E402

_counter = [0]


def unavailable(tc: unittest.TestCase, why: str) -> None:
    if os.environ.get("CI") == "true":
        tc.fail(f"{why}; CI=true forbids skipping")
    raise unittest.SkipTest(why)


def binary() -> str:
    """$SANDBOXD_BIN, else the repository's bin/sandboxd (make build)."""
    b = os.environ.get("SANDBOXD_BIN") or os.path.join(REPO, "bin", "sandboxd")
    if not os.access(b, os.X_OK):
        raise unittest.SkipTest(f"no sandboxd binary at {b}: run `make build` or set SANDBOXD_BIN")
    return b


def eventually(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """Waits for cond, polling; a loaded machine only makes the wait longer."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """pid runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return False
    i = s.rfind(")")
    return i > 0 and s[i + 2:i + 3] != "Z"


def cgroup2_mount() -> Optional[str]:
    mount = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ")[0] == "cgroup2":
                mount = left.split(" ")[4]
    return mount


def remove_cgroup_tree(root: str) -> bool:
    dirs: List[str] = []
    for d, _, _ in os.walk(root):
        dirs.append(d)
        try:
            with open(os.path.join(d, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            pass
    for d in reversed(dirs):
        for _ in range(200):
            try:
                os.rmdir(d)  # cgroupfs: no symlinks, no renames
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)
    return not os.path.exists(root)


class Daemon:
    """One sandboxd serving a temp socket: site "s" on a tmpfs of size bytes."""

    def __init__(self, tc: unittest.TestCase, size: int = 16 << 20, filesystem: str = "",
                 jobs: str = 'grace = "500ms"\n', server: str = "") -> None:
        if os.geteuid() != 0:
            unavailable(tc, "needs root (cgroups, tmpfs)")
        bin_ = self.bin = binary()
        cg = cgroup2_mount()
        if cg is None:
            unavailable(tc, "no cgroup2 mount")
        _counter[0] += 1
        self.dir = tempfile.mkdtemp(prefix="sandboxd-py-")
        tc.addCleanup(shutil.rmtree, self.dir, True)
        self.cgroup = os.path.join(cg, f"sandboxd-pytest-{os.getpid()}-{_counter[0]}")
        tc.addCleanup(lambda: tc.assertTrue(remove_cgroup_tree(self.cgroup), f"cgroup {self.cgroup} left behind"))
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", self.mnt], check=True)
        tc.addCleanup(self._unmount)
        self.site = os.path.join(self.mnt, "site")
        os.mkdir(self.site)
        self.socket = os.path.join(self.dir, "s.sock")
        cfg = os.path.join(self.dir, "sandboxd.toml")
        with open(cfg, "w") as f:
            f.write(f'''[server]
socket = "{self.socket}"
state_dir = "{self.dir}/state"
{server}
[health]
sample_interval = "100ms"
[reclaim]
auto_caches = []
[[site]]
name = "s"
path = "{self.site}"
[[filesystem]]
path = "{self.mnt}"
reclaim_below = "1MiB"
replace_below = "0"
reserve = "0"
{filesystem}
[jobs]
cgroup_root = "{self.cgroup}"
registry_dir = "{self.dir}/registry"
{jobs}''')
        self.log = open(os.path.join(self.dir, "daemon.log"), "w+")
        self.proc = subprocess.Popen([bin_, "serve", "--config", cfg], stdout=self.log, stderr=self.log)
        tc.addCleanup(self._stop)
        self.client = sandboxd.Client(self.socket, timeout=30)
        tc.addCleanup(self.client.close)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"sandboxd exited {self.proc.returncode}: {self.logs()}")
            try:
                self.client.request("GET", "/readyz")
                return True
            except (sandboxd.Unreachable, sandboxd.Problem):
                return False
        eventually("the daemon to be ready", ready, 60)

    def logs(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def _stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def _unmount(self) -> None:
        if subprocess.run(["umount", self.mnt]).returncode != 0:
            subprocess.run(["umount", "-l", self.mnt])

    def env(self) -> dict:
        return dict(os.environ, SANDBOXD_SOCKET=self.socket, PYTHONPATH=SRC)
