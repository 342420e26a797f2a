"""How findings name what they are about (counts, lists of paths cut short, users, why an OS call
failed), in one place so every check says it the same way.
"""

from __future__ import annotations

import errno
import pwd
from collections.abc import Iterable

__all__ = ["LIST_AT_MOST", "why", "counted", "listing", "user_name"]

LIST_AT_MOST = 6  # paths named in a message; --json lists them all


def why(exc: OSError) -> str:
    return "permission denied" if exc.errno in (errno.EACCES, errno.EPERM) else (exc.strerror or str(exc))


def counted(n: int, one: str, many: str) -> str:
    return "" if n == 0 else f"1 {one}" if n == 1 else f"{n} {many}"


def listing(paths: Iterable[str]) -> str:
    items = list(paths)
    shown = ", ".join(items[:LIST_AT_MOST])
    return shown + (f" and {len(items) - LIST_AT_MOST} more (--json lists them)" if len(items) > LIST_AT_MOST else "")


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
