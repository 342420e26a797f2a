"""The end of ccotel run's first catch-up makes the ledger's totals again on a connection of its own,
in a thread (Ledger.end_filling_aside): at several GB that statement reads every call for seconds,
and the live sessions must not wait for it (issue 31, bench row 6). While it runs the pipeline
writes nothing to the ledger: the rows of what it reads meanwhile wait, and so do their
checkpoints; once it is done they are written, kept by the totals' triggers. A backfill (no live
sessions) still ends its fill before it returns."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ccotel.records import SpanRecord
from ccotel.store.ledger import FILLING_CATCH_UP, Ledger
from tests.run.test_live_commits import start, two_turns, written
from tests.store.test_ledger_totals import fresh, totals


def tools(ledger: Ledger) -> int:
    return int(ledger.db.execute("SELECT count(*) FROM tools").fetchone()[0])


def held_fill(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The thread's fill waits for the event returned."""
    go = threading.Event()
    end = Ledger._end_filling  # noqa: SLF001

    def waiting(self: Ledger) -> None:
        assert go.wait(30)
        end(self)

    monkeypatch.setattr(Ledger, "_end_filling", waiting)
    return go


def first_start(tmp_path: Path) -> tuple[str, str, bytes, str]:
    """A history of one turn, a fresh state whose ledger is marked as filling (as ccotel run's first start does)."""
    root, path, lines = two_turns(tmp_path)
    state_dir = str(tmp_path / "state")
    os.makedirs(state_dir)
    ledger = Ledger.in_state_dir(state_dir, (root,))
    ledger.filling(FILLING_CATCH_UP)
    ledger.close()
    return root, path, lines, state_dir


def test_run_ends_its_fill_aside_and_the_rows_read_meanwhile_wait_for_it(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root, path, lines, state_dir = first_start(tmp_path)
    half = len(lines) // 2
    cut = lines.rindex(b"\n", 0, half) + 1
    with open(path, "wb") as f:
        f.write(lines[:cut])  # the history: the first turn
    go = held_fill(monkeypatch)
    delivered: list[SpanRecord] = []
    p = start(root, state_dir, delivered)
    p.backfill(close_all=True, between=lambda _group: None)  # ccotel run's catch-up (livefirst.py)
    ledger = p.usage.ledger
    assert ledger is not None and ledger.busy, "the fill's end should run aside"
    acked_before, _offset, _calls, _counted = written(state_dir)
    history_tools = tools(ledger)

    p.go_live(0.0)
    with open(path, "ab") as f:
        f.write(lines[cut:])  # the live turn, read while the totals are made
    p.poll([path])
    p.process_acks(force=True)
    assert delivered and (written(state_dir)[0], tools(ledger)) == (acked_before, history_tools), \
        "neither the ledger nor the state may be written while the totals are made"
    assert ledger.still_filling() == FILLING_CATCH_UP

    go.set()
    assert ledger._ending is not None  # noqa: SLF001
    ledger._ending.join(10)  # noqa: SLF001
    assert not ledger.busy
    p.process_acks(force=True)
    acked, _offset, calls, _counted = written(state_dir)
    assert tools(ledger) > history_tools and acked > acked_before  # the live turn's rows, then its acknowledgements
    assert ledger.still_filling() is None
    assert totals(ledger) == fresh(ledger) and sum(r[4] for r in totals(ledger)) == calls  # type: ignore[misc]
    ledger.close()


def test_a_backfill_ends_its_fill_before_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, path, lines, state_dir = first_start(tmp_path)
    with open(path, "wb") as f:
        f.write(lines)
    go = held_fill(monkeypatch)  # never set: the thread must not be used
    p = start(root, state_dir, [])
    p.backfill(close_all=True)
    ledger = p.usage.ledger
    assert ledger is not None and not ledger.busy and ledger._ending is None  # noqa: SLF001
    assert ledger.still_filling() is None and totals(ledger) == fresh(ledger) and totals(ledger)
    assert not go.is_set()
    ledger.close()


def test_close_waits_for_the_fill_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _root, _path, _lines, state_dir = first_start(tmp_path)
    go = held_fill(monkeypatch)
    ledger = Ledger.in_state_dir(state_dir)
    ledger.end_filling_aside()
    assert ledger.busy
    threading.Timer(0.2, go.set).start()
    ledger.close()
    again = Ledger.in_state_dir(state_dir)
    assert again.still_filling() is None
    again.close()


def test_an_in_memory_ledger_ends_its_fill_at_once() -> None:
    ledger = Ledger(":memory:")
    ledger.filling(FILLING_CATCH_UP)
    ledger.end_filling_aside()
    assert not ledger.busy and ledger.still_filling() is None
    ledger.close()


def test_a_stop_does_not_wait_for_the_totals_and_the_next_start_makes_them(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """ccotel run stopped while the totals are made is gone within its grace period: close waits
    only as long as it is given; the mark stays, and the next end of the fill makes them."""
    _root, _path, _lines, state_dir = first_start(tmp_path)
    go = held_fill(monkeypatch)
    ledger = Ledger.in_state_dir(state_dir)
    ledger.end_filling_aside()
    ledger.close(wait_s=0.05)
    assert ledger.busy
    again = Ledger.in_state_dir(state_dir)
    assert again.still_filling() == FILLING_CATCH_UP  # never read as totals
    go.set()  # the first thread ends too (an end said twice makes the same totals)
    again.filling(None)
    assert ledger._ending is not None  # noqa: SLF001
    ledger._ending.join(10)  # noqa: SLF001
    assert again.still_filling() is None and totals(again) == fresh(again)
    again.close()
