"""tree.walk is os.walk(followlinks=False) top-down, without recursion: the same directories in the
same order, symlinked directories named and not entered, pruning honoured, unreadable directories
given to onerror; and a tree thousands of levels deep is walked (os.walk raised RecursionError on
it, in the inotify thread, which then died, and in doctor)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.read.tree import walk
from tests.support.deep_tree import DEPTH, make_deep, remove_deep

# a tree as nested dicts: a name -> None (a file) or a subtree; a few symlinks to directories
names = st.sampled_from(["a", "b", "c", "d.jsonl", "e"])
trees = st.recursive(st.dictionaries(names, st.none(), max_size=3),
                     lambda sub: st.dictionaries(names, st.one_of(st.none(), sub), max_size=4), max_leaves=30)


def _make(top: Path, tree: dict[str, object]) -> None:
    for name, sub in tree.items():
        if sub is None:
            (top / name).write_bytes(b"")
        else:
            (top / name).mkdir()
            _make(top / name, sub)  # type: ignore[arg-type]


def _as_walked(rows: object) -> list[tuple[str, list[str], list[str]]]:
    return [(d, sorted(ds), sorted(fs)) for d, ds, fs in rows]  # type: ignore[attr-defined]


@settings(max_examples=40, deadline=None)
@given(tree=trees, link=st.booleans())
def test_the_same_as_os_walk(tmp_path_factory: pytest.TempPathFactory, tree: dict[str, object], link: bool) -> None:
    top = tmp_path_factory.mktemp("t")
    _make(top, tree)
    if link:
        os.symlink(top, top / "loop")  # a symlink to a directory: named, never entered
    assert _as_walked(walk(str(top))) == _as_walked(os.walk(str(top)))


def test_pruning_and_errors(tmp_path: Path) -> None:
    (tmp_path / "keep" / "x").mkdir(parents=True)
    (tmp_path / "skip" / "y").mkdir(parents=True)
    seen = []
    for dirpath, dirs, _files in walk(str(tmp_path)):
        seen.append(os.path.relpath(dirpath, tmp_path))
        dirs[:] = [d for d in dirs if d != "skip"]
    assert sorted(seen) == [".", "keep", "keep/x"]
    errors: list[OSError] = []
    assert list(walk(str(tmp_path / "missing"), errors.append)) == [] and len(errors) == 1


def test_a_tree_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    try:
        (make_deep(tmp_path / "top") / "t.jsonl").write_bytes(b"")
        rows = list(walk(str(tmp_path / "top")))
        assert len(rows) == DEPTH + 1 and rows[-1][2] == ["t.jsonl"]
    finally:
        remove_deep(tmp_path / "top")


def test_doctor_and_the_pipeline_walk_such_a_tree(tmp_path: Path) -> None:
    from ccotel.commands.doctor.root_scan import RootState, scan_root
    from ccotel.run.pipeline import Options, Pipeline

    deep = tmp_path / "claude" / "projects" / "-deep"
    try:
        make_deep(deep)
        assert scan_root(str(tmp_path / "claude")).state is RootState.OK
        pipeline = Pipeline(Options(roots=(str(tmp_path / "claude"),)), emit=lambda spans: None, state=None)
        pipeline.poll([str(deep)])  # a directory the watcher names: walked for transcripts
        assert not pipeline.files
    finally:
        remove_deep(deep)
