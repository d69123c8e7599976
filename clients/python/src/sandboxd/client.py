"""The synchronous client and the Job it starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _duration
from . import types as t
from ._duration import Duration
from ._errors import HeartbeatFailed, NotFound, Problem
from ._http import Transport, socket_path

JSON = Dict[str, Any]
Size = Union[int, str]

# The command is started behind a gate: a small interpreter that waits on a pipe until the
# job is registered (its pid moved into the job's cgroup) and only then execs the command
# in place (same pid), so nothing it forks escapes the cgroup. The runner writes the job id
# (exported to the command as SANDBOXD_JOB_ID); a runner that dies first closes the pipe
# and the gate exits 125 without running the command. (Not /bin/sh: dash cannot name a
# descriptor above 9, and the pipe's number is whatever the runner's process had free.)
_GATE = """import os, signal, sys
fd = int(sys.argv[1]); data = b""
while not data.endswith(b"\\n"):
    c = os.read(fd, 256)
    if not c:
        os._exit(125)
    data += c
os.close(fd)
os.environ["SANDBOXD_JOB_ID"] = data.decode().strip()
for s in ("SIGPIPE", "SIGXFSZ"):
    if hasattr(signal, s):
        signal.signal(getattr(signal, s), signal.SIG_DFL)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.stderr.write("sandboxd job: %s: %s\\n" % (sys.argv[2], e.strerror))
    os._exit(127 if isinstance(e, FileNotFoundError) else 126)
"""


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _query(wait: bool = True, owner: Optional[int] = None) -> str:
    """The query of a job or lease call: "?wait=false", "?owner=UID", both, or ""."""
    q = [] if wait else ["wait=false"]
    if owner is not None:
        if isinstance(owner, bool) or not isinstance(owner, int) or not 0 <= owner <= 0xFFFFFFFF:
            raise ValueError(f"owner must be a uid (an int from 0 to 4294967295), not {owner!r}")
        q.append(f"owner={owner}")
    return "?" + "&".join(q) if q else ""


def _drop_none(d: Mapping[str, Any]) -> JSON:
    return {k: v for k, v in d.items() if v is not None}


class Client:
    """Calls one sandboxd daemon over its Unix socket.

    ``socket`` None means $SANDBOXD_SOCKET, then /run/sandboxd/sandboxd.sock. Refusals
    raise a :class:`Problem` subclass; a daemon that cannot be reached raises
    :class:`Unreachable`. Safe to share between threads.
    """

    def __init__(self, socket: Optional[str] = None, timeout: float = 30.0) -> None:
        self.socket = socket_path(socket)
        self.timeout = timeout
        self._t = Transport(self.socket, timeout)

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        """Any call: the decoded JSON answer of a 2xx, else a Problem."""
        return self._t.request(method, path, body, timeout)

    # --- the daemon and the sandbox -------------------------------------------------
    def livez(self) -> t.Livez:
        return self._t.request("GET", "/livez")

    def status(self) -> t.Status:
        return self._t.request("GET", "/v1/status")

    def health(self) -> t.Health:
        """GET /v1/health; a critical sandbox answers 503, returned here with status "critical"."""
        return self._t.request("GET", "/v1/health", accept_unavailable=True)

    def events(self, since: int = 0) -> t.EventsPage:
        return self._t.request("GET", f"/v1/events?since={int(since)}")

    def launch(self, site: Optional[str] = None, need_bytes: Optional[Size] = None,
               need_inodes: Optional[int] = None, mounts: Optional[Sequence[str]] = None,
               deadline: Optional[Duration] = None, job: Optional[str] = None) -> t.LaunchResponse:
        """POST /v1/launch: the write-site check before a command (raises OutOfSpace, ...).
        job: your job the command is for; the required mounts tied to it gate the launch."""
        body = _drop_none({"site": site, "need_bytes": need_bytes, "need_inodes": need_inodes,
                           "mounts": list(mounts) if mounts is not None else None, "job": job,
                           "deadline": _duration.go(deadline) if deadline is not None else None})
        d = _duration.seconds(deadline) if deadline is not None else 2.0
        return self._t.request("POST", "/v1/launch", body, timeout=max(self.timeout, d + 1))

    def resume(self, deadline: Optional[Duration] = None, **fields: Any) -> t.ReclaimRun:
        body = _drop_none({"deadline": _duration.go(deadline) if deadline is not None else None, **fields})
        d = _duration.seconds(deadline) if deadline is not None else 30.0
        return self._t.request("POST", "/v1/resume", body, timeout=max(self.timeout, d + 1))

    def reclaim(self, dry_run: bool = True, target_free: Optional[Size] = None, **fields: Any) -> t.ReclaimRun:
        """POST /v1/reclaim; a dry run (the default here) plans and changes nothing."""
        body = _drop_none({"dry_run": dry_run, "target_free": target_free, **fields})
        return self._t.request("POST", "/v1/reclaim", body, timeout=max(self.timeout, 61))

    # --- jobs ---------------------------------------------------------------------
    def register_job(self, pid: int, id: Optional[str] = None, ttl: Optional[Duration] = None,
                     site: Optional[str] = None, lease: Optional[str] = None,
                     max_lifetime: Optional[Duration] = None, grace: Optional[Duration] = None,
                     labels: Optional[Mapping[str, str]] = None) -> t.JobInfo:
        """POST /v1/jobs: pid and what it forks from then on go into the job's cgroup."""
        g = lambda d: _duration.go(d) if d is not None else None  # noqa: E731
        body = _drop_none({"id": id, "pid": pid, "ttl": g(ttl), "site": site, "lease": lease,
                           "max_lifetime": g(max_lifetime), "grace": g(grace),
                           "labels": dict(labels) if labels else None})
        return self._t.request("POST", "/v1/jobs", body)

    def heartbeat(self, id: str, extend: Optional[Duration] = None, *,
                  owner: Optional[int] = None) -> t.JobInfo:
        """POST /v1/jobs/{id}/heartbeat. owner: whose job (ids are each owner's own)."""
        # No extend: no body (an empty POST is {}), the cheapest renewal there is.
        body = {"extend": _duration.go(extend)} if extend is not None else None
        return self._t.request("POST", f"/v1/jobs/{_q(id)}/heartbeat" + _query(owner=owner), body)

    def end_job(self, id: str, wait: bool = True, timeout: Optional[float] = None, *,
                owner: Optional[int] = None) -> t.JobInfo:
        """DELETE /v1/jobs/{id}: SIGTERM, SIGKILL after its grace; with wait the answer
        comes once the job's cgroup is empty. owner: whose job, as for :meth:`job`."""
        return self._t.request("DELETE", f"/v1/jobs/{_q(id)}" + _query(wait=wait, owner=owner),
                               timeout=timeout or max(self.timeout, 120))

    def job(self, id: str, *, owner: Optional[int] = None) -> t.JobInfo:
        """GET /v1/jobs/{id}. Ids are each owner's own: None means the caller's own job of
        that id, else the only one (Conflict when several uids hold it); owner=UID names
        whose (root addressing another uid's job)."""
        return self._t.request("GET", f"/v1/jobs/{_q(id)}" + _query(owner=owner))

    def jobs(self, *, owner: Optional[int] = None) -> t.JobList:
        """GET /v1/jobs; owner=UID lists only that uid's jobs."""
        return self._t.request("GET", "/v1/jobs" + _query(owner=owner))

    # --- shared (session) leases ---------------------------------------------------
    def leases(self, *, owner: Optional[int] = None) -> Dict[str, List[t.Lease]]:
        """GET /v1/leases: {"leases": [...]}; owner=UID lists only that uid's leases."""
        return self._t.request("GET", "/v1/leases" + _query(owner=owner))

    def heartbeat_lease(self, name: str, extend: Optional[Duration] = None, *,
                        owner: Optional[int] = None) -> t.Lease:
        """POST /v1/leases/{name}/heartbeat: renew every job of the lease, one call (never
        past a job's max_lifetime). owner: whose lease (names are each owner's own)."""
        body = {"extend": _duration.go(extend)} if extend is not None else None
        return self._t.request("POST", f"/v1/leases/{_q(name)}/heartbeat" + _query(owner=owner), body)

    def end_lease(self, name: str, wait: bool = True, timeout: Optional[float] = None, *,
                  owner: Optional[int] = None) -> t.Lease:
        """DELETE /v1/leases/{name}: end every job of the lease; with wait the answer comes
        once every one of their cgroups is empty. owner: whose lease."""
        return self._t.request("DELETE", f"/v1/leases/{_q(name)}" + _query(wait=wait, owner=owner),
                               timeout=timeout or max(self.timeout, 120))

    def leaks(self, clean: bool = False) -> t.LeaksReport:
        """GET /v1/jobs/leaks: the loud leak check (a check that cannot run raises)."""
        return self._t.request("GET", "/v1/jobs/leaks" + ("?clean=true" if clean else ""),
                               timeout=max(self.timeout, 300) if clean else None)

    def start(self, argv: Sequence[str], ttl: Optional[Duration] = None,
              heartbeat: Optional[Duration] = None, site: Optional[str] = None,
              lease: Optional[str] = None, mounts: Optional[Sequence[str]] = None, *,
              id: Optional[str] = None, max_lifetime: Optional[Duration] = None,
              grace: Optional[Duration] = None, labels: Optional[Mapping[str, str]] = None,
              need_bytes: Optional[Size] = None, need_inodes: Optional[int] = None,
              on_heartbeat_error: Optional[Callable[[HeartbeatFailed], None]] = None,
              **popen: Any) -> "Job":
        """Start argv as a job under a lease that a background thread renews.

        The launch check (site, mounts, need_*) runs first; then argv is spawned
        (``popen`` goes to subprocess.Popen), registered as the job (its pid, so the lease
        covers the command, not this runner) and only then let run. Use it as a context
        manager: leaving the block ends the job and waits until its cgroup is empty.
        """
        job = self._spawn(argv, ttl, site, lease, mounts, id, max_lifetime, grace, labels,
                          need_bytes, need_inodes, popen)
        job._start_heartbeats(heartbeat, on_heartbeat_error)
        return job

    def _spawn(self, argv: Sequence[str], ttl: Optional[Duration], site: Optional[str],
               lease: Optional[str], mounts: Optional[Sequence[str]], id: Optional[str],
               max_lifetime: Optional[Duration], grace: Optional[Duration],
               labels: Optional[Mapping[str, str]], need_bytes: Optional[Size],
               need_inodes: Optional[int], popen: Dict[str, Any]) -> "Job":
        argv = list(argv)
        if not argv:
            raise ValueError("start: argv is empty")
        if popen.get("shell"):
            raise ValueError("start: shell=True is not supported; pass argv (or ['sh', '-c', ...])")
        env = popen.get("env")
        path = (env or os.environ).get("PATH", os.defpath)
        if "/" not in argv[0] and shutil.which(argv[0], path=path) is None:
            raise FileNotFoundError(f"start: {argv[0]!r} is not on PATH")
        self.launch(site=site, mounts=mounts, need_bytes=need_bytes, need_inodes=need_inodes)
        r, w = os.pipe()
        try:
            popen = dict(popen)
            popen["pass_fds"] = tuple(popen.get("pass_fds", ())) + (r,)
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GATE, str(r), *argv], **popen)
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        try:
            info = self.register_job(proc.pid, id=id, ttl=ttl, site=site, lease=lease,
                                     max_lifetime=max_lifetime, grace=grace, labels=labels)
            os.write(w, (info.get("id", "") + "\n").encode())
        except BaseException:
            os.close(w)  # the gate reads EOF: the command never runs
            proc.wait()
            raise
        os.close(w)
        ttl_s = float(info.get("ttl_seconds") or (_duration.seconds(ttl) if ttl is not None else 180.0))
        return Job(self, info, proc, ttl_s)

    # --- runtime mounts -------------------------------------------------------------
    def mounts(self) -> t.MountList:
        return self._t.request("GET", "/v1/mounts")

    def mount(self, name: str) -> t.Mount:
        return self._t.request("GET", f"/v1/mounts/{_q(name)}")

    def add_mount(self, name: str, path: str, **fields: Any) -> t.Mount:
        """POST /v1/mounts: every key of a [[mount]] table, plus job and
        credential_expires_at (RFC 3339 string or an aware datetime)."""
        body: JSON = {"name": name, "path": path}
        for k, v in fields.items():
            if v is None:
                continue
            if hasattr(v, "isoformat"):
                v = v.isoformat()
            body[k] = v
        return self._t.request("POST", "/v1/mounts", body)

    def push_credentials(self, name: str, expires_at: Any) -> t.Mount:
        """PUT /v1/mounts/{name}/credentials: the renewed credential's expiry."""
        if hasattr(expires_at, "isoformat"):
            expires_at = expires_at.isoformat()
        return self._t.request("PUT", f"/v1/mounts/{_q(name)}/credentials", {"expires_at": expires_at})

    def remove_mount(self, name: str, unmount: Optional[bool] = None) -> t.MountRelease:
        q = "" if unmount is None else ("?unmount=true" if unmount else "?unmount=false")
        return self._t.request("DELETE", f"/v1/mounts/{_q(name)}{q}", timeout=max(self.timeout, 125))


class Job:
    """A command started as a sandboxd job (see :meth:`Client.start`).

    ``id`` and ``pid`` name it; ``process`` is its subprocess.Popen; ``info`` the job
    object answered at registration. A heartbeat thread renews the lease every
    ``heartbeat`` (default: a third of the ttl) on the monotonic clock until the job ends.
    A failed heartbeat is kept in ``heartbeat_error``, passed to ``on_heartbeat_error``
    and raised as :class:`HeartbeatFailed` when the block ends.
    """

    def __init__(self, client: Client, info: t.JobInfo, process: "subprocess.Popen[Any]", ttl: float) -> None:
        self.client = client
        self.info = info
        self.id: str = info.get("id", "")
        self.pid: int = process.pid
        self.process = process
        self.ttl = ttl
        self.heartbeats = 0
        self.heartbeat_error: Optional[HeartbeatFailed] = None
        self.ended: Optional[t.JobInfo] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._on_error: Optional[Callable[[HeartbeatFailed], None]] = None

    def _start_heartbeats(self, every: Optional[Duration],
                          on_error: Optional[Callable[[HeartbeatFailed], None]]) -> None:
        interval = _duration.seconds(every) if every is not None else self.ttl / 3
        if interval <= 0:
            raise ValueError("heartbeat must be longer than 0s")
        self._on_error = on_error
        self._thread = threading.Thread(target=self._beat, args=(interval,),
                                        name=f"sandboxd-heartbeat-{self.id}", daemon=True)
        self._thread.start()

    def _beat(self, interval: float) -> None:
        # Event.wait sleeps on the monotonic clock: a wall-clock jump neither skips nor
        # bunches heartbeats.
        while not self._stop.wait(interval):
            try:
                self.client.heartbeat(self.id)
                self.heartbeats += 1
            except BaseException as e:  # noqa: BLE001 - surfaced, never swallowed
                if self._stop.is_set():
                    return
                if isinstance(e, NotFound) and self._exited_by_itself():
                    return  # the command exited and its job ended: nothing to renew
                self._failed(e)
                if isinstance(e, NotFound):
                    return  # the job is gone (its lease lapsed): no heartbeat can bring it back

    def _exited_by_itself(self) -> bool:
        try:
            return self.client.job(self.id).get("reason") == "exited"
        except Exception:  # noqa: BLE001 - then the failed heartbeat is what is reported
            return False

    def _failed(self, e: BaseException) -> None:
        err = HeartbeatFailed(self.id, e)
        with self._lock:
            if self.heartbeat_error is None:
                self.heartbeat_error = err
        if self._on_error is not None:
            self._on_error(err)

    @property
    def returncode(self) -> Optional[int]:
        return self.process.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the command to exit (Popen.wait) and return its exit status."""
        return self.process.wait(timeout)

    def stop_heartbeats(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def end(self, wait: bool = True) -> t.JobInfo:
        """End the job: stop the heartbeats, DELETE it (SIGTERM, SIGKILL after its grace)
        and, with wait, return once its cgroup is empty. Idempotent."""
        self.stop_heartbeats()
        if self.ended is not None:
            return self.ended
        try:
            self.ended = self.client.end_job(self.id, wait=wait)
        except NotFound:
            self.ended = t.JobInfo(id=self.id, state="ended", reason="exited")
        if wait:
            self.process.wait()
        return self.ended

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        self.end()
        if self.heartbeat_error is not None:
            if exc is None:
                raise self.heartbeat_error
            if hasattr(exc, "add_note"):  # Python >= 3.11
                getattr(exc, "add_note")(str(self.heartbeat_error))

    def __repr__(self) -> str:
        return f"<sandboxd.Job id={self.id!r} pid={self.pid}>"
