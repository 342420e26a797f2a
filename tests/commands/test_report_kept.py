"""Kept answers (report/kept.py): the same ``ccotel report --json`` asked again, with the ledger
unchanged and no transcript written since, prints the kept bytes without argparse, re or SQLite;
anything the answer depends on that changes (the ledger, a transcript, the command line, the code)
sums it again."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccotel.commands.report import kept
from ccotel.commands.report.kept import ANSWERS_DIR, MAX_KEPT, plain_command_line
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import LEDGER_FILE, Ledger
from tests.harness.fixtures import load_fixture

REPO = Path(__file__).resolve().parents[2]
_DRIVER = """import sys
before = set(sys.modules)
sys.argv = ["ccotel", *sys.argv[1:]]
from ccotel.__main__ import main
code = main(sys.argv[1:])  # given argv: a kept answer returns instead of ending the process
sys.stderr.write("\\n".join(sorted(set(sys.modules) - before)))
raise SystemExit(code)
"""


def _no_ledger_state(tmp_path: Path) -> tuple[str, str]:
    """A copy of a fixture's config dir (settled long ago: older than any ledger's grace) and a
    state dir with no ledger: a report reads the transcripts through the report cache."""
    root = tmp_path / "claude"
    shutil.copytree(load_fixture("s06_kill_orphan_resume").config_dir, root)
    for p in root.rglob("*"):
        os.utime(p, ns=(10**9, 10**9))
    state = tmp_path / "state"
    state.mkdir()
    return str(root), str(state)


def _state(tmp_path: Path) -> tuple[str, str]:
    """``_no_ledger_state`` with the ledger a backfill of it wrote in the state dir."""
    root, state = _no_ledger_state(tmp_path)
    ledger = Ledger(os.path.join(state, LEDGER_FILE), roots=(root,))
    Pipeline(Options(roots=(root,)), emit=ledger.record, state=None).backfill(close_all=True)
    ledger.close()
    return root, state


def _report(*argv: str, driver: bool = False, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}
    how = ["-c", _DRIVER] if driver else ["-m", "ccotel"]
    return subprocess.run([sys.executable, *how, "report", *argv], capture_output=True, text=True, env=env,
                          timeout=60, cwd=cwd)


def _kept(state: str) -> list[str]:
    folder = Path(state) / ANSWERS_DIR
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_second_report_prints_the_kept_bytes_loading_neither_argparse_re_nor_sqlite(tmp_path):
    root, state = _state(tmp_path)
    first = _report("daily", "--json", "--root", root, "--state-dir", state, driver=True)
    assert first.returncode == 0 and '"source": "ledger"' in first.stdout, first.stderr
    assert "ccotel.commands.report.from_ledger" in first.stderr.split()  # summed from the ledger
    assert len(_kept(state)) == 1
    assert oct(os.stat(Path(state) / ANSWERS_DIR).st_mode & 0o777) == "0o700"
    assert oct(os.stat(Path(state) / ANSWERS_DIR / _kept(state)[0]).st_mode & 0o777) == "0o600"
    second = _report("daily", "--json", "--root", root, "--state-dir", state, driver=True)
    assert second.returncode == 0 and second.stdout == first.stdout
    loaded = set(second.stderr.split())
    for heavy in ("argparse", "re", "typing", "sqlite3", "_sqlite3", "ccotel.commands.report.command",
                  "ccotel.commands.report.from_ledger", "ccotel.store.ledger", "datetime", "json"):
        assert heavy not in loaded, heavy
    third = _report("daily", "--json", "--root", root, "--state-dir", state)  # the command: it ends at once
    assert (third.returncode, third.stdout, third.stderr) == (0, first.stdout, "")


def test_a_ledger_write_is_summed_again(tmp_path):
    root, state = _state(tmp_path)
    argv = ("--json", "--root", root, "--state-dir", state)
    first = _report(*argv)
    assert first.returncode == 0 and len(_kept(state)) == 1
    db = sqlite3.connect(os.path.join(state, LEDGER_FILE))
    db.execute("UPDATE call_totals SET output = output + 1000")  # one commit: another signature
    db.commit()
    db.close()
    again = _report(*argv)
    assert again.returncode == 0 and again.stdout != first.stdout  # summed again: the ledger's new totals
    shutil.rmtree(Path(state) / ANSWERS_DIR)
    assert _report(*argv).stdout == again.stdout  # what summing it with no kept answer gives


def test_a_transcript_written_since_is_read_again(tmp_path):
    root, state = _state(tmp_path)
    argv = ("--json", "--root", root, "--state-dir", state)
    first = _report(*argv)
    assert first.returncode == 0 and '"source": "ledger"' in first.stdout
    transcript = next(Path(root).rglob("*.jsonl"))
    os.utime(transcript)  # written now: after the ledger's last write
    again = _report(*argv, driver=True)
    assert again.returncode == 0 and '"source": "ledger"' not in again.stdout
    assert "ccotel.commands.report.transcripts" in again.stderr.split()


@pytest.mark.parametrize("extra", [
    ["-s", "7d"], ["--since=2w"], ["-u", "12h"], ["-s", " 7d "],  # days that move with the clock
    ["--roo", "x"], ["-bz", "UTC"], ["-s=20250101"], ["--prices", "p.json"], ["--no-ledger"], ["--", "daily"],
    ["daily", "weekly"], ["--root"], ["--json=1"], ["--state", "none"], ["--state", "postgresql://h/db"],
])
def test_a_command_line_that_is_not_plain_has_no_kept_answer(extra):
    assert plain_command_line(["--json", *extra], env={"HOME": "/h"}) is None


def test_a_plain_command_line_names_the_roots_and_state_as_argparse_does():
    env = {"XDG_STATE_HOME": "/x", "CLAUDE_CONFIG_DIR": "/c1,/c2"}
    assert plain_command_line(["--json"], env) == (("/c1", "/c2"), "/x/ccotel")
    assert plain_command_line(["--json", "--root=/r", "--root", "/q", "daily", "--state-dir", "/d", "--state", "/s",
                               "-s", "20250101", "-z", "UTC"], env) == (("/r", "/q"), "/s")
    assert plain_command_line(["--json", "--state-dir", "/d"], {**env, "CCOTEL_STATE": "/e"}) == (("/c1", "/c2"), "/d")


def test_a_table_and_a_relative_day_keep_nothing(tmp_path):
    root, state = _state(tmp_path)
    assert _report("--root", root, "--state-dir", state).returncode == 0  # a table
    assert _report("daily", "--json", "-s", "3650d", "--root", root, "--state-dir", state).returncode == 0
    assert _kept(state) == []


def test_another_zone_or_another_code_is_another_key(tmp_path, monkeypatch):
    plain = (("/r",), "/s")
    key = kept.answer_key([1, 2], plain, ["--json"])
    assert kept.answer_key([1, 2], plain, ["--json"]) == key
    assert kept.answer_key([1, 3], plain, ["--json"]) != key
    assert kept.answer_key([1, 2], plain, ["--json", "-b"]) != key
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    assert kept.answer_key([1, 2], plain, ["--json"]) != key
    monkeypatch.delenv("TZ")
    package = tmp_path / "pkg"
    shutil.copytree(Path(kept.__file__).parent, package / "report", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(kept, "_PACKAGE", str(package))
    before = kept.answer_key([1, 2], plain, ["--json"])
    module = package / "report" / "rows.py"
    os.utime(module, ns=(module.stat().st_mtime_ns + 10**9,) * 2)  # an edit in place
    assert kept.answer_key([1, 2], plain, ["--json"]) != before


def test_a_damaged_or_foreign_kept_file_is_a_miss(tmp_path):
    state = str(tmp_path)
    kept.keep(state, "key one", 5, {"/p": (1, ["a.jsonl"], [])}, b"answer\n")
    found = kept.load(state, "key one")
    assert found is not None and (found.since_ns, found.listing, bytes(found.answer)) == (
        5, {"/p": (1, ["a.jsonl"], [])}, b"answer\n")
    path = next((tmp_path / ANSWERS_DIR).iterdir())
    good = path.read_bytes()
    assert kept.load(state, "key two") is None  # another key (in another file, or this one's name)
    for bad in (b"key one\nnot a number\n3\nabc", b"key on", good[:len(good) - 12], good.replace(b"\n5\n", b"\n5\n9")):
        path.write_bytes(bad)
        assert kept.load(state, "key one") is None, bad


def test_only_the_newest_answers_are_kept(tmp_path):
    state = str(tmp_path)
    for i in range(MAX_KEPT + 5):
        kept.keep(state, f"key {i}", i, {}, b"x")
        path = kept._path(state, f"key {i}")  # noqa: SLF001
        os.utime(path, ns=(i * 10**9, i * 10**9))  # mtimes apart: the order they were kept in
    assert len(list((tmp_path / ANSWERS_DIR).iterdir())) == MAX_KEPT
    assert kept.load(state, f"key {MAX_KEPT + 4}") is not None and kept.load(state, "key 0") is None


def test_a_reader_that_went_away_is_not_an_error():
    code = ("import os\nfrom ccotel.commands.report.kept import print_answer\n"
            "r, w = os.pipe()\nos.close(r)\nos.dup2(w, 1)\n"
            "raise SystemExit(print_answer(b'x' * 1_000_000))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def _tree(tmp_path: Path) -> tuple[str, Path]:
    root = tmp_path / "claude"
    for rel in ("projects/-a/s1.jsonl", "projects/-a/s1/subagents/agent-x.jsonl", "projects/-b/s2.jsonl"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}\n")
    for p in root.rglob("*"):
        os.utime(p, ns=(10**9, 10**9))  # long settled
    return str(root), root


def test_a_kept_listing_answers_as_a_fresh_walk_does(tmp_path):
    """written_since with the directories listed before (only their files stat'ed while a
    directory's mtime is the same) gives what a walk of every directory gives."""
    from ccotel.commands.report import freshness
    from ccotel.commands.report.freshness import written_since

    root, tree = _tree(tmp_path)
    listing: dict[str, tuple[int, list[str], list[str]]] = {}
    assert not written_since([root], 2 * 10**9, keep=listing)
    assert len(listing) == 5 and sorted(listing[str(tree / "projects" / "-a")][1]) == ["s1.jsonl"]
    assert not written_since([root], 2 * 10**9, listing)
    appended = tree / "projects/-a/s1/subagents/agent-x.jsonl"
    os.utime(appended, ns=(3 * 10**9, 3 * 10**9))  # a line appended: the file's mtime, not its directory's
    assert written_since([root], 2 * 10**9, listing) and written_since([root], 2 * 10**9)
    os.utime(appended, ns=(10**9, 10**9))
    new = tree / "projects/-b/s3.jsonl"
    new.write_text("{}\n")  # a new session: its directory's mtime moves, and it is listed again
    assert written_since([root], 2 * 10**9, listing) and written_since([root], 2 * 10**9)
    os.utime(new, ns=(10**9, 10**9))
    assert not written_since([root], 2 * 10**9, listing)
    assert not freshness.unchanged([root], listing)  # -b has a new session
    relisted: dict[str, tuple[int, dict[str, tuple[int, int]], list[str]]] = {}
    assert not written_since([root], 2 * 10**9, listing, keep=relisted)
    assert not freshness.unchanged([root], relisted)  # -b changed just now: not kept, so not known as it is
    os.utime(new.parent, ns=(10**9, 10**9))
    assert not written_since([root], 2 * 10**9, listing, keep=relisted) and freshness.unchanged([root], relisted)
    (tree / "projects/-a/s1/subagents").rename(tree / "projects/-a/s1/gone")  # not .jsonl: nothing to stat
    assert not written_since([root], 2 * 10**9, listing)
    assert not freshness.unchanged([root], relisted)


def test_a_directory_changed_just_before_the_walk_is_not_kept(tmp_path):
    """Its mtime moves by the clock's tick: an entry added in the same tick after it was listed
    would keep the mtime, and a kept listing would miss it."""
    from ccotel.commands.report.freshness import written_since

    root, tree = _tree(tmp_path)
    os.utime(tree / "projects/-b", None)  # changed now
    listing: dict[str, tuple[int, list[str], list[str]]] = {}
    assert not written_since([root], 2 * 10**9, keep=listing)
    assert str(tree / "projects/-b") not in listing and str(tree / "projects/-a") in listing


def test_a_report_read_from_the_transcripts_is_kept_while_every_file_is_as_it_was(tmp_path):
    root, state = _no_ledger_state(tmp_path)
    argv = ("--json", "--root", root, "--state-dir", state)
    first = _report(*argv)
    assert first.returncode == 0 and '"source": "transcripts"' in first.stdout, first.stderr
    assert len(_kept(state)) == 1 and (Path(state) / "report-cache.bin").exists()
    second = _report(*argv, driver=True)
    assert second.stdout == first.stdout and second.stdout == _report(*argv[:3], "--no-ledger").stdout
    loaded = set(second.stderr.split())
    for heavy in ("msgspec", "ccotel.commands.report.group_read", "sqlite3", "argparse", "re", "genai_prices"):
        assert heavy not in loaded, heavy


@pytest.mark.parametrize("change", ["append", "remove", "same_mtime_other_size", "new_session"])
def test_a_changed_transcript_is_read_again(tmp_path, change):
    root, state = _no_ledger_state(tmp_path)
    argv = ("--json", "--root", root, "--state-dir", state)
    assert _report(*argv).returncode == 0 and len(_kept(state)) == 1
    main = max(Path(root).rglob("*.jsonl"), key=lambda p: p.stat().st_size)
    line = main.read_text().splitlines()[-1] + "\n"
    if change == "append":
        with main.open("a") as f:
            f.write(line)
    elif change == "remove":
        main.unlink()
    elif change == "same_mtime_other_size":  # cp -p of another version: the old mtime kept
        main.write_text(main.read_text()[:-len(line)])
        os.utime(main, ns=(10**9, 10**9))
        os.utime(main.parent, ns=(10**9, 10**9))
    else:
        shutil.copy(main, main.parent / "0a0a0a0a-0000-4000-8000-000000000000.jsonl")
    again = _report(*argv, driver=True)
    assert again.returncode == 0 and "ccotel.commands.report.group_read" in again.stderr.split()
    assert again.stdout == _report(*argv[:3], "--no-ledger").stdout


def test_the_price_table_is_part_of_a_read_answers_key(monkeypatch):
    from ccotel.spans import price_table

    plain = (("/r",), "/s")
    before = kept.answer_key(kept.transcripts_source(), plain, ["--json"])
    monkeypatch.setattr(price_table, "price_table_key", lambda: ["/other/data.py", 1, 2])
    assert kept.answer_key(kept.transcripts_source(), plain, ["--json"]) != before


_TOKENS = ["--json", "-b", "--breakdown", "-v", "daily", "session", "blocks", "--root", "/r", "--root=/q", "--state",
           "--state-dir", "/s", "--state=/t", "-s", "--since", "--since=7d", "-s7d", "7d", " 2w ", "12h", "20250101",
           "2025-06-01", "-u", "--until", "-z", "UTC", "-w", "monday", "-o", "desc", "--order=asc", "--workers", "2",
           "--roo", "-bz", "--prices", "--no-ledger", "--", "-", "x"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.sampled_from(_TOKENS), max_size=9))
def test_a_plain_command_line_means_what_argparse_reads_whatever_the_clock(argv, monkeypatch):
    """Whenever plain_command_line takes a command line, argparse (the report's own parser) reads
    it to the same roots and state dir, and to the same arguments on any day: a kept answer never
    outlives the day its arguments name."""
    import datetime as dt

    from ccotel.commands.report import command

    plain = plain_command_line(argv, env={"XDG_STATE_HOME": "/x", "CLAUDE_CONFIG_DIR": "/c"})
    if plain is None:
        return
    parsed = []
    for year in (2020, 2031):
        class _Then(dt.datetime):
            year_now = year

            @classmethod
            def now(cls, tz=None):  # type: ignore[no-untyped-def]
                return dt.datetime(cls.year_now, 6, 15, 12, tzinfo=dt.timezone.utc)

        monkeypatch.setattr(dt, "datetime", _Then)
        parser = command._PlainParser()  # noqa: SLF001
        command.add_options(parser)
        try:
            parsed.append(vars(parser.parse_args(argv)))
        except command._NotPlain:  # noqa: SLF001 - argparse refuses it: nothing is ever kept for it
            return
        finally:
            monkeypatch.undo()
    assert parsed[0] == parsed[1], argv
    args = parsed[0]
    location = command.resolve_state(args["state"], args["state_dir"], {"XDG_STATE_HOME": "/x"})
    assert plain == (tuple(args["root"] or ["/c"]), location), argv
