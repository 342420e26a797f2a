"""A state.db that holds no ccotel state (0 bytes, or a database without ccotel's schema) is
handled as a corrupt one: moved aside, said once in the log, and rebuilt as on a first start.
(It used to be taken as an empty state: the history sent again without a word.)"""

from __future__ import annotations

import logging
import sqlite3

import pytest

from ccotel.store.sqlite import SqliteState
from ccotel.store.state import Commit
from tests.support.otlp import OtlpReceiver
from tests.whole.test_faults import ccotel, finish, history


@pytest.mark.parametrize("content", ["empty", "other_database"])
def test_a_state_db_holding_no_ccotel_state_is_moved_aside_and_said(tmp_path, caplog, content):
    state_dir = tmp_path / "st"
    state_dir.mkdir()
    db_path = state_dir / "state.db"
    if content == "empty":
        db_path.write_bytes(b"")
    else:
        db = sqlite3.connect(db_path)
        db.execute("CREATE TABLE notes (x TEXT)")
        db.commit()
        db.close()
    with caplog.at_level(logging.INFO, logger="ccotel.state"):
        st = SqliteState(str(state_dir))
    aside = [p for p in state_dir.iterdir() if p.name.startswith("state.db.unusable-")]
    assert st.rebuilt_from is not None and [str(p) for p in aside] == [st.rebuilt_from]
    said = [r.getMessage() for r in caplog.records if st.rebuilt_from in r.getMessage()]
    assert len(said) == 1 and ("0 bytes" if content == "empty" else "no ccotel state") in said[0], said
    assert st.commit(Commit(offsets={"/r/a": (None, 1, 1, None)}))
    st.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ccotel.state"):
        again = SqliteState(str(state_dir))  # the rebuilt one: used, not moved aside again
    assert again.rebuilt_from is None and set(again.files()) == {"/r/a"} and not caplog.records
    again.close()


def test_a_zero_byte_state_db_is_said_once_by_ccotel_backfill(tmp_path):
    root = tmp_path / "claude"
    history(root, sessions=2)
    state_dir = tmp_path / "st"
    state_dir.mkdir(mode=0o700)
    (state_dir / "state.db").write_bytes(b"")
    with OtlpReceiver() as rx:
        code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(state_dir),
                                  endpoint=rx.endpoint), 120)
    assert code == 0, err
    assert err.count("state.db is empty (0 bytes)") == 1, err
    assert len(list(state_dir.glob("state.db.unusable-*"))) == 1
