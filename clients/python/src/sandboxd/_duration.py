"""Go duration strings ("3m", "1m30s", "500ms"), which sandboxd takes and gives."""

from __future__ import annotations

import re
from typing import Union

Duration = Union[str, int, float]

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def seconds(d: Duration) -> float:
    """Seconds of a Go duration string, or of a number of seconds."""
    if isinstance(d, bool):
        raise TypeError("a duration is a Go duration string or a number of seconds")
    if isinstance(d, (int, float)):
        return float(d)
    s = d.strip()
    if s == "0":
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    total, pos = 0.0, 0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"invalid duration {d!r}: want a Go duration such as \"3m\" or \"500ms\"")
    return sign * total


def go(d: Duration) -> str:
    """The Go duration string of d (a string is checked and passed through)."""
    if isinstance(d, str):
        seconds(d)
        return d
    ms = round(seconds(d) * 1000)
    return f"{ms}ms"
