"""The prices of a catch-up's workers, looked up by the process that started them.

A worker prices every call it reads. What the price cache on disk (spans/pricing.py) does not
hold yet, all of it on a first start, would be looked up in genai-prices, imported (with
pydantic) into every worker. Instead a worker asks the process that started it, over a pipe of
its own: genai-prices is imported once, in that process, which answers (from a thread, or from
its loop while it waits for forked workers) and writes the answers to the disk cache as it would
its own lookups. A worker whose question goes unanswered (the pipe broken, an error over there)
looks the price up itself: a price is never guessed.
"""

from __future__ import annotations

import logging
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from ccotel.spans.pricing import Price, Pricing, price_as_json, price_from_json

__all__ = ["PriceDesk", "AskCaller", "ANSWER_WAIT_S"]

log = logging.getLogger("ccotel.catchup")

# A question is answered at once, or between the caller's polls (a genai-prices lookup each); far
# longer means the caller is gone or stuck.
ANSWER_WAIT_S = 30.0
_THREAD_POLL_S = 0.1  # how often the desk's thread sees new workers and whether it is to stop


class PriceDesk:
    """Answers the workers' price questions, with a Pricing of its own (genai-prices' prices only:
    a worker applies ``--prices`` overrides itself). ``threaded`` (workers spawned): a thread of
    its own answers at once. Otherwise (workers forked: the caller has no other thread, and a fork
    must not copy a lock a thread holds, as an import's while genai-prices loads) the caller's
    loop answers while it waits for its workers (``serve``)."""

    def __init__(self, pricing: Pricing, threaded: bool = False) -> None:
        self._pricing = Pricing(cache_path=pricing.cache_path)
        self._conns: list[Connection] = []
        self._threaded = threaded
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, conn: Connection) -> None:
        """Answer the questions that come over ``conn`` (the desk closes it once the worker is gone)."""
        with self._lock:
            self._conns.append(conn)
            if self._threaded and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ccotel-prices", daemon=True)
                self._thread.start()

    def serve(self, wait_s: float = 0.0) -> None:
        """Answer the questions waiting, after up to ``wait_s`` for one (threaded, or without
        workers: a sleep)."""
        if self._threaded or not self._conns:
            if wait_s > 0:
                time.sleep(wait_s)
            return
        self._answer_ready(wait_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=ANSWER_WAIT_S)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._answer_ready(_THREAD_POLL_S)

    def _answer_ready(self, wait_s: float) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in wait(conns, timeout=wait_s) if conns else ():
            assert isinstance(conn, Connection)
            if not self._answer(conn):
                with self._lock:
                    self._conns.remove(conn)
                conn.close()
        if not conns and wait_s > 0:
            time.sleep(wait_s)

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
