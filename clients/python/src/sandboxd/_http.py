"""HTTP/1.1 over sandboxd's Unix socket with http.client (standard library only)."""

from __future__ import annotations

import errno
import http.client
import json
import os
import socket as _socket
import threading
from typing import Any, Optional, Tuple

from ._errors import Problem, Unreachable, problem_from

DEFAULT_SOCKET = "/run/sandboxd/sandboxd.sock"
SOCKET_ENV = "SANDBOXD_SOCKET"
PROBLEM_TYPE = "application/problem+json"


def socket_path(socket: Optional[str]) -> str:
    """socket, else $SANDBOXD_SOCKET, else the default path."""
    return socket or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("sandboxd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _reason(path: str, err: BaseException) -> str:
    if isinstance(err, (TimeoutError, _socket.timeout)):
        return "timed out"
    e = getattr(err, "errno", None)
    if e == errno.ENOENT:
        return "no socket (is the daemon running?)"
    if e == errno.ECONNREFUSED:
        return "connection refused (the socket exists but no daemon is accepting on it)"
    if e in (errno.EACCES, errno.EPERM):
        return "permission denied on the socket (is this user in the socket's group?)"
    if e == errno.ENOTSOCK or (os.path.exists(path) and not _is_socket(path)):
        return "not a socket"
    return str(err) or type(err).__name__


def _is_socket(path: str) -> bool:
    import stat
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


class Transport:
    """One kept-alive connection per thread; a call on a connection the daemon closed
    while idle is retried once on a fresh one."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._local = threading.local()
        self._mu = threading.Lock()
        self._all: "set[_UnixConnection]" = set()  # every thread's connection, for close()

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._mu:
                self._all.discard(conn)

    def close(self) -> None:
        """Closes every kept-alive connection (of every thread)."""
        with self._mu:
            conns, self._all = self._all, set()
        for c in conns:
            c.close()
        self._local = threading.local()

    def request(self, method: str, path: str, body: Any = None,
                timeout: Optional[float] = None, accept_unavailable: bool = False) -> Any:
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        status, ctype, raw, retry = self._exchange(method, path, data, headers, timeout or self.timeout)
        is_problem = ctype.split(";")[0].strip() == PROBLEM_TYPE
        if 200 <= status < 300 or (accept_unavailable and status == 503 and not is_problem):
            if not raw:
                return None
            return json.loads(raw)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict) or not doc.get("code"):
            doc = {"type": "about:blank", "status": status, "code": "internal", "title": "internal error",
                   "detail": f"unexpected answer {status} to {method} {path}: {raw[:200]!r}"}
        raise problem_from(doc, status, retry)

    def _exchange(self, method: str, path: str, data: Optional[bytes], headers: dict,
                  timeout: float) -> Tuple[int, str, bytes, Optional[float]]:
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                conn = _UnixConnection(self.path, timeout)
                self._local.conn = conn
                with self._mu:
                    self._all.add(conn)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop()
                if reused and attempt == 0:
                    continue  # the daemon closed the idle connection: once more, fresh
                raise Unreachable(self.path, _reason(self.path, e)) from e
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise Unreachable(self.path, _reason(self.path, e)) from e
            if resp.will_close:
                self._drop()
            retry = resp.getheader("Retry-After")
            return (resp.status, resp.getheader("Content-Type") or "", raw,
                    float(retry) if retry and retry.isdigit() else None)
        raise AssertionError("unreachable")


__all__ = ["Transport", "socket_path", "Problem", "DEFAULT_SOCKET", "SOCKET_ENV"]
