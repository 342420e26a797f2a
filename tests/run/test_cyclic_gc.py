"""A history is read with fewer collections of the middle generation and the objects of the
process's start frozen out of them (run/cyclic_gc.py); the process's own settings come back
after the read, also when the read raises."""

from __future__ import annotations

import gc

import pytest

from ccotel.run.cyclic_gc import MIDDLE_EVERY, fewer_collections
from tests.run.test_checkpoint import Backend, start
from tests.run.test_pipeline_meta import _history


def test_a_backfill_collects_the_middle_generation_less_often_and_restores_the_thresholds(tmp_path):
    root, state_dir = str(tmp_path / "claude"), str(tmp_path / "st")
    _history(root)
    p = start(root, state_dir, Backend())
    before, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    seen: list[tuple[tuple[int, ...], int]] = []
    p.backfill(close_all=True, between=lambda _group: seen.append((gc.get_threshold(), gc.get_freeze_count())))
    p.process_acks()
    assert seen and all(t == (before[0], max(before[1], MIDDLE_EVERY), before[2]) for t, _ in seen)
    assert all(frozen > frozen_before for _, frozen in seen)
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen_before
    p.state.close()


def test_the_thresholds_come_back_when_the_read_raises():
    before = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt), fewer_collections():
        raise KeyboardInterrupt
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
