"""The safety rescan lists only directories that changed (discover.ScanCache, bench/NOTES.md: idle
CPU): a scan with the cache finds exactly what a fresh walk finds, after files and directories
come and go, and an unchanged tree is not listed again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ccotel.read import discover
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DAY_AGO = 1_700_000_000


def _settle(root: Path) -> None:
    """Every directory and file dated long ago: as history is when ccotel run has followed it a while."""
    for p in [root, *root.rglob("*")]:
        os.utime(p, (DAY_AGO, DAY_AGO), follow_symlinks=False)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "claude"
    for scenario in ("s01_bash_tool", "s03_parallel_subagents"):
        shutil.copytree(FIXTURES / "2.1.330" / scenario / "claude" / "projects", root / "projects",
                        dirs_exist_ok=True)
    proj = next((root / "projects").iterdir())
    (proj / "agent-0123456.jsonl").write_bytes(b"")  # a 2.0.x flat agent file
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jsonl").write_bytes(b"")
    (proj / "link-out.jsonl").symlink_to(outside / "x.jsonl")  # leads out of the root: never listed
    (proj / "linked-dir").symlink_to(outside, target_is_directory=True)  # a symlinked directory: not entered
    _settle(root)
    return root


def _fresh(root: Path) -> list[discover.TranscriptFile]:
    """What os.walk finds (the walk scan replaced): main files first in each directory."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root / "projects", followlinks=False):
        dirnames.sort()
        found = []
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.endswith(".jsonl") and (not os.path.islink(path) or discover.within_root(str(root), path)):
                tf = discover.classify(str(root), path)
                if tf is not None:
                    found.append(tf)
        out += sorted(found, key=lambda t: t.kind is not discover.FileKind.MAIN)
    return out


def test_cached_scan_equals_a_fresh_walk_as_the_tree_changes(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    cache = discover.ScanCache()
    first = list(discover.scan(str(root), cache=cache))
    assert first == _fresh(root) == list(discover.scan(str(root))) and len(first) >= 5
    assert not any("link-out" in tf.path or "linked-dir" in tf.path for tf in first)

    listed: list[str] = []
    real_scandir = os.scandir

    def counting(path: str) -> object:
        listed.append(path)
        return real_scandir(path)

    monkeypatch.setattr(discover.os, "scandir", counting)
    assert list(discover.scan(str(root), cache=cache)) == first
    assert listed == []  # nothing changed: one stat per directory, no listing

    session = next(root.glob("projects/*/*/subagents")).parent
    proj = session.parent
    (proj / "ffffffff-1111-4222-8333-444444444444.jsonl").write_bytes(b"{}\n")  # a new session
    (session / "subagents" / "agent-a0000000000000001.jsonl").write_bytes(b"{}\n")  # a new subagent
    newdir = proj / "eeeeeeee-1111-4222-8333-444444444444" / "subagents"
    newdir.mkdir(parents=True)
    (newdir / "agent-a0000000000000002.jsonl").write_bytes(b"")
    gone = next(p for p in proj.glob("*.jsonl") if p.stat().st_size > 0 and "ffffffff" not in p.name)
    gone.unlink()
    _settle(root)  # even with every mtime the same old value, the inode or the entries moved on
    os.utime(proj, (DAY_AGO + 5, DAY_AGO + 5))
    os.utime(session / "subagents", (DAY_AGO + 5, DAY_AGO + 5))
    listed.clear()
    again = list(discover.scan(str(root), cache=cache))
    assert str(proj) in listed and str(session / "subagents") in listed and str(newdir) in listed
    assert str(root / "projects") not in listed  # unchanged directories are not listed again
    assert again == _fresh(root) == list(discover.scan(str(root))) != first
    assert str(gone) not in {tf.path for tf in again}


def test_a_directory_changed_just_before_its_listing_is_listed_again(tmp_path):
    """An entry added within the same mtime tick as the listing cannot hide behind the mtime."""
    root = tmp_path / "claude"
    proj = root / "projects" / "-tmp-p"
    proj.mkdir(parents=True)
    (proj / "a.jsonl").write_bytes(b"")
    cache = discover.ScanCache()
    assert [Path(tf.path).name for tf in discover.scan(str(root), cache=cache)] == ["a.jsonl"]
    mtime = proj.stat().st_mtime_ns  # recent: the listing is not trusted later
    (proj / "b.jsonl").write_bytes(b"")
    os.utime(proj, ns=(mtime, mtime))
    assert [Path(tf.path).name for tf in discover.scan(str(root), cache=cache)] == ["a.jsonl", "b.jsonl"]


@pytest.mark.parametrize("cached", [True, False])
def test_rescan_picks_up_what_the_watcher_missed_and_forgets_what_is_gone(tmp_path, cached):
    root = _tree(tmp_path)
    spans: list[SpanRecord] = []
    pipeline = Pipeline(Options(roots=(str(root),)), emit=spans.extend)
    if not cached:
        pipeline._scan_cache = None  # type: ignore[assignment]  # noqa: SLF001 - the plain walk
    pipeline.backfill(close_all=True)
    assert spans
    src = next((FIXTURES / "2.1.330" / "s01_bash_tool" / "claude" / "projects").glob("*/*.jsonl"))
    proj = root / "projects" / "-tmp-new-project"
    proj.mkdir()
    copy = proj / ("dddddddd" + src.name[8:])  # the same session under a new id, in a new project
    copy.write_bytes(src.read_bytes().replace(src.stem.encode(), copy.stem.encode()))
    deleted = next(p for p in pipeline.files if "subagents" in p)
    os.unlink(deleted)
    followed = set(pipeline.files)
    pipeline.rescan()
    assert set(pipeline.files) == followed - {deleted} | {str(copy)}
