"""Typed errors: every non-2xx answer of sandboxd is an RFC 9457 problem document."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Type

# code -> (HTTP status, exit status of the sandboxd CLI), as CONTRACT §3 and api/errors.go.
CODES: Dict[str, Tuple[int, int]] = {
    "bad_request": (400, 64),
    "forbidden": (403, 77),
    "not_found": (404, 78),
    "method_not_allowed": (405, 64),
    "payload_too_large": (413, 64),
    "conflict": (409, 65),
    "replace_sandbox": (507, 10),
    "disk_full": (507, 73),
    "inodes_exhausted": (507, 73),
    "mount_unavailable": (503, 75),
    "filesystem_unavailable": (503, 75),
    "state_unavailable": (503, 75),
    "busy": (503, 75),
    "jobs_unavailable": (503, 69),
    "internal": (500, 70),
}


class Problem(Exception):
    """A refusal or failure answered by the daemon as application/problem+json.

    ``doc`` is the whole problem document (a ``disk_full`` carries its ``filesystem``
    object); ``detail`` is its fingerprint, written for a person who has only this line.
    """

    code: str
    status: int
    title: str
    detail: str
    exit_code: int
    doc: Dict[str, Any]
    retry_after: Optional[float]

    def __init__(self, doc: Mapping[str, Any], status: Optional[int] = None,
                 retry_after: Optional[float] = None) -> None:
        self.doc = dict(doc)
        self.code = str(self.doc.get("code") or "internal")
        self.status = int(status if status is not None else self.doc.get("status") or 500)
        self.title = str(self.doc.get("title") or self.code.replace("_", " "))
        self.detail = str(self.doc.get("detail") or "")
        self.exit_code = CODES.get(self.code, (0, 70))[1]
        self.retry_after = retry_after
        super().__init__(f"sandboxd: {self.code} ({self.status}): {self.detail}")

    @property
    def filesystem(self) -> Optional[Dict[str, Any]]:
        """The filesystem object of a space refusal (disk_full, inodes_exhausted, ...)."""
        fs = self.doc.get("filesystem")
        return fs if isinstance(fs, dict) else None


class InvalidRequest(Problem):
    """bad_request, method_not_allowed, payload_too_large: the call itself is wrong."""


class Forbidden(Problem):
    """forbidden: this peer may not make a mutating call."""


class NotFound(Problem):
    """not_found: no such route, site, mount or job (a job that ended, for a heartbeat)."""


class Conflict(Problem):
    """conflict: the job id or mount name is registered and alive."""


class OutOfSpace(Problem):
    """disk_full, inodes_exhausted, replace_sandbox: the call's needs do not fit."""


class Unavailable(Problem):
    """mount_unavailable, filesystem_unavailable, state_unavailable, busy, jobs_unavailable:
    retry later (``retry_after`` holds a busy answer's Retry-After)."""


class Internal(Problem):
    """internal: a bug in sandboxd; the detail says what failed."""


FAMILIES: Dict[str, Type[Problem]] = {
    "bad_request": InvalidRequest,
    "method_not_allowed": InvalidRequest,
    "payload_too_large": InvalidRequest,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "conflict": Conflict,
    "replace_sandbox": OutOfSpace,
    "disk_full": OutOfSpace,
    "inodes_exhausted": OutOfSpace,
    "mount_unavailable": Unavailable,
    "filesystem_unavailable": Unavailable,
    "state_unavailable": Unavailable,
    "busy": Unavailable,
    "jobs_unavailable": Unavailable,
    "internal": Internal,
}


def problem_from(doc: Mapping[str, Any], status: int, retry_after: Optional[float] = None) -> Problem:
    """The Problem subclass of the document's code family."""
    cls = FAMILIES.get(str(doc.get("code")), Problem)
    return cls(doc, status, retry_after)


class Unreachable(OSError):
    """The daemon could not be reached (no socket, refused, permission denied, timed
    out): no verdict, which is not a refusal."""

    def __init__(self, socket: str, reason: str) -> None:
        self.socket = socket
        self.reason = reason
        super().__init__(f"sandboxd is not reachable at {socket}: {reason}")


class HeartbeatFailed(Exception):
    """A heartbeat of a started job failed. Raised when the job's block ends (unless the
    block raised on its own, which then carries this as its __context__ note) and passed to
    the ``on_heartbeat_error`` callback as it happens: never swallowed."""

    def __init__(self, job_id: str, cause: BaseException) -> None:
        self.job_id = job_id
        self.cause = cause
        super().__init__(f"heartbeat of job {job_id} failed: {cause}")
