"""A report the ledger answers alone is summed in SQLite (``from_ledger.summarize_ledger``): byte for
byte the report of ``summarize`` over every row (the reference), on random ledgers made to
break it (ties in time, calls without a cwd first, failed and unpriced calls, costs whose sum
depends on its order, negative and zero times), and it loads nothing heavy."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson
import pytest

from ccotel.commands.report.freshness import written_since
from ccotel.commands.report.from_ledger import summarize_ledger
from ccotel.commands.report.json_doc import as_json
from ccotel.commands.report.rows import Data, Query
from ccotel.commands.report.summary import summarize
from ccotel.store.ledger import LEDGER_FILE, Ledger, TurnRow
from tests.harness.fixtures import load_fixture
from tests.store.test_ledger import build_ledger

QUERIES = [Query(view="session"), Query(view="project"), Query(view="daily"), Query(view="monthly", order="desc"),
           Query(view="weekly", tz=ZoneInfo("Asia/Kolkata"), start_of_week=0),
           Query(view="session", since=date(1970, 1, 1), until=date(1970, 1, 2), tz=ZoneInfo("UTC")),
           Query(view="daily", since=date(1969, 12, 31), tz=ZoneInfo("America/St_Johns")),
           Query(view="project", until=date(1970, 1, 1), tz=ZoneInfo("UTC"))]

HOUR = 3600 * 10**9


def reference(ledger: Ledger, q: Query) -> bytes:
    data = Data(list(ledger.calls()), list(ledger.tools()), list(ledger.agents()), list(ledger.turns()), "ledger")
    return orjson.dumps(as_json(summarize(data, q)))


def random_ledger(path: Path, seed: int) -> Ledger:
    rnd = random.Random(seed)
    sessions = [f"s{i}" for i in range(rnd.randint(1, 6))]
    times = [0, -HOUR - 1, *(rnd.randrange(-30 * HOUR, 60 * HOUR) for _ in range(20))]  # few: many ties

    def maybe(values: list[str | None]) -> str | None:
        return rnd.choice(values)

    calls = []
    for i in range(rnd.randint(0, 300)):
        t = rnd.choice(times)
        cost = None if rnd.random() < 0.15 else rnd.random() * 10.0 ** rnd.randint(-7, 2)
        calls.append((f"k{i}", rnd.choice(sessions), t, t, maybe([None, "", "/w/a", "/w/b"]),
                      maybe([None, "", "-w-a", "-w-b"]), maybe([None, "<synthetic>", "claude-x", "claude-y"]),
                      None, int(rnd.random() < 0.1), *(rnd.randrange(0, 10**6) for _ in range(7)), cost,
                      int(cost is not None), None))
    tools = [(rnd.choice(sessions), f"t{i}", rnd.choice(times), 0, "Bash", None,
              maybe([None, None, "orphaned", "Error"]), int(rnd.random() < 0.2)) for i in range(rnd.randint(0, 60))]
    agents = [(rnd.choice(sessions), f"a{i}", rnd.choice(times), 0, "x", 0, 0) for i in range(rnd.randint(0, 10))]
    turns = [(rnd.choice([*sessions, "ghost1", "ghost2"]), f"u{i}", rnd.choice(times), 0,
              maybe([None, "/w/c"]), maybe([None, "-w-c"]), None, rnd.choice(["ok", "killed", "incomplete"]),
              0, 0, 0, 0, rnd.choice([0, 0, 1]), 0) for i in range(rnd.randint(0, 40))]
    ledger = Ledger(str(path))
    ledger._write((calls, tools, agents, turns))  # noqa: SLF001 - rows as the upserts take them
    return ledger


@pytest.mark.parametrize("seed", range(60))
def test_sums_in_sqlite_equal_the_row_by_row_report(tmp_path, seed):
    ledger = random_ledger(tmp_path / LEDGER_FILE, seed)
    for q in QUERIES:
        assert orjson.dumps(as_json(summarize_ledger(ledger, q))) == reference(ledger, q), q


@pytest.mark.parametrize("seed", range(30))
def test_the_report_does_not_depend_on_the_turns_order(tmp_path, seed):
    """A session's prompts start it (the session view) whatever order its turns are read in: a
    killed turn that makes a session's row counts the prompts before it too."""
    ledger = random_ledger(tmp_path / LEDGER_FILE, seed)
    turns = list(ledger.turns())
    data = Data(list(ledger.calls()), list(ledger.tools()), list(ledger.agents()), turns, "ledger")
    shuffled = Data(data.calls, data.tools, data.agents, random.Random(seed).sample(turns, len(turns)), "ledger")
    for q in QUERIES:
        assert orjson.dumps(as_json(summarize(shuffled, q))) == orjson.dumps(as_json(summarize(data, q))), q


def test_a_killed_turn_after_a_prompt_starts_the_session_at_the_prompt():
    """A session with no call: a prompt at 100, then a killed turn at 200. In either order the
    session's first activity is the prompt's."""
    prompt = TurnRow("g", "u1", 100, 0, None, None, "ok", 0, 0, 0)
    killed = TurnRow("g", "u2", 200, 0, None, None, "killed", 0, 0, 0)
    for turns in ([prompt, killed], [killed, prompt]):
        row = summarize(Data([], [], [], turns, "ledger"), Query(view="session")).rows[0]
        assert (row.first_ns, row.last_ns, row.kills, row.ghosts) == (100, 200, 1, 1), turns


@pytest.mark.parametrize("reverse", [False, True])
def test_the_cost_sum_is_exact_in_any_order(tmp_path, reverse):
    """Costs whose float sum differs by order (0.1 + 0.2 + 0.3): summed as integer nano-dollars,
    the total is exact whichever order the calls are written and read in."""
    costs = [0.1, 0.2, 0.3]
    assert sum(costs) != sum(reversed(costs))  # the case means something as floats
    calls = [(f"k{i}", "s", 10 - i if reverse else i, 0, "/w", "-w", "m", None, 0, 1, 1, 0, 0, 0, 0, 0, c, 1, None)
             for i, c in enumerate(costs)]
    ledger = Ledger(str(tmp_path / LEDGER_FILE))
    ledger._write((calls, [], [], []))  # noqa: SLF001
    report = summarize_ledger(ledger, Query(view="session"))
    assert report.rows[0].cost_nano == 600_000_000
    assert orjson.dumps(as_json(report)) == reference(ledger, Query(view="session"))


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_sums_equal_on_a_ledger_the_pipeline_wrote(tmp_path, name):
    root = load_fixture(name).config_dir
    ledger = build_ledger(root, tmp_path / LEDGER_FILE)
    for q in QUERIES + [Query(view="session", tz=ZoneInfo("UTC"), since=date(2020, 1, 1))]:
        assert orjson.dumps(as_json(summarize_ledger(ledger, q))) == reference(ledger, q), q


def test_written_since_sees_every_transcript_and_only_them(tmp_path):
    root = tmp_path / "claude"
    sub = root / "projects" / "-w" / "sess" / "subagents"
    sub.mkdir(parents=True)
    main, agent, other = root / "projects" / "-w" / "sess.jsonl", sub / "agent-1.jsonl", sub / "agent-1.meta.json"
    for p in (main, agent, other):
        p.write_text("{}\n")
        os.utime(p, ns=(1_000, 1_000))
    assert not written_since([str(root)], 2_000)
    assert written_since([str(root)], 1_000)  # at the bound: read again, as gather does
    os.utime(other, ns=(5_000, 5_000))
    assert not written_since([str(root)], 2_000)  # not a transcript
    os.utime(agent, ns=(5_000, 5_000))
    assert written_since([str(root)], 2_000)  # a subagent file, two levels down
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.jsonl").write_text("{}\n")
    os.utime(agent, ns=(1_000, 1_000))
    (root / "projects" / "-link").symlink_to(outside)  # scan does not enter a symlinked dir
    assert not written_since([str(root)], 2_000)
    assert not written_since([str(tmp_path / "missing")], 0)


def _aged_copy(tmp_path: Path) -> Path:
    """s06's config dir copied, its files older than any ledger: the repository's fixture is not touched
    (other tests and tests.support.golden read its mtimes)."""
    root = tmp_path / "claude"
    shutil.copytree(load_fixture("s06_kill_orphan_resume").config_dir, root)
    for p in root.rglob("*"):
        os.utime(p, ns=(10**9, 10**9))
    return root


def test_a_report_from_the_ledger_loads_nothing_heavy(tmp_path):
    """rich, genai-prices/pydantic, the pipeline, prometheus_client, OpenTelemetry: not imported when the
    ledger answers alone (start-up is most of such a report)."""
    root = _aged_copy(tmp_path)
    build_ledger(root, tmp_path / "state" / LEDGER_FILE).close()
    code = ("import sys, io, contextlib\nfrom ccotel.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    main(['report', '--json', '--root', {str(root)!r}, '--state-dir', {str(tmp_path / 'state')!r}])\n"
            "assert '\"source\": \"ledger\"' in out.getvalue(), out.getvalue()[-300:]\n"
            "heavy = ('rich', 'genai_prices', 'pydantic', 'opentelemetry', 'prometheus_client',\n"
            "         'ccotel.run.pipeline')\n"
            "print(sorted({m.split('.')[0] if not m.startswith('ccotel') else m for m in sys.modules\n"
            "              if m.startswith(heavy)}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_report_from_the_ledger_imports_only_what_it_needs(tmp_path):
    """The ledger path loads neither the transcript side (records, rules, parse, tail, msgspec) nor
    state.py (given --state-dir) nor zoneinfo (no --timezone): a start of ~0.1 s, most of the report."""
    root = _aged_copy(tmp_path)
    build_ledger(root, tmp_path / "state" / LEDGER_FILE).close()
    state = str(tmp_path / "state")
    code = ("import sys, io, contextlib\nfrom ccotel.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    main(['report', 'daily', '--json', '--root', {str(root)!r}, '--state-dir', {state!r}])\n"
            "assert '\"source\": \"ledger\"' in out.getvalue(), out.getvalue()[-300:]\n"
            "print(sorted(m for m in sys.modules if m.startswith(('ccotel', 'msgspec', 'rich', 'zoneinfo'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == str([
        "ccotel", "ccotel.cli", "ccotel.commands", "ccotel.commands.options", "ccotel.commands.report",
        "ccotel.commands.report.command", "ccotel.commands.report.freshness", "ccotel.commands.report.from_ledger",
        "ccotel.commands.report.json_doc", "ccotel.commands.report.kept", "ccotel.commands.report.rows",
        "ccotel.commands.report.summary", "ccotel.commands.report.views", "ccotel.export", "ccotel.export.closed",
        "ccotel.logs", "ccotel.read", "ccotel.read.layout",
        "ccotel.rules", "ccotel.rules.model_name", "ccotel.run", "ccotel.run.stopping", "ccotel.store",
        "ccotel.store.ledger", "ccotel.store.ledger_peek", "ccotel.store.ledger_schema",
        "ccotel.store.location", "ccotel.store.private_file"]), out.stdout


