"""A console sink whose pipe was closed (`| head`) ends the export queue: not an outage, no retry."""

from __future__ import annotations

import os
import threading
import time

from ccotel.export.sinks import ConsoleSink, ExportQueue
from tests.export.test_export_results import spans


def test_a_closed_pipe_ends_the_queue_at_once_without_retry_or_ack() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader went away before anything was written
    out = os.fdopen(write, "w")
    told: list[str] = []
    acked: list[int] = []
    closed = threading.Event()
    queue = ExportQueue(ConsoleSink(out), batch_size=10, max_pending=20, notify=told.append,
                        on_ack=lambda batch, _result: acked.append(len(batch)), on_closed=closed.set)
    queue.submit(spans(10))
    assert closed.wait(5)
    t0 = time.monotonic()
    assert queue.submit(spans(100, first=100))  # nothing waits for a closed output: no backpressure
    assert queue.flush(timeout_s=None) and queue.pending() == 0
    assert time.monotonic() - t0 < 1
    assert queue.closed and queue.failures == 0 and queue.down_since is None
    assert told == [] and acked == []  # no "could not take spans ... sent again"; nothing marked sent
    queue.close()
    out.write("x" * 100_000)
    out.flush()  # the stream now writes to /dev/null: the interpreter's last flush finds no broken pipe
