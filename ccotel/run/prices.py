"""The prices of a catch-up's workers, looked up by the process that started them.

A worker prices every call it reads. What the price cache on disk (spans/pricing.py) does not
hold yet, all of it on a first start, would be looked up in genai-prices, imported (with
pydantic) into every worker. Instead a worker asks the process that started it, over a pipe of
its own: genai-prices is imported once, in that process, which answers while it waits for its
workers and writes the answers to the disk cache as it would its own lookups. A worker whose
question goes unanswered (the pipe broken, an error over there) looks the price up itself: a
price is never guessed.
"""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from ccotel.spans.pricing import Price, Pricing, price_as_json, price_from_json

__all__ = ["PriceDesk", "AskCaller", "ANSWER_WAIT_S"]

log = logging.getLogger("ccotel.catchup")

# The caller answers between its own sessions and polls (a genai-prices lookup each); far longer
# means it is gone or stuck.
ANSWER_WAIT_S = 30.0


class PriceDesk:
    """Answers the workers' price questions, with a Pricing of its own (genai-prices' prices only:
    a worker applies ``--prices`` overrides itself). Served by the caller's own thread while it
    waits for its workers (``serve``), never by a thread of its own: a catch-up forks its workers
    when it has no other thread (read/shard.py), and a fork must not copy a lock a thread holds
    (an import's, while genai-prices loads)."""

    def __init__(self, pricing: Pricing) -> None:
        self._pricing = Pricing(cache_path=pricing.cache_path)
        self._conns: list[Connection] = []

    def add(self, conn: Connection) -> None:
        """Answer the questions that come over ``conn`` (the desk closes it once the worker is gone)."""
        self._conns.append(conn)

    def serve(self, wait_s: float = 0.0) -> None:
        """Answer the questions waiting, after up to ``wait_s`` for one (without workers: a sleep)."""
        if not self._conns:
            if wait_s > 0:
                time.sleep(wait_s)
            return
        for conn in wait(self._conns, timeout=wait_s):
            assert isinstance(conn, Connection)
            if not self._answer(conn):
                self._conns.remove(conn)
                conn.close()

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns.clear()

    def _answer(self, conn: Connection) -> bool:
        """False: the worker has closed its end."""
        try:
            model, at_ns = conn.recv()
        except (EOFError, OSError):
            return False
        try:
            answer: tuple[str, Any] = ("ok", price_as_json(self._pricing.listed_price(model, at_ns)))
        except Exception:  # the worker then looks it up itself
            log.exception("looking up the price of %r for a worker", model)
            answer = ("error", None)
        try:
            conn.send(answer)
        except OSError:
            return False
        return True


class AskCaller:
    """A worker's ``Pricing.lookup``: the price of (model, at_ns) from the desk of the process
    that started it, or looked up here when the desk does not answer."""

    def __init__(self, conn: Connection) -> None:
        self._conn: Connection | None = conn

    def __call__(self, model: str, at_ns: int | None) -> Price | None:
        if self._conn is not None:
            try:
                self._conn.send((model, at_ns))
                if self._conn.poll(ANSWER_WAIT_S):
                    status, price = self._conn.recv()
                    if status == "ok":
                        return price_from_json(price)
                else:
                    self._give_up()
            except (EOFError, OSError):
                self._give_up()
        return Pricing(cache_path="").listed_price(model, at_ns)

    def _give_up(self) -> None:
        """No more questions: a late answer must never be taken for the next question's."""
        assert self._conn is not None
        self._conn.close()
        self._conn = None
