"""What keeps ``ccotel statusline`` cheap, held to giving the same answers: its JSON without the
``json`` package (equal to json's on every line of shared/realdata), its price memo (equal to the
pricing module's cost to the last bit, dropped when the genai-prices table changes), its caches
(a broken or stale one never shows a wrong figure), and the modules it loads (an allow-list)."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.commands.statusline import fastjson as statusline_json
from ccotel.commands.statusline.line import parse_options, status_line
from ccotel.commands.statusline.price import PriceMemo, cost_at
from ccotel.commands.statusline.session import PRICES_FILE
from ccotel.run.pipeline import Options, Pipeline
from ccotel.spans.pricing import DEFAULT_PRICING, Price, Rate, price_as_json
from ccotel.store.ledger import LEDGER_FILE, Ledger
from tests.harness.fixtures import load_fixture
from tests.support.fixtures import realdata_config_dir  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
MIN = 60 * 1_000_000_000


def _session(name: str) -> tuple[Path, str, Path]:
    config = load_fixture(name).config_dir
    path = next(iter(sorted((config / "projects").glob("*/*.jsonl"))))
    return config, path.stem, path


def _doc(sid: str, path: Path) -> dict:
    return {"session_id": sid, "transcript_path": str(path), "model": {"display_name": "Opus"},
            "cost": {"total_cost_usd": 0.01}}


def _line(doc: dict, root: Path, state: Path | str, now_ns: int) -> str:
    return status_line(doc, parse_options(["--root", str(root), "--state", str(state)]), now_ns, False)


# -- JSON without json --------------------------------------------------------------------------

ODD = ["", " ", "1", " 1 ", "[]x", "[1,", '{"a": }', '{"a": 1', '"abc', '{"a":"\x01"}', "NaN", "-Infinity",
       '{"a": [1, 2.5e-3, null, true, false, "\\u00e9\\ud83d\\ude00"]}', "\ufeff{}", '{"a":1}\n\n', "1 2",
       '{"a":1,"a":2}', "[" * 50 + "]" * 50, "123456789012345678901234567890", "1e400", "-0", '"\\ud800"']


def _both(fn_a, fn_b, value):
    out = []
    for fn in (fn_a, fn_b):
        try:
            out.append(("ok", fn(value)))
        except ValueError:
            out.append(("ValueError", None))
    return out


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("text", ODD)
def test_its_json_reads_what_json_reads(text):
    for value in (text, text.encode("utf-8", "surrogatepass")):
        (ka, a), (kb, b) = _both(statusline_json.loads, json.loads, value)
        assert ka == kb and (_same(a, b) or (isinstance(a, float) and math.isnan(a) and math.isnan(b))), value
    for raw in (b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), b'{"a": "\xff"}', b"\x00"):
        (ka, a), (kb, b) = _both(statusline_json.loads, json.loads, raw)
        assert ka == kb and _same(a, b), raw


def test_its_json_reads_every_line_of_realdata_as_json_does(realdata_config_dir):  # noqa: F811
    seen = 0
    for path in sorted(realdata_config_dir.rglob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            (ka, a), (kb, b) = _both(statusline_json.loads, json.loads, line)
            assert ka == kb and a == b, line[:200]
            seen += 1
    assert seen > 10_000


def test_its_json_writes_what_json_writes(tmp_path):
    rng = random.Random(7)
    values = [{"v": 3, "files": {"/a/é.jsonl": [1, 2, None, "k"]},
               "calls": {"m:r": [1, 2, 3, 0.1 + 0.2, "x", None, 1]}},
              [], {}, 1.0, 1e300, -0.0, 10**40, True, None, "plain", "é\n\"\\\x00", float("nan"), float("inf"),
              [rng.random() * 10 ** rng.randint(-8, 8) for _ in range(200)]]
    for v in values:
        assert statusline_json.dumps(v) == json.dumps(v, separators=(",", ":")), v
    with pytest.raises(TypeError):
        statusline_json.dumps({"a": {1, 2}})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        statusline_json.dumps(loop)


def test_its_json_errors_without_json_loaded():
    """json's C scanner raises json.decoder's error only if json.decoder is loaded: without it, a
    broken value (a line cut short) still raises ValueError, and nothing else."""
    code = ("import sys\nfrom ccotel.commands.statusline.fastjson import loads\n"
            "for s in ['{\"a\": 1', '\"abc', '[1,', b'{\"a\": tru']:\n"
            "    try:\n        loads(s)\n    except ValueError:\n        print('ValueError')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout.split() == ["ValueError"] * 4, out.stderr


# -- prices -------------------------------------------------------------------------------------

def _usages(rng: random.Random, thresholds: list[int]) -> list[tuple[int, ...]]:
    out = [(0,) * 7, (1, 1, 1, 1, 0, 0, 0), (10, 20, 40_000, 300, 0, 0, 0), (10, 20, 40_000, 300, 100, 200, 5)]
    for _ in range(300):
        t = rng.choice(thresholds or [200_000])
        fresh = rng.choice([0, 1, rng.randint(0, 5000), t - 1, t, t + 1])
        write = rng.randint(0, 50_000)
        w1 = rng.choice([0, rng.randint(0, write)])
        out.append((fresh, rng.randint(0, 30_000), rng.choice([0, rng.randint(0, 400_000)]), write,
                    rng.choice([0, write - w1]), w1, 0))
    return out


def test_its_prices_equal_the_pricing_modules_to_the_last_bit():
    """cost_at on pricing's own JSON of a price against Price.cost_of: flat prices, tiered ones
    (below, at and above each threshold), and genai-prices' answers for the models of the
    fixtures on several days."""
    rng = random.Random(30)
    prices = [Price(Rate(5.0), Rate(25.0), Rate(6.25), Rate(10.0), Rate(0.5)),
              Price(Rate(3.0, ((200_000, 6.0),)), Rate(15.0, ((200_000, 22.5),)), Rate(3.75, ((200_000, 7.5),)),
                    Rate(6.0, ((200_000, 12.0),)), Rate(0.3, ((200_000, 0.6), (500_000, 0.9))))]
    day = 86_400 * 10**9
    for model in ("claude-opus-4-6", "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001", "claude-opus-4-5"):
        for at in (20_300 * day, 20_400 * day, 20_460 * day):
            p = DEFAULT_PRICING.price(model, at)
            if p is not None:
                prices.append(p)
    assert len(prices) > 6
    for p in prices:
        rates = json.loads(json.dumps(price_as_json(p)))  # as the memo file gives them back
        thresholds = [t for r in (p.input, p.output, p.cache_read) for t, _ in r.tiers]
        for u in _usages(rng, thresholds):
            assert cost_at(rates, u) == p.cost_of(*u[:6]), (p, u)


def test_the_price_memo_prices_as_pricing_does_and_follows_its_table(tmp_path, monkeypatch):
    path = str(tmp_path / PRICES_FILE)
    day = 86_400 * 10**9
    calls = [("claude-opus-4-6", (10, 20, 40_000, 300, 0, 0, 0), 20_460 * day + 5),
             ("claude-sonnet-4-5-20250929", (250_000, 20, 0, 3, 1, 2, 0), 20_450 * day),
             ("no-such-model-x", (1, 1, 1, 1, 0, 0, 0), 20_460 * day), ("claude-opus-4-6", (1, 2, 3, 4, 0, 0, 0), 0),
             (None, (1, 2, 3, 4, 0, 0, 0), 20_460 * day)]
    want = [DEFAULT_PRICING.cost_of(m, u, t or None) for m, u, t in calls]
    first = PriceMemo(path)
    assert [first.cost_of(m, u, t or None) for m, u, t in calls] == want
    first.save()
    again = PriceMemo(path)
    assert [again.cost_of(m, u, t or None) for m, u, t in calls[:3:2]] == want[:3:2]
    assert not again.added  # all found in the memo
    # a wrong price in the memo is believed only while its table is the one installed
    doc = json.loads(Path(path).read_text())
    doc["prices"] = {k: [[999.0, []]] * 5 for k in doc["prices"]}
    Path(path).write_text(json.dumps(doc))
    assert PriceMemo(path).cost_of(*calls[0]) != want[0]  # (the memo is trusted: the same table)
    for change in ({"table": [doc["table"][0], doc["table"][1] + 1, doc["table"][2]]}, {"python": "/elsewhere"},
                   {"v": 0}, {"table": ["/nowhere/data.py", 1, 2]}):
        Path(path).write_text(json.dumps({**doc, **change}))
        assert PriceMemo(path).cost_of(*calls[0]) == want[0], change
    for broken in (b"", b"{", b"[]", b'{"v": 1}', json.dumps({**doc, "prices": [1]}).encode(),
                   json.dumps({**doc, "prices": {k: 5 for k in doc["prices"]}}).encode(), b"\xff\xfe"):
        Path(path).write_bytes(broken)
        assert [PriceMemo(path).cost_of(m, u, t or None) for m, u, t in calls] == want, broken


def test_a_price_is_kept_for_the_month_after_its_day_and_older_days_are_dropped(tmp_path):
    """Pricing is loaded for a model not seen yet, or once its month of prices has run out: a call
    of a model the memo holds, on any of the 31 days from the day it was priced, is priced from
    the memo, exactly as pricing prices it on that day; days before yesterday are dropped, so the
    memo holds at most 32 days of each model."""
    path = str(tmp_path / PRICES_FILE)
    day = 86_400 * 10**9
    usage = (1_000, 200, 40_000, 300, 0, 0, 0)
    models = ("claude-opus-4-6", "claude-sonnet-4-5-20250929", "no-such-model-x")
    first = PriceMemo(path)
    for m in models:
        first.cost_of(m, usage, 20_460 * day + 7)
    first.save()
    for d in range(20_460, 20_491):
        memo = PriceMemo(path)
        for m in models:
            assert memo.cost_of(m, usage, d * day + 3_600 * 10**9) == DEFAULT_PRICING.cost_of(m, usage, d * day)
        assert not memo.added, d
    later = PriceMemo(path)
    assert later.cost_of(models[0], usage, 20_491 * day) == DEFAULT_PRICING.cost_of(models[0], usage, 20_491 * day)
    assert later.added  # past the month: pricing again
    later.save()
    days = {int(k.split(" ")[0]) for k in PriceMemo(path).prices}
    assert min(days) == 20_490 and max(days) == 20_491 + 30
    assert len(PriceMemo(path).prices) == len(models) * 32


# -- the session cache --------------------------------------------------------------------------

def test_a_broken_session_cache_is_ignored(tmp_path):
    """Whatever the cache file holds (not JSON, JSON of another shape, entries of the wrong
    type), the line is the one a first run prints."""
    config, sid, path = _session("2.1.330-s03_parallel_subagents")
    now = 1_800_000_000 * 10**9
    want = _line(_doc(sid, path), config, "none", now)
    assert "session $0.16" in want
    state = tmp_path / "state"
    cache = state / "statusline" / f"{sid}.json"
    good = None
    for broken in (b"", b"\x00\xff", b"{", b"[]", b"null", b'{"v": 3}',
                   b'{"v": 2, "files": {}, "calls": {}, "pending": {}}',
                   b'{"v": 3, "files": 5, "calls": {}, "pending": {}}',
                   b'{"v": 3, "files": {}, "calls": [], "pending": {}}',
                   b'{"v": 3, "files": {}, "calls": {"k": [1]}, "pending": {}}',
                   b'{"v": 3, "files": {}, "calls": {"k": "x"}, "pending": {"t": 5}}',
                   b'{"v": 3, "files": {"' + str(path).encode() + b'": ["x", "y"]}, "calls": {}, "pending": {}}',
                   b'{"v": 3, "files": {"' + str(path).encode() + b'": [1]}, "calls": {}, "pending": {}}'):
        shutil.rmtree(state, ignore_errors=True)
        cache.parent.mkdir(parents=True)
        cache.write_bytes(broken)
        assert _line(_doc(sid, path), config, state, now) == want, broken
        assert _line(_doc(sid, path), config, state, now) == want, broken  # and from the cache it rewrote
        good = good or cache.read_bytes()
    assert good and json.loads(good)["v"] == 3


def test_a_transcript_rewritten_in_place_is_read_again(tmp_path):
    """A session file that shrank or was replaced (another inode) is read from the start, and the
    calls the cache found in its old content are gone: never a figure of the old file."""
    config, sid, path = _session("2.1.330-s03_parallel_subagents")
    root = tmp_path / "claude"
    shutil.copytree(config, root)
    main = next(root.glob(f"projects/*/{sid}.jsonl"))
    state = tmp_path / "state"
    now = 1_800_000_000 * 10**9
    full = _line(_doc(sid, main), root, state, now)
    lines = main.read_bytes().splitlines(keepends=True)
    keep = [ln for ln in lines if b'"assistant"' not in ln or b'"usage"' not in ln][:3]
    for replace in (False, True):
        if replace:
            tmp = main.with_suffix(".new")
            tmp.write_bytes(b"".join(keep))
            os.replace(tmp, main)
        else:
            main.write_bytes(b"".join(keep))
        fresh = _line(_doc(sid, main), root, "none", now)
        assert _line(_doc(sid, main), root, state, now) == fresh != full, replace
        main.write_bytes(b"".join(lines))  # back to the whole file
        assert _line(_doc(sid, main), root, state, now) == full


# -- the ledger's snapshot ---------------------------------------------------------------------

def _ledger_state(tmp_path: Path, name: str) -> tuple[Path, Path, Path, list[int]]:
    config = load_fixture(name).config_dir
    root = tmp_path / "claude"
    shutil.copytree(config, root)
    state = tmp_path / "state"
    state.mkdir()
    ledger = Ledger(str(state / LEDGER_FILE), roots=(str(root),))
    Pipeline(Options(roots=(str(root),)), emit=ledger.record, state=None).backfill(close_all=True)
    times = sorted(c.time_ns for c in ledger.calls())
    ledger.close()
    return root, state, next(root.glob("projects/*/*.jsonl")), times


def test_the_ledgers_snapshot_answers_as_the_ledger_does_until_it_changes(tmp_path):
    """At any later time (the same block, hours on, the next days) the line from the snapshot equals
    the line read from the ledger; a change of the ledger (a commit, however small and however
    soon) is seen at once; a broken snapshot is ignored."""
    import sqlite3

    root, state, main, times = _ledger_state(tmp_path, "2.1.330-s06_kill_orphan_resume")
    doc = _doc(main.stem, main)
    snap = state / "statusline" / f"{main.stem}.ledger.json"

    def fresh(now: int) -> str:
        snap.unlink(missing_ok=True)
        return _line(doc, root, state, now)

    last = times[-1]
    fresh(last + MIN)
    for now in (last + MIN, last + 10 * MIN, last + 59 * MIN, last + 61 * MIN, last + 4 * 3600 * 10**9,
                last + 6 * 3600 * 10**9, last + 30 * 3600 * 10**9, last + 8 * 86_400 * 10**9):
        _line(doc, root, state, last + MIN)  # a snapshot written at the start
        assert snap.exists()
        assert _line(doc, root, state, now) == fresh(now), now
    assert "turn killed" in fresh(last + MIN) and "today" in fresh(last + MIN)
    # the snapshot is what answers while the ledger is unchanged (a value planted in it shows) ...
    _line(doc, root, state, last + MIN)
    planted = json.loads(snap.read_text())
    planted["rows"].append(["msg_planted:req_planted", "another-session", last, 1, 1, 1, 1, 1000.0])
    snap.write_text(json.dumps(planted))
    assert "$1,0" in _line(doc, root, state, last + MIN)
    # ... and any commit to the ledger, even one that keeps its files' sizes, is seen at once
    for _round in range(3):
        with sqlite3.connect(state / LEDGER_FILE) as db:
            db.execute("UPDATE turns SET outcome = 'completed'")
        assert _line(doc, root, state, last + MIN) == fresh(last + MIN)
        assert "turn killed" not in fresh(last + MIN)
        _line(doc, root, state, last + MIN)
        snap.write_text(json.dumps(planted))
        with sqlite3.connect(state / LEDGER_FILE) as db:
            db.execute("UPDATE turns SET outcome = 'killed' WHERE outcome = 'completed'")
        assert _line(doc, root, state, last + MIN) == fresh(last + MIN)
        assert "turn killed" in fresh(last + MIN)
    # a broken snapshot, or one of other roots or another session, is not used
    want = fresh(last + MIN)
    good = json.loads(snap.read_text())
    for broken in (b"", b"{", b"[]", b"\xff", json.dumps({**good, "rows": 5}).encode(),
                   json.dumps({**good, "rows": [[1]]}).encode(), json.dumps({**good, "turns": [[1]]}).encode(),
                   json.dumps({**good, "v": 0}).encode()):
        snap.write_bytes(broken)
        assert _line(doc, root, state, last + MIN) == want, broken
    for other in ({"roots": ["/elsewhere"]}, {"sid": "another"}, {"after": last}, {"recent": last + 2 * MIN}):
        snap.write_text(json.dumps({**planted, **other}))
        assert _line(doc, root, state, last + MIN) == want, other


def test_a_commit_that_keeps_the_ledgers_sizes_and_mtimes_is_seen(tmp_path):
    """The WAL restarted after a checkpoint and rewritten to the same size, in the same clock tick
    (the mtimes put back): the files' stat is as it was, the WAL index header is not."""
    import sqlite3

    root, state, main, times = _ledger_state(tmp_path, "2.1.330-s06_kill_orphan_resume")
    doc = _doc(main.stem, main)
    db, wal = state / LEDGER_FILE, state / f"{LEDGER_FILE}-wal"
    now = times[-1] + MIN
    keeper = sqlite3.connect(db)  # an open connection keeps the WAL (the last one to close removes it)
    try:
        keeper.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        keeper.execute("UPDATE turns SET stalled = stalled + 1")
        keeper.commit()
        before = _line(doc, root, state, now)
        assert "stalled tool" in before, before
        st_db, st_wal = db.stat(), wal.stat()
        keeper.execute("PRAGMA wal_checkpoint(RESTART)")
        keeper.execute("UPDATE turns SET stalled = stalled - 1")
        keeper.commit()
        assert wal.stat().st_size == st_wal.st_size and db.stat().st_size == st_db.st_size
        os.utime(db, ns=(st_db.st_atime_ns, st_db.st_mtime_ns))
        os.utime(wal, ns=(st_wal.st_atime_ns, st_wal.st_mtime_ns))
        after = _line(doc, root, state, now)
    finally:
        keeper.close()
    assert "stalled tool" not in after, after


def test_a_ledger_of_other_roots_or_none_shows_no_today(tmp_path):
    root, state, main, times = _ledger_state(tmp_path, "2.1.330-s01_bash_tool")
    doc = _doc(main.stem, main)
    assert "today" in _line(doc, root, state, times[-1] + MIN)
    assert "today" not in _line(doc, tmp_path / "other", state, times[-1] + MIN)
    (state / LEDGER_FILE).unlink()
    assert "today" not in _line(doc, root, state, times[-1] + MIN)


# -- what it loads ------------------------------------------------------------------------------

ALLOWED = {  # what ``ccotel statusline`` may load past Python's start (the stdlib's C modules only)
    "ccotel", "ccotel.__main__", "ccotel.commands", "ccotel.commands.statusline", "ccotel.commands.statusline.line",
    "ccotel.commands.statusline.ledger",
    "ccotel.commands.statusline.fastjson",
    "ccotel.commands.statusline.session", "ccotel.commands.statusline.price", "ccotel.rules", "ccotel.rules.model_name",
    "ccotel.rules.blocks", "ccotel.store", "ccotel.store.ledger_peek", "ccotel.store.private_file",
    "ccotel.read", "ccotel.read.regular", "errno",  # (a transcript is opened only if it is a regular file)
    "__future__", "_json", "_sqlite3",
} | {  # what _sqlite3 loads itself (its statement cache is functools.lru_cache)
    "functools", "_functools", "collections", "_collections", "itertools", "keyword", "operator", "_operator",
    "reprlib", "types",
}
NO_LEDGER = ALLOWED - {"_sqlite3", "functools", "_functools", "collections", "_collections", "itertools", "keyword",
                       "operator", "_operator", "reprlib", "types"}
_DRIVER = """import sys
before = set(sys.modules)
sys.argv = ["ccotel", *sys.argv[1:]]
from ccotel.__main__ import main
main()
sys.stderr.write("\\n".join(sorted(set(sys.modules) - before)))
"""


def _loaded(args: list[str], stdin: str) -> tuple[str, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, "statusline", *args], input=stdin, text=True,
                          capture_output=True, env=env, timeout=60, check=True)
    return proc.stdout, set(proc.stderr.split())


def test_what_it_loads_is_an_allow_list(tmp_path):
    """As the ``ccotel`` command starts it (ccotel.__main__:main), with sys.modules compared in the
    process: no state; a ledger and a warm cache (nothing new); a new call of a model and day
    priced before (the price memo: no pricing module); and only a new model or day loads pricing."""
    root, state, main, _times = _ledger_state(tmp_path, "2.1.330-s06_kill_orphan_resume")
    doc = json.dumps(_doc(main.stem, main))
    args = ["--root", str(root), "--state", str(state)]

    out, loaded = _loaded(["--root", str(root), "--state", "none"], json.dumps({"model": {"display_name": "Opus"}}))
    assert out.strip() == "Opus | session -" and loaded <= NO_LEDGER, loaded - NO_LEDGER
    out, first = _loaded(args, doc)  # the first run prices the session's calls: pricing loaded once
    assert "ccotel.spans.pricing" in first and "today" in out
    _loaded(args, doc)  # (the first run's read may have created the ledger's WAL files: another signature)
    out, steady = _loaded(args, doc)  # nothing new: the ledger's snapshot, no SQLite
    assert "today" in out and steady <= NO_LEDGER, steady - NO_LEDGER
    last = next(json.loads(ln) for ln in reversed(main.read_text().splitlines())
                if '"usage"' in ln and '"assistant"' in ln and "<synthetic>" not in ln)
    model = last["message"]["model"]
    new = {"type": "assistant", "uuid": "new-1", "sessionId": main.stem, "requestId": "req_new_1",
           "timestamp": last["timestamp"],
           "message": {"id": "msg_new_1", "model": model, "role": "assistant", "content": [],
                       "usage": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 4000}}}
    with main.open("a") as f:
        f.write(json.dumps(new) + "\n")
    out2, priced = _loaded(args, doc)  # read and priced from the memo; the ledger unchanged
    assert out2 != out and priced <= NO_LEDGER, priced - NO_LEDGER
    import sqlite3

    with sqlite3.connect(state / LEDGER_FILE) as db:  # the ledger changes: it is read again
        db.execute("UPDATE calls SET cost = cost + 1")
    out3, changed = _loaded(args, doc)
    assert out3 == out2 and changed <= ALLOWED and "_sqlite3" in changed, changed - ALLOWED  # (calls of other days)
    new.update(uuid="new-2", requestId="req_new_2", timestamp="2030-01-01T10:00:00.000Z")  # past the memo's month
    new["message"] = {**new["message"], "id": "msg_new_2"}
    with main.open("a") as f:
        f.write(json.dumps(new) + "\n")
    _out, other_day = _loaded(args, doc)
    assert "ccotel.spans.pricing" in other_day
