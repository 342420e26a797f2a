"""The report cache: a report without a ledger keeps what it read of each session group in the
state dir, and the next one reads only the groups whose files changed; its answer is the same
bytes as reading every transcript again."""

from __future__ import annotations

import builtins
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from ccotel.commands.report.kept import ANSWERS_DIR
from ccotel.commands.report.read_cache import CACHE_FILE, FORMAT, MAGIC
from ccotel.store.ledger import LEDGER_FILE
from tests.harness.fixtures import load_fixture
from tests.support.fixtures import realdata_config_dir  # noqa: F401
from tests.support.report_cli import report_out

NOW_NS = 1_900_000_000 * 1_000_000_000  # the blocks view's "now": after every call, fixed
VIEWS = (("session", "--json"), ("daily", "--json"), ("weekly", "--json"), ("monthly", "--json"),
         ("project", "--json"), ("session", "--breakdown"), ("daily", "--since", "2025-06-01", "--json"),
         ("blocks", "--json"))


def _run(*argv: str) -> str:
    return report_out(*argv, now_ns=NOW_NS)


@contextmanager
def opened_under(root: Path) -> Iterator[list[str]]:
    """Every file under ``root`` opened meanwhile (in this process: the tests read with --workers 1)."""
    seen: list[str] = []
    prefix = str(root) + os.sep
    real_open, real_os_open = builtins.open, os.open

    def note(file: object) -> None:
        if isinstance(file, (str, os.PathLike)) and os.path.abspath(os.fspath(file)).startswith(prefix):
            seen.append(os.path.abspath(os.fspath(file)))

    def spy_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        note(file)
        return real_open(file, *args, **kwargs)

    def spy_os_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        note(file)
        return real_os_open(file, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(builtins, "open", spy_open)
        m.setattr(os, "open", spy_os_open)
        yield seen


@pytest.fixture()
def history(tmp_path: Path, realdata_config_dir: Path) -> Path:  # noqa: F811
    """A copy of shared/realdata (its files are changed here) with a session copied into another
    project (the same calls in two session groups: counted once, by the older)."""
    root = tmp_path / "claude"
    shutil.copytree(realdata_config_dir, root)
    src = load_fixture("s02_resume_two_turns").config_dir
    main = next((src / "projects").rglob("*.jsonl"))
    for project in ("-a", "-b"):
        (root / "projects" / project).mkdir(parents=True)
    (root / "projects" / "-a" / main.name).write_bytes(main.read_bytes())
    copy = root / "projects" / "-b" / "00000000-0000-4000-8000-000000000000.jsonl"
    copy.write_bytes(main.read_bytes().replace(main.stem.encode(), copy.stem.encode()))
    return root


def _common(root: Path, state: Path) -> tuple[str, ...]:
    return ("--root", str(root), "--state-dir", str(state), "--timezone", "UTC", "--workers", "1")


def _reference(root: Path, state: Path) -> dict[tuple[str, ...], str]:
    """Every view read from the transcripts alone (no state at all)."""
    return {v: _run(*_common(root, state), *v, "--no-ledger") for v in VIEWS}


def test_a_second_report_equals_the_first_and_reads_no_transcript(history, tmp_path):
    state = tmp_path / "state"
    first = _run(*_common(history, state), "--json")
    cache = state / CACHE_FILE
    assert cache.exists(), "the first report leaves its reading behind"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert not (state / LEDGER_FILE).exists()
    assert orjson.loads(first)["source"] == "transcripts"
    ref = _reference(history, tmp_path / "nostate")
    assert first == ref[("session", "--json")]
    with opened_under(history) as seen:
        again = {v: _run(*_common(history, state), *v) for v in VIEWS}
    assert seen == [], "a report of unchanged files reads no transcript"
    assert again == ref


def test_no_ledger_neither_reads_nor_writes_the_cache(history, tmp_path):
    state = tmp_path / "state"
    _run(*_common(history, state), "--json", "--no-ledger")
    assert not (state / CACHE_FILE).exists()
    _run(*_common(history, state), "--json")
    with opened_under(history) as seen:
        _run(*_common(history, state), "--json", "--no-ledger")
    assert seen, "--no-ledger reads the transcripts, whatever is cached"


def _append_call(path: Path) -> None:
    """A new API call at the end of a session's main file (a copy of its last assistant line with a
    new uuid, message id and request id, and other usage)."""
    lines = path.read_bytes().splitlines()
    last = next(orjson.loads(x) for x in reversed(lines) if b'"type":"assistant"' in x.replace(b" ", b"")
                and b'"usage"' in x)
    last["uuid"] = "11111111-2222-4333-8444-555555555555"
    last["message"]["id"] = "msg_appended_by_the_test"
    last["requestId"] = "req_appended_by_the_test"
    last["message"]["usage"] = {"input_tokens": 1234, "output_tokens": 567, "cache_read_input_tokens": 0,
                                "cache_creation_input_tokens": 0}
    with path.open("ab") as f:
        f.write(orjson.dumps(last) + b"\n")


def test_an_appended_line_is_read_again_with_its_group_only(history, tmp_path):
    state = tmp_path / "state"
    before = orjson.loads(_run(*_common(history, state), "--json"))
    mains = sorted(p for p in (history / "projects").glob("*/*.jsonl") if p.stat().st_size > 100_000)
    target = mains[0]
    _append_call(target)
    with opened_under(history) as seen:
        after = _run(*_common(history, state), "--json")
    assert after == _reference(history, tmp_path / "nostate")[("session", "--json")]
    doc = orjson.loads(after)
    assert doc["totals"]["apiCalls"] == before["totals"]["apiCalls"] + 1
    assert doc["totals"]["outputTokens"] == before["totals"]["outputTokens"] + 567
    # its group only: the session's files (its subagents' beside them), or a 2.0.x project's with
    # flat agent files (one group: their session is named inside them)
    assert seen and all(p.startswith(str(target.parent) + os.sep) for p in seen), seen
    assert len(set(seen)) < len(list((history / "projects").rglob("*.jsonl"))) / 4
    with opened_under(history) as seen:
        assert _run(*_common(history, state), "--json") == after
    assert seen == []


def test_a_file_gone_is_dropped_from_the_cache(history, tmp_path):
    state = tmp_path / "state"
    _run(*_common(history, state), "--json")
    size = (state / CACHE_FILE).stat().st_size
    shutil.rmtree(history / "projects" / "-b")
    after = _run(*_common(history, state), "--json")
    assert after == _reference(history, tmp_path / "nostate")[("session", "--json")]
    assert (state / CACHE_FILE).stat().st_size < size
    assert b"-b" + os.sep.encode() not in (state / CACHE_FILE).read_bytes()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty", "other format", "other version"])
def test_a_damaged_or_foreign_cache_is_read_as_absent(history, tmp_path, caplog, monkeypatch, damage):
    state = tmp_path / "state"
    first = _run(*_common(history, state), "--json")
    cache = state / CACHE_FILE
    data = cache.read_bytes()
    assert data.startswith(MAGIC)
    if damage == "garbage":
        cache.write_bytes(os.urandom(5000))
    elif damage == "truncated":
        cache.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # one byte changed in the middle: the checksum no longer holds
        mid = len(data) // 2
        cache.write_bytes(data[:mid] + bytes([data[mid] ^ 0x10]) + data[mid + 1:])
    elif damage == "empty":
        cache.write_bytes(b"")
    elif damage == "other format":  # a cache written in another layout (a later or earlier ccotel)
        cache.write_bytes(data.replace(MAGIC + FORMAT.to_bytes(4, "little"), MAGIC + (FORMAT + 1).to_bytes(4, "little"),
                                       1))
    else:  # the same layout from another ccotel or another price table: its costs may differ
        import ccotel.commands.report.read_cache as read_cache

        monkeypatch.setattr(read_cache, "fingerprint", lambda: "another ccotel")
    caplog.set_level(logging.DEBUG, logger="ccotel.report")
    with opened_under(history) as seen:
        again = _run(*_common(history, state), "--json")
    assert again == first
    assert seen, "the transcripts are read again"
    said = [r for r in caplog.records if "report cache" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.DEBUG, [r.getMessage() for r in said]
    with opened_under(history) as seen:  # written again, whole
        assert _run(*_common(history, state), "--json") == first
    assert seen == []


def test_an_unwritable_state_dir_is_no_error(history, tmp_path):
    state = tmp_path / "state"
    state.write_text("a file where the state dir should be")
    assert _run(*_common(history, state), "--json") == _reference(history, tmp_path / "nostate")[("session", "--json")]


def test_the_cache_is_bounded_oldest_groups_kept(history, tmp_path, monkeypatch):
    import ccotel.commands.report.read_cache as read_cache

    state = tmp_path / "state"
    _run(*_common(history, state), "--json")
    whole = (state / CACHE_FILE).stat().st_size
    monkeypatch.setattr(read_cache, "MAX_BYTES", whole // 3)
    (state / CACHE_FILE).unlink()
    first = _run(*_common(history, state), "--json")
    assert 0 < (state / CACHE_FILE).stat().st_size <= whole // 3
    with opened_under(history) as seen:
        assert _run(*_common(history, state), "--json") == first
    assert seen  # the groups left out are read again


def test_read_group_by_group_equals_the_one_process_read(history, tmp_path):
    """group_read (each group by itself, its sums taken whole, a call two groups hold merged after)
    gives what transcripts.gather gives (every group in one process, call by call), in every view,
    on realdata with a copied session and on every fixture; through the cache too."""
    from datetime import date, timezone

    from ccotel.commands.report.group_read import read_transcripts
    from ccotel.commands.report.json_doc import as_json
    from ccotel.commands.report.rows import Query
    from ccotel.commands.report.summary import summarize
    from ccotel.commands.report.transcripts import ReadOptions, gather
    from ccotel.spans.pricing import DEFAULT_PRICING
    from tests.harness.fixtures import list_fixtures

    queries = [Query(view=v, tz=timezone.utc) for v in ("session", "daily", "weekly", "monthly", "project")]
    queries.append(Query(view="daily", tz=timezone.utc, since=date(2025, 6, 1), until=date(2026, 1, 31)))
    roots = [str(history), *(str(load_fixture(name).config_dir) for name in list_fixtures())]
    for n, root in enumerate(roots):
        options = ReadOptions(roots=(root,), pricing=DEFAULT_PRICING)
        one = gather(options, None, workers=1)
        state = str(tmp_path / f"state{n}")
        for cache in (None, state, state):  # none, written, read
            for workers in (1, 3):
                summed = read_transcripts(options, workers, 0, cache)
                listed = read_transcripts(options, workers, 0, cache, calls=True)
                assert listed.calls == one.calls, root
                for q in queries:
                    assert as_json(summarize(summed, q)) == as_json(summarize(one, q)), (root, q)


def test_a_checksummed_cache_whose_calls_do_not_decode_is_read_as_absent(history, tmp_path, caplog):
    """The calls are decoded only when needed (a call two groups hold, the blocks view): a cache
    that passes its checksum but whose calls are not calls is no crash either."""
    import msgspec

    from ccotel.commands.report import read_cache

    state = tmp_path / "state"
    first = {v: _run(*_common(history, state), *v) for v in (("session", "--json"), ("blocks", "--json"))}
    entries = list(read_cache.load(str(state)).values())
    read_cache.save(str(state), [msgspec.structs.replace(e, rows=msgspec.Raw(msgspec.msgpack.encode(["not", 1])))
                                 for e in entries])
    assert len(read_cache.load(str(state))) == len(entries)  # the checksum holds
    caplog.set_level(logging.DEBUG, logger="ccotel.report")
    for v, want in first.items():
        assert _run(*_common(history, state), *v) == want
    assert sum("report cache" in r.getMessage() for r in caplog.records) == 1


_LOADED = """import sys
sys.argv = ["ccotel", *sys.argv[1:]]
from ccotel.__main__ import main
main()
sys.stderr.write("\\n".join(sorted(sys.modules)))
"""


def test_a_report_from_the_cache_loads_no_transcript_reader(tmp_path):
    """Its groups are unchanged and share no call: the reader (transcripts.py), the parser, the
    shard planner and multiprocessing are not loaded."""
    import subprocess
    import sys

    root = str(load_fixture("2.1.330-s01_bash_tool").config_dir)
    argv = ["report", "--json", "--root", root, "--state-dir", str(tmp_path / "state"), "--workers", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    runs = []
    for _ in range(2):
        shutil.rmtree(tmp_path / "state" / ANSWERS_DIR, ignore_errors=True)  # the cache itself, not a kept answer
        runs.append(subprocess.run([sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, env=env,
                                   timeout=60))
    assert all(r.returncode == 0 for r in runs) and runs[0].stdout == runs[1].stdout, runs[1].stderr
    first, again = (set(r.stderr.split()) for r in runs)
    assert "ccotel.commands.report.transcripts" in first  # the first report reads the transcripts
    assert "ccotel.commands.report.group_read" in again
    for module in ("ccotel.commands.report.transcripts", "ccotel.read.tail", "ccotel.read.parse",
                   "ccotel.read.shard", "multiprocessing"):
        assert module not in again, module
