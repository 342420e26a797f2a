"""What the report's transcript reader takes: its own module, so that a report answered from the
report cache (group_read.py) builds it without loading the reader (transcripts.py: the parser,
the shard planner, multiprocessing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ccotel.spans.pricing import Pricing

__all__ = ["ReadOptions"]


@dataclass(frozen=True)
class ReadOptions:
    """What the reader takes of pipeline.Options (which it takes too): ``ccotel report`` builds
    these, so reading transcripts does not load the pipeline (imports a report has no use for:
    metrics, delivery, OTLP...)."""

    roots: tuple[str, ...]
    pricing: Pricing
    since_ns: int | None = None
    max_line_bytes: int = 64 << 20  # pipeline.Options' default
