"""The watcher: which paths changed under a root, on Linux through inotify itself (a watch per
directory, one reader thread), elsewhere through watchdog."""

from __future__ import annotations

import errno
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from ccotel.read import watch
from ccotel.read.watch import Watcher
from tests.support.deep_tree import make_deep, remove_deep


def collect(w: Watcher, want: set[str], timeout_s: float = 5.0) -> set[str]:
    """Dirty paths until every wanted one was seen (bounded)."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while not want <= seen and time.monotonic() < deadline:
        seen |= w.wait(0.1)
    return seen


def _watching_one_file(root: Path, projects: Path) -> tuple[Path, Watcher]:
    """A transcript ``-p/s1.jsonl`` under ``projects``, and a started watcher of ``root``."""
    main = projects / "-p" / "s1.jsonl"
    main.write_bytes(b"{}\n")
    w = Watcher((str(root),))
    w.start()
    return main, w


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    projects = tmp_path / "claude" / "projects"
    (projects / "-p").mkdir(parents=True)
    return tmp_path / "claude", projects


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_appends_new_files_and_new_directories_are_seen(tree: tuple[Path, Path]) -> None:
    root, projects = tree
    main, w = _watching_one_file(root, projects)
    try:
        assert w.mode == "inotify"
        assert str(projects) in collect(w, {str(projects)})  # the root itself: read what was there
        with open(main, "ab") as f:
            f.write(b'{"a": 1}\n')
        assert str(main) in collect(w, {str(main)})
        # A session directory and its subagents/ made after the start (nested, in one go): watched
        # at once, so the first append to a file in it is seen.
        sub = projects / "-p" / "s1" / "subagents"
        sub.mkdir(parents=True)
        agent = sub / "agent-a1.jsonl"
        seen = collect(w, {str(projects / "-p" / "s1")})
        agent.write_bytes(b"{}\n")
        # The file itself, or (when it came before the reader thread watched subagents/) its
        # directory, which the pipeline lists: either way it is read.
        deadline = time.monotonic() + 5
        while not {str(agent), str(sub)} & seen and time.monotonic() < deadline:
            seen |= w.wait(0.1)
        assert str(projects / "-p" / "s1") in seen and {str(agent), str(sub)} & seen
        for _ in range(3):
            with open(agent, "ab") as f:
                f.write(b'{"b": 2}\n')
        assert str(agent) in collect(w, {str(agent)})
        assert w.take_gone() == set()
    finally:
        w.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_deleted_files_and_directories_moved_away_are_gone(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, projects = tree
    kept, deleted = projects / "-p" / "kept.jsonl", projects / "-p" / "deleted.jsonl"
    session = projects / "-p" / "s2"
    (session / "subagents").mkdir(parents=True)
    for f in (kept, deleted, session / "subagents" / "agent-b.jsonl"):
        f.write_bytes(b"{}\n")
    w = Watcher((str(root),))
    w.start()
    try:
        collect(w, {str(projects)})
        deleted.unlink()
        collect(w, {str(deleted)})
        outside = tmp_path / "elsewhere"
        shutil.move(str(session), str(outside))
        collect(w, {str(session)})
        assert w.take_gone() == {str(deleted), str(session)}
        # The moved directory's old watches are dropped: what is written there now is not ours.
        with open(outside / "subagents" / "agent-b.jsonl", "ab") as f:
            f.write(b'{"c": 3}\n')
        with open(kept, "ab") as f:
            f.write(b"{}\n")
        seen = collect(w, {str(kept)})
        assert str(kept) in seen and not any(p.startswith(str(session)) or "elsewhere" in p for p in seen)
    finally:
        w.stop()


def test_polling_when_asked(tree: tuple[Path, Path]) -> None:
    root, projects = tree
    w = Watcher((str(root),), force_polling=True, poll_interval_s=0.1)
    w.start()
    try:
        assert w.mode == "polling"
        f = projects / "-p" / "s3.jsonl"
        f.write_bytes(b"{}\n")
        assert str(f) in collect(w, {str(f)})
    finally:
        w.stop()


def test_a_root_that_appears_later_is_watched(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    w = Watcher((str(root),))
    w.start()
    try:
        assert not w.ensure_roots()
        (root / "projects" / "-p").mkdir(parents=True)
        assert w.ensure_roots()
        f = root / "projects" / "-p" / "s4.jsonl"
        f.write_bytes(b"{}\n")
        assert str(f) in collect(w, {str(f)})
        os.remove(f)
    finally:
        w.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_watchdog_where_inotify_simple_is_not_installed(tree: tuple[Path, Path], monkeypatch) -> None:
    root, projects = tree
    monkeypatch.setattr(watch, "_has_inotify_simple", lambda: False)
    w = Watcher((str(root),))
    w.start()
    try:
        assert w.mode == "inotify" and w._tree is None and w._observer is not None
        collect(w, {str(projects)})
        f = projects / "-p" / "s5.jsonl"
        f.write_bytes(b"{}\n")
        assert str(f) in collect(w, {str(f)})
    finally:
        w.stop()


def _no_watches(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "inotify watch limit reached")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
@pytest.mark.parametrize("backend", ["inotify_simple", "watchdog"])
def test_out_of_watches_falls_back_to_polling(tree: tuple[Path, Path], monkeypatch, backend: str) -> None:
    """Either native backend failing mid-way (the root already counted as watched) polls every root."""
    root, projects = tree
    if backend == "inotify_simple":
        monkeypatch.setattr(watch._InotifyTree, "add_tree", _no_watches)
    else:
        monkeypatch.setattr(watch, "_has_inotify_simple", lambda: False)
        monkeypatch.setattr(watch.Observer, "start", _no_watches)
    w = Watcher((str(root),), poll_interval_s=0.1)
    w.start()
    try:
        assert w.mode == "polling" and w._tree is None
        f = projects / "-p" / "s6.jsonl"
        f.write_bytes(b"{}\n")
        assert str(f) in collect(w, {str(f)})
    finally:
        w.stop()


def test_the_inotify_read_gap_is_the_poll_gap() -> None:
    """A read gap above the runner's poll gap would delay polls; below it, it only costs wake-ups."""
    from ccotel.run.runner import POLL_GAP_S

    assert watch._READ_GAP_S == POLL_GAP_S


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_the_inotify_reader_takes_the_runners_gap(tree: tuple[Path, Path]) -> None:
    """runner.poll_gap widens the gap while a heavy stream lasts: the reader thread (which spaces
    the batches on Linux) reads no sooner than that after its last read."""
    root, projects = tree
    main, w = _watching_one_file(root, projects)
    try:
        assert w.mode == "inotify" and w._tree is not None
        collect(w, {str(projects)})
        w.space_batches(0.3)
        assert w._tree.gap_s == 0.3
        with open(main, "ab") as f:
            f.write(b'{"a": 1}\n')
        assert str(main) in collect(w, {str(main)})  # the read after it
        t0 = time.monotonic()
        with open(main, "ab") as f:
            f.write(b'{"a": 2}\n')
        assert str(main) in collect(w, {str(main)})
        assert time.monotonic() - t0 >= 0.2  # waited out the gap since that read
    finally:
        w.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_an_unreadable_directory_is_skipped_and_the_rest_stays_on_inotify(tree: tuple[Path, Path],
                                                                          monkeypatch) -> None:
    """inotify refuses a directory ccotel may not read (EACCES; as root, chmod cannot show it): that
    directory is left out and handed over to be counted, every other one is watched by inotify."""
    root, projects = tree
    locked = projects / "-locked"
    (locked / "deeper").mkdir(parents=True)
    real_add = watch._InotifyTree._add

    def add(self: watch._InotifyTree, path: str) -> None:
        if path == str(locked):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        real_add(self, path)

    monkeypatch.setattr(watch._InotifyTree, "_add", add)
    main, w = _watching_one_file(root, projects)
    try:
        assert w.mode == "inotify"
        refused = w.take_unreadable()
        assert [e.filename for e in refused] == [str(locked)] and w.take_unreadable() == []
        from ccotel.run.pipeline import Options, Pipeline

        p = Pipeline(Options(roots=(str(root),)), emit=lambda _spans: None)
        for exc in refused * 2:  # what the run loop does with them: counted once per directory
            p.unreadable_dir(exc)
        assert p.stats.errors == {"unreadable_dir": 1}
        with open(main, "ab") as f:
            f.write(b'{"a": 1}\n')
        assert str(main) in collect(w, {str(main)})
        later = projects / "-p" / "s2.jsonl"  # a new file elsewhere: seen by inotify, not a poll
        later.write_bytes(b"{}\n")
        assert str(later) in collect(w, {str(later)})
    finally:
        w.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_a_tree_deeper_than_the_recursion_limit_moved_in_leaves_the_watcher_watching(
        tree: tuple[Path, Path], tmp_path: Path) -> None:
    """Moved in whole, it is one event whose handling walks it: os.walk's RecursionError there
    killed the inotify thread, and nothing written afterwards was seen."""
    root, projects = tree
    main, w = _watching_one_file(root, projects)
    outside = tmp_path / "deep"
    make_deep(outside)
    try:
        assert str(projects) in collect(w, {str(projects)})
        os.rename(outside, projects / "-deep")
        assert str(projects / "-deep") in collect(w, {str(projects / "-deep")})
        with open(main, "ab") as f:
            f.write(b'{"a": 1}\n')
        assert str(main) in collect(w, {str(main)}, timeout_s=15.0)
        assert w._tree is not None and w._tree._thread.is_alive()
    finally:
        w.stop()
        remove_deep(projects / "-deep")
        remove_deep(outside)
