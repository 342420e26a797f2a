"""A catch-up worker's prices from the process that started it (run/prices.py): the same as its own."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from ccotel.run.prices import AskCaller, PriceDesk
from ccotel.spans.pricing import Pricing

DAY = 86_400 * 10**9
AT_NS = 1_760_000_000 * 10**9


@pytest.mark.parametrize("threaded", [False, True])
def test_the_desk_answers_what_the_worker_would_have_looked_up(tmp_path, threaded):
    desk = PriceDesk(Pricing(cache_path=str(tmp_path / "prices.jsonl")), threaded=threaded)
    asks, answers = multiprocessing.Pipe(duplex=True)
    desk.add(answers)
    stop = threading.Event()
    # unthreaded: the caller's loop, while it waits for its workers (threaded: serve only sleeps)
    serving = threading.Thread(target=lambda: [desk.serve(0.05) for _ in iter(stop.is_set, True)], daemon=True)
    serving.start()
    try:
        worker = Pricing(cache_path=str(tmp_path / "prices.jsonl"), lookup=AskCaller(asks))
        own = Pricing(cache_path="")
        for model, at in (("claude-opus-4-6", AT_NS), ("claude-sonnet-4-5-20250929", AT_NS + 40 * DAY),
                          ("claude-haiku-4-5", None), ("no-such-model", AT_NS)):
            assert worker.price(model, at) == own.price(model, at), model
    finally:
        stop.set()
        serving.join(timeout=5)
        desk.close()
    # the desk kept them on disk, once: a worker does not write what it was told
    lines = (tmp_path / "prices.jsonl").read_text().splitlines()
    assert len(lines) == 3


def test_a_worker_whose_desk_is_gone_looks_the_price_up_itself():
    asks, answers = multiprocessing.Pipe(duplex=True)
    answers.close()
    worker = Pricing(cache_path="", lookup=AskCaller(asks))
    assert worker.price("claude-opus-4-6", AT_NS) == Pricing(cache_path="").price("claude-opus-4-6", AT_NS)
    assert worker.price("claude-opus-4-6", AT_NS) is not None
