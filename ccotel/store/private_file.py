"""A file beside the state written whole or not at all (a temporary file renamed over it) and
private to the user (0600, in a 0700 dir): the one way the caches beside the state are written
(the report cache, kept report answers, the status line's snapshots). Imports nothing but ``os``:
the status line and a kept report answer load it."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not loaded on those paths: mypy reads this block, Python does not
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["write_private"]


def write_private(path: str, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` whole or not at all, private; OSError if it could not be
    (the temporary file is removed then)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
