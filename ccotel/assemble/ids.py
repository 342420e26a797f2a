"""Deterministic trace and span ids.

Ids are digests of what identifies a thing in the transcript (session id, prompt uuid,
message id, tool_use id, agent id), so two exports of the same transcript, from two
restarts or two machines, produce the same ids.
"""

from __future__ import annotations

from ccotel.hashing import blake2b

__all__ = ["trace_id", "span_id"]


def _digest(parts: tuple[str, ...], size: int) -> int:
    h = blake2b("\x1f".join(parts).encode("utf-8", "surrogatepass"), digest_size=size)
    value = int.from_bytes(h.digest(), "big")
    return value or 1  # an all-zero id is invalid in OTLP


def trace_id(*parts: str) -> int:
    return _digest(("trace",) + parts, 16)


def span_id(*parts: str) -> int:
    return _digest(("span",) + parts, 8)
