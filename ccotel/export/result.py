"""What one export attempt came to: OK, RETRY or DROP, as the OTLP specification sorts answers.

A sink returns an ``ExportResult`` for every batch; ``ExportQueue`` acts on it (retry with
backoff, split a batch the backend found too large, or acknowledge spans that are final) and
``Pipeline.acknowledge`` counts delivered and dropped spans apart.

- OK: the backend took the batch. ``drops`` may still name spans it rejected (OTLP
  ``partial_success.rejected_spans``) or that could not be encoded: those are final too.
- RETRY: nothing was delivered and sending the same batch again may work (connection refused,
  timeout, HTTP 429/502/503/504, gRPC UNAVAILABLE, RESOURCE_EXHAUSTED with RetryInfo, ...).
  ``retry_after`` is the wait the backend asked for, if it named one.
- DROP: the backend refused the batch for good (HTTP 400 and the other non-retryable codes);
  ``drops`` counts the whole batch. Reason ``too_large`` (HTTP 413) tells the queue to split.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "CONNECTIVITY_REASONS",
    "OK",
    "REASON_BAD_REQUEST",
    "REASON_CONNECTION",
    "REASON_ERROR",
    "REASON_PARTIAL",
    "REASON_REDIRECT",
    "REASON_THROTTLED",
    "REASON_TIMEOUT",
    "REASON_TOO_LARGE",
    "REASON_UNAVAILABLE",
    "REASON_UNENCODABLE",
    "ExportResult",
    "Outcome",
]


class Outcome(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    DROP = "drop"


# Reasons are label values of ccotel_spans_dropped_total: a small, bounded set. Other HTTP
# statuses are "http_<code>", other gRPC codes "grpc_<name>".
REASON_PARTIAL = "partial_success"  # 2xx whose partial_success rejected some spans
REASON_BAD_REQUEST = "bad_request"  # HTTP 400, gRPC INVALID_ARGUMENT
REASON_TOO_LARGE = "too_large"  # HTTP 413, gRPC "message larger than max": split, then drop one span
REASON_UNENCODABLE = "unencodable"  # our encoder could not write the span
REASON_CONNECTION = "connection"  # refused, reset, DNS: nothing reached the backend
REASON_TIMEOUT = "timeout"  # no answer in OTEL_EXPORTER_OTLP_TIMEOUT
REASON_UNAVAILABLE = "unavailable"  # HTTP 502/503/504, gRPC UNAVAILABLE and the other retryable codes
REASON_THROTTLED = "throttled"  # HTTP 429, gRPC RESOURCE_EXHAUSTED with RetryInfo
REASON_ERROR = "error"  # the sink raised: a bug of ours, retried like an outage
REASON_REDIRECT = "redirect"  # HTTP 3xx: the endpoint setting is wrong; spans are held until it is fixed

#: RETRY reasons that mean the backend could not be reached or did not answer.
CONNECTIVITY_REASONS = frozenset((REASON_CONNECTION, REASON_TIMEOUT, REASON_UNAVAILABLE))


@dataclass(frozen=True, slots=True)
class ExportResult:
    outcome: Outcome
    #: Spans that will never be delivered, by reason (DROP: the whole batch; OK: rejected ones).
    drops: tuple[tuple[str, int], ...] = ()
    #: Why it was retried or dropped (a bounded label value); "" for a plain OK.
    reason: str = ""
    #: Seconds the backend asked to wait before the next attempt (Retry-After, RetryInfo).
    retry_after: float | None = None
    #: What the backend said, for the log: status and its error message.
    message: str = ""

    @property
    def dropped(self) -> int:
        """Spans of the batch that are final but not delivered."""
        return sum(n for _, n in self.drops)

    @classmethod
    def retry(cls, reason: str, message: str = "", retry_after: float | None = None) -> ExportResult:
        return cls(Outcome.RETRY, reason=reason, message=message, retry_after=retry_after)

    @classmethod
    def drop(cls, spans: int, reason: str, message: str = "") -> ExportResult:
        return cls(Outcome.DROP, drops=((reason, spans),) if spans else (), reason=reason, message=message)

    @classmethod
    def partial(cls, rejected: int, message: str = "") -> ExportResult:
        """A 2xx with partial_success: ``rejected`` spans were refused, the rest delivered."""
        return cls(Outcome.OK, drops=((REASON_PARTIAL, rejected),) if rejected > 0 else (),
                   reason=REASON_PARTIAL if rejected > 0 or message else "", message=message)

    def plus_dropped(self, spans: int, reason: str) -> ExportResult:
        """This result for the spans that were sent, plus ``spans`` dropped before sending.

        A RETRY stays a RETRY with nothing dropped: the whole batch comes back, and is sorted again.
        """
        if spans <= 0 or self.outcome is Outcome.RETRY:
            return self
        return ExportResult(self.outcome, self.drops + ((reason, spans),), self.reason or reason,
                            self.retry_after, self.message)

    def fitted(self, spans: int) -> ExportResult:
        """The same answer with ``drops`` true to a batch of ``spans``: a DROP drops all of it
        (the remainder under ``reason``), nothing drops more than the batch."""
        want = spans if self.outcome is Outcome.DROP else min(self.dropped, spans)
        if self.outcome is Outcome.RETRY or self.dropped == want:
            return self
        drops, left = [], want
        for reason, n in self.drops:
            if left > 0 and n > 0:
                drops.append((reason, min(n, left)))
                left -= min(n, left)
        if left > 0:
            drops.append((self.reason or "dropped", left))
        return ExportResult(self.outcome, tuple(drops), self.reason, self.retry_after, self.message)


OK = ExportResult(Outcome.OK)
