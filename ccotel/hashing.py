"""blake2b and sha256 from CPython's own modules, the same digests as ``hashlib``'s, without
importing ``hashlib``: it loads OpenSSL's libcrypto for its other algorithms (``hashlib.blake2b``
is ``_blake2``'s in any case), and every process that hashes would hold it, each catch-up worker
among them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without CPython's _blake2
    from hashlib import blake2b

__all__ = ["blake2b", "sha256"]


def _sha256() -> Callable[..., Any]:
    for name in ("_sha256", "_sha2"):  # CPython up to 3.11; 3.12 on
        try:
            found: Callable[..., Any] = importlib.import_module(name).sha256
            return found
        except (ImportError, AttributeError):
            continue
    import hashlib  # pragma: no cover - another interpreter

    return hashlib.sha256  # pragma: no cover


sha256 = _sha256()
