"""A span sink that keeps spans in memory and answers as it is told: for tests and trials.

    sink = MemorySink()
    sink.retry(times=2)                 # the next two exports: RETRY (nothing kept)
    sink.drop(reason="bad_request")     # then one DROP
    sink.partial(rejected=3)            # then OK, the last 3 spans of that batch rejected
    sink.max_batch = 100                # batches larger than this: DROP too_large (HTTP 413)
    sink.reject_if = lambda spans: ...  # or any answer of one's own (None: the default)

After the scripted answers it answers OK. ``spans`` holds what was delivered, in order,
``rejected`` and ``dropped`` what was not, ``results`` every answer it gave.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from ccotel.export.result import (
    OK,
    REASON_BAD_REQUEST,
    REASON_TOO_LARGE,
    REASON_UNAVAILABLE,
    ExportResult,
    Outcome,
)
from ccotel.records import SpanRecord

__all__ = ["MemorySink"]

Answer = Callable[[Sequence[SpanRecord]], ExportResult]


def _always(result: ExportResult) -> Answer:
    return lambda _spans: result


class MemorySink:
    def __init__(self, max_batch: int | None = None,
                 reject_if: Callable[[Sequence[SpanRecord]], ExportResult | None] | None = None) -> None:
        self.spans: list[SpanRecord] = []  # delivered
        self.rejected: list[SpanRecord] = []  # the rejected part of partial successes
        self.dropped: list[SpanRecord] = []  # whole batches dropped
        self.batches: list[int] = []  # the size of every batch it was sent
        self.results: list[ExportResult] = []
        self.max_batch = max_batch
        self.reject_if = reject_if
        self.closed = False
        self._script: deque[Answer] = deque()
        self._cv = threading.Condition()

    # -- telling it what to answer -------------------------------------------------------------

    def answer(self, answer: ExportResult | Answer, times: int = 1) -> MemorySink:
        """Answer the next ``times`` exports with this result (or what this function returns)."""
        fn = _always(answer) if isinstance(answer, ExportResult) else answer
        with self._cv:
            self._script.extend([fn] * times)
        return self

    def retry(self, times: int = 1, reason: str = REASON_UNAVAILABLE, retry_after: float | None = None,
              message: str = "") -> MemorySink:
        return self.answer(ExportResult.retry(reason, message or f"memory sink: {reason}", retry_after), times)

    def drop(self, times: int = 1, reason: str = REASON_BAD_REQUEST, message: str = "") -> MemorySink:
        text = message or f"memory sink: {reason}"
        return self.answer(lambda spans: ExportResult.drop(len(spans), reason, text), times)

    def partial(self, rejected: int, times: int = 1, message: str = "") -> MemorySink:
        text = message or f"memory sink: {rejected} rejected"
        return self.answer(lambda spans: ExportResult.partial(min(rejected, len(spans)), text), times)

    # -- the sink --------------------------------------------------------------------------------

    def export(self, spans: Sequence[SpanRecord]) -> ExportResult:
        with self._cv:
            self.batches.append(len(spans))
            result: ExportResult | None = None
            if self._script:
                result = self._script.popleft()(spans)
            elif self.reject_if is not None:
                result = self.reject_if(spans)
            if result is None and self.max_batch is not None and len(spans) > self.max_batch:
                result = ExportResult.drop(len(spans), REASON_TOO_LARGE,
                                           f"memory sink: {len(spans)} spans, at most {self.max_batch}")
            if result is None:
                result = OK
            result = result.fitted(len(spans))
            if result.outcome is Outcome.OK:
                took = len(spans) - result.dropped
                self.spans.extend(spans[:took])
                self.rejected.extend(spans[took:])
            elif result.outcome is Outcome.DROP:
                self.dropped.extend(spans)
            self.results.append(result)
            self._cv.notify_all()
            return result

    def describe(self) -> str:
        return "memory"

    def shutdown(self) -> None:
        self.closed = True

    # -- for tests -------------------------------------------------------------------------------

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[SpanRecord]:
        """The delivered spans once there are ``count`` of them (or when ``timeout_s`` ran out)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while len(self.spans) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cv.wait(timeout=remaining)
            return list(self.spans)
