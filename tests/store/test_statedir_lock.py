"""The state dir's lock cannot be taken from under a running ccotel: it is the directory's own
flock, so deleting or replacing ``ccotel.lock`` lets no second ccotel in; the running one makes
the file again (its pid in it), and stops with a clear reason if the dir itself is moved away or,
where directories cannot be flocked, if another process took the lock file."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat

import pytest

from ccotel.store import statedir
from ccotel.store.state import StateLocked
from ccotel.store.statedir import LOCK_NAME, lock_state_dir


def test_a_deleted_lock_file_lets_no_second_holder_in_and_is_made_again(tmp_path, caplog):
    d = str(tmp_path / "st")
    held = lock_state_dir(d)
    os.unlink(os.path.join(d, LOCK_NAME))
    with pytest.raises(StateLocked):
        lock_state_dir(d)  # (another open file description: flock tells them apart within a process)
    with caplog.at_level(logging.WARNING, logger="ccotel.state"):
        assert held.check() is None
    assert "made it again" in caplog.text
    with open(os.path.join(d, LOCK_NAME)) as f:
        assert f.read().split() == [str(os.getpid())]
    with pytest.raises(StateLocked, match=f"pid {os.getpid()}"):
        lock_state_dir(d)
    assert held.check() is None  # nothing to do
    held.release()
    lock_state_dir(d).release()  # free again


def test_a_replaced_lock_file_is_taken_again(tmp_path):
    d = str(tmp_path / "st")
    held = lock_state_dir(d)
    path = os.path.join(d, LOCK_NAME)
    with open(path + ".new", "w") as f:
        f.write("12345\n")
    os.replace(path + ".new", path)
    assert held.check() is None
    with open(path) as f:
        assert f.read().split() == [str(os.getpid())]
    held.release()


def test_a_state_dir_moved_away_stops_the_holder(tmp_path):
    d = tmp_path / "st"
    held = lock_state_dir(str(d))
    os.rename(d, tmp_path / "st.old")
    d.mkdir()
    second = lock_state_dir(str(d))  # a new, empty dir at the path: its own lock
    reason = held.check()
    assert reason is not None and "moved, replaced or deleted" in reason
    second.release()
    held.release()


def test_where_a_directory_cannot_be_flocked_the_file_is_the_lock_and_a_stolen_one_stops_the_holder(
        tmp_path, monkeypatch):
    real = fcntl.flock

    def no_dirs(fd: int, op: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.ENOLCK, "No locks available")
        real(fd, op)

    monkeypatch.setattr(statedir.fcntl, "flock", no_dirs)
    d = str(tmp_path / "st")
    held = lock_state_dir(d)
    with pytest.raises(StateLocked):
        lock_state_dir(d)
    os.unlink(os.path.join(d, LOCK_NAME))
    thief = lock_state_dir(d)  # nothing else to hold it by: a new file, locked
    reason = held.check()
    assert reason is not None and "stopping" in reason and "is using the state dir" in reason
    thief.release()
    held.release()
