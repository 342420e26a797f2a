"""write_private: the caches beside the state are written whole or not at all, private."""

from __future__ import annotations

import os
import stat

import pytest

from ccotel.store.private_file import write_private


def test_a_file_is_written_private_in_a_private_dir(tmp_path):
    path = tmp_path / "new" / "f.bin"
    write_private(str(path), [b"one ", b"two"])
    assert path.read_bytes() == b"one two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def chunks():
        yield b"half"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_private(str(path), chunks())
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]
