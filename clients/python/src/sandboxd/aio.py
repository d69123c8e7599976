"""asyncio: AsyncClient, the same calls as Client, and AsyncJob for ``async with``.

Each call runs the blocking http.client exchange in a worker thread (asyncio.to_thread),
so the event loop never waits on the socket; the heartbeat is an asyncio task that sleeps
on the loop's monotonic clock.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Dict, Generator, Optional, Sequence

from . import _duration
from ._duration import Duration
from ._errors import HeartbeatFailed, NotFound
from . import types as t
from .client import Client, Job


def _async(name: str) -> Any:
    async def call(self: "AsyncClient", *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)
    call.__name__ = name
    call.__doc__ = getattr(Client, name).__doc__
    return call


class AsyncClient:
    """Client for asyncio code: every call of :class:`Client` as a coroutine."""

    def __init__(self, socket: Optional[str] = None, timeout: float = 30.0) -> None:
        self.sync = Client(socket, timeout)
        self.socket = self.sync.socket

    livez = _async("livez")
    status = _async("status")
    health = _async("health")
    events = _async("events")
    launch = _async("launch")
    resume = _async("resume")
    reclaim = _async("reclaim")
    register_job = _async("register_job")
    heartbeat = _async("heartbeat")
    end_job = _async("end_job")
    job = _async("job")
    jobs = _async("jobs")
    leaks = _async("leaks")
    leases = _async("leases")
    heartbeat_lease = _async("heartbeat_lease")
    end_lease = _async("end_lease")
    mounts = _async("mounts")
    mount = _async("mount")
    add_mount = _async("add_mount")
    push_credentials = _async("push_credentials")
    remove_mount = _async("remove_mount")
    request = _async("request")

    def close(self) -> None:
        self.sync.close()

    def start(self, argv: Sequence[str], ttl: Optional[Duration] = None,
              heartbeat: Optional[Duration] = None, site: Optional[str] = None,
              lease: Optional[str] = None, mounts: Optional[Sequence[str]] = None,
              **kwargs: Any) -> "AsyncJob":
        """Start argv as a job: ``async with client.start(argv, ...) as job:`` or
        ``job = await client.start(argv, ...)``. Same meaning as Client.start."""
        return AsyncJob(self, argv, dict(ttl=ttl, heartbeat=heartbeat, site=site, lease=lease,
                                         mounts=mounts, **kwargs))


class AsyncJob:
    """A command started as a job, for asyncio. Leaving ``async with`` ends the job and
    waits until its cgroup is empty; a failed heartbeat is raised there (and passed to
    ``on_heartbeat_error`` as it happens)."""

    def __init__(self, client: AsyncClient, argv: Sequence[str], opts: Dict[str, Any]) -> None:
        self._client = client
        self._argv = list(argv)
        self._opts = opts
        self._job: Optional[Job] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self.heartbeat_error: Optional[HeartbeatFailed] = None

    async def _start(self) -> "AsyncJob":
        o = dict(self._opts)
        every = o.pop("heartbeat", None)
        on_error: Optional[Callable[[HeartbeatFailed], None]] = o.pop("on_heartbeat_error", None)
        sync = self._client.sync
        keys = ("ttl", "site", "lease", "mounts", "id", "max_lifetime", "grace", "labels",
                "need_bytes", "need_inodes")
        args = [o.pop(k, None) for k in keys]
        self._job = await asyncio.to_thread(functools.partial(sync._spawn, self._argv, *args, o))
        interval = _duration.seconds(every) if every is not None else self._job.ttl / 3
        if interval <= 0:
            raise ValueError("heartbeat must be longer than 0s")
        self._task = asyncio.get_running_loop().create_task(self._beat(interval, on_error))
        return self

    def __await__(self) -> Generator[Any, None, "AsyncJob"]:
        return self._start().__await__()

    async def _beat(self, interval: float, on_error: Optional[Callable[[HeartbeatFailed], None]]) -> None:
        job = self._require()
        while True:
            await asyncio.sleep(interval)
            try:
                await self._client.heartbeat(job.id)
                job.heartbeats += 1
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - surfaced, never swallowed
                if isinstance(e, NotFound) and await asyncio.to_thread(job._exited_by_itself):
                    return
                err = HeartbeatFailed(job.id, e)
                if self.heartbeat_error is None:
                    self.heartbeat_error = err
                if on_error is not None:
                    on_error(err)
                if isinstance(e, NotFound):
                    return

    def _require(self) -> Job:
        if self._job is None:
            raise RuntimeError("the job has not started: await it or use async with")
        return self._job

    @property
    def id(self) -> str:
        return self._require().id

    @property
    def pid(self) -> int:
        return self._require().pid

    @property
    def process(self) -> Any:
        return self._require().process

    @property
    def info(self) -> t.JobInfo:
        return self._require().info

    @property
    def heartbeats(self) -> int:
        return self._require().heartbeats

    async def wait(self) -> int:
        """Wait for the command to exit and return its exit status."""
        return await asyncio.to_thread(self._require().process.wait)

    async def stop_heartbeats(self) -> None:
        t, self._task = self._task, None
        if t is not None:
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                pass

    async def end(self, wait: bool = True) -> t.JobInfo:
        """End the job and, with wait, return once its cgroup is empty. Idempotent."""
        await self.stop_heartbeats()
        return await asyncio.to_thread(self._require().end, wait)

    async def __aenter__(self) -> "AsyncJob":
        if self._job is None:
            await self._start()
        return self

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        await self.end()
        if self.heartbeat_error is not None:
            if exc is None:
                raise self.heartbeat_error
            if hasattr(exc, "add_note"):  # Python >= 3.11
                getattr(exc, "add_note")(str(self.heartbeat_error))
