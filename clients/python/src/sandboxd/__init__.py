"""sandboxd: the runner client for sandboxd's Unix-socket API (standard library only).

    import sandboxd
    c = sandboxd.Client()
    with c.start(["make", "test"], ttl="3m", heartbeat="1m", site="aura-bg") as job:
        job.wait()

Refusals raise :class:`Problem` (subclasses per code family: OutOfSpace, Unavailable,
NotFound, Conflict, Forbidden, InvalidRequest, Internal), carrying code, status, title,
detail, exit_code (the sandboxd CLI's exit status) and the whole problem document.
"""

from ._duration import Duration
from ._errors import (CODES, Conflict, Forbidden, HeartbeatFailed, Internal, InvalidRequest, NotFound,
                      OutOfSpace, Problem, Unavailable, Unreachable)
from ._http import DEFAULT_SOCKET, SOCKET_ENV
from .aio import AsyncClient, AsyncJob
from .client import Client, Job
from .types import JobInfo, Mount, ProblemDocument, Status

__version__ = "0.1.0"

__all__ = [
    "Client", "Job", "AsyncClient", "AsyncJob", "Problem", "InvalidRequest", "Forbidden", "NotFound",
    "Conflict", "OutOfSpace", "Unavailable", "Internal", "Unreachable", "HeartbeatFailed", "CODES",
    "DEFAULT_SOCKET", "SOCKET_ENV", "Duration", "JobInfo", "Mount", "ProblemDocument", "Status",
]
