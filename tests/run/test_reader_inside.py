"""Reads stay inside the roots while a checked file is read without resolving its path again
(Reader._trust): only the file the check saw (device, inode) is read within _INSIDE_TTL_S; another
file under that path, or reached through a directory swapped for a symlink, is checked first."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ccotel.assemble.assembler import Assembler
from ccotel.assemble.closing import Timeouts
from ccotel.read.discover import classify
from ccotel.run import reader as reader_mod
from ccotel.run.reader import FileState, Reader

LINE = b'{"type":"summary","summary":"t","leafUuid":"u%d"}\n'


def _reader(root: Path) -> Reader:
    return Reader((str(root),), Assembler(Timeouts()), time.time_ns, None, lambda: True, {}, False,
                  1 << 20, 10**12, 10**9)


def _follow(reader: Reader, root: Path, path: Path) -> FileState:
    tf = classify(str(root), str(path))
    assert tf is not None
    return reader.track(str(root), tf)


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "claude"
    session_dir = root / "projects" / "-p"
    session_dir.mkdir(parents=True)
    path = session_dir / "11111111-1111-1111-1111-111111111111.jsonl"
    path.write_bytes(LINE % 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    return root, path, outside


def test_a_checked_file_is_trusted_then_read_without_resolving_its_path(tmp_path, monkeypatch):
    root, path, _ = _setup(tmp_path)
    r = _reader(root)
    state = _follow(r, root, path)
    r.read(state, accept_unterminated=False)
    assert r.stats.lines == 1 and state.inside == (path.stat().st_dev, path.stat().st_ino)
    checks: list[str] = []
    monkeypatch.setattr(reader_mod, "within_root", lambda root_, p: checks.append(p) or True)
    with open(path, "ab") as f:
        f.write(LINE % 2)
    r.read(state, accept_unterminated=False)
    assert r.stats.lines == 2 and checks == []  # the same file: no resolution


def test_a_file_replaced_by_a_symlink_out_of_the_root_is_not_read(tmp_path):
    root, path, outside = _setup(tmp_path)
    r = _reader(root)
    state = _follow(r, root, path)
    r.read(state, accept_unterminated=False)
    secret = outside / "secret.jsonl"
    secret.write_bytes(LINE % 7 * 3)
    path.unlink()
    path.symlink_to(secret)
    r.read(state, accept_unterminated=False)
    assert r.stats.lines == 1 and r.stats.errors["path_outside_root"] == 1
    assert state.tailer.offset == len(LINE % 1)  # nothing of the other file taken


def test_a_session_dir_swapped_for_a_symlink_out_of_the_root_is_not_read(tmp_path):
    root, path, outside = _setup(tmp_path)
    r = _reader(root)
    state = _follow(r, root, path)
    r.read(state, accept_unterminated=False)
    (outside / path.name).write_bytes(LINE % 7 * 3)  # another file of the same name, elsewhere
    path.parent.rename(tmp_path / "moved")
    path.parent.symlink_to(outside)
    r.read(state, accept_unterminated=False)
    assert r.stats.lines == 1 and r.stats.errors["path_outside_root"] == 1


def test_a_file_replaced_inside_the_root_is_checked_and_read(tmp_path, monkeypatch):
    root, path, _ = _setup(tmp_path)
    r = _reader(root)
    state = _follow(r, root, path)
    r.read(state, accept_unterminated=False)
    tmp = path.with_suffix(".new")
    tmp.write_bytes(LINE % 5 + LINE % 6)
    os.replace(tmp, path)  # another inode: read again from the start, after a check
    checks: list[str] = []
    real = reader_mod.within_root
    monkeypatch.setattr(reader_mod, "within_root", lambda root_, p: checks.append(p) or real(root_, p))
    r.read(state, accept_unterminated=False)
    assert checks == [str(path)] and r.stats.lines == 3 and r.stats.file_resets == 1
    assert state.inside == (path.stat().st_dev, path.stat().st_ino)


@pytest.mark.parametrize("expired", [False, True])
def test_the_same_file_moved_out_and_linked_back_is_refused_once_its_trust_expires(tmp_path, monkeypatch, expired):
    """The same inode moved out of the root is read until the entry expires (as within_root's own
    directory cache allows), then refused."""
    from ccotel.read import discover

    monkeypatch.setattr(reader_mod, "_INSIDE_TTL_S", 0.2)
    monkeypatch.setattr(discover, "_DIR_TTL_S", 0.2)
    root, path, outside = _setup(tmp_path)
    r = _reader(root)
    state = _follow(r, root, path)
    r.read(state, accept_unterminated=False)
    moved = outside / path.name
    path.rename(moved)
    path.symlink_to(moved)
    with open(moved, "ab") as f:
        f.write(LINE % 2)
    if expired:
        time.sleep(0.3)
    r.read(state, accept_unterminated=False)
    assert r.stats.lines == (1 if expired else 2)
    assert r.stats.errors["path_outside_root"] == (1 if expired else 0)


def test_a_file_never_checked_inside_is_never_opened(tmp_path, monkeypatch):
    """A symlink out of the root is refused before any open (a FIFO there would block, a device
    would be touched): the identity shortcut applies only to a file checked before."""
    import builtins

    root, path, outside = _setup(tmp_path)
    secret = outside / "s.jsonl"
    secret.write_bytes(LINE % 9)
    link = path.parent / "22222222-2222-2222-2222-222222222222.jsonl"
    link.symlink_to(secret)
    opened: list[str] = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open",
                        lambda f, *a, **kw: opened.append(os.path.realpath(f)) or real_open(f, *a, **kw))
    r = _reader(root)
    tf = classify(str(root), str(link))
    assert tf is not None
    st = r.track(str(root), tf)
    r.read(st, accept_unterminated=False)
    r.read(st, accept_unterminated=False)
    assert str(secret) not in opened and r.stats.errors["path_outside_root"] == 2
