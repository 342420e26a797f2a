"""``ccotel trace``: the terminal waterfall of a turn, on the real-CLI fixtures of both Claude Code versions.

The reference is the exporter itself: a Pipeline over the whole fixture config dir with
``backfill(close_all=False)``, as ``ccotel backfill`` runs it. The waterfall must show exactly
those spans (ids, parents, names, times, attributes), nested as their parent ids say, with bars
where their times put them, and every error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from ccotel.commands import trace as waterfall
from ccotel.commands.options import price_file
from ccotel.commands.terminal import dollars
from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from tests.harness.fixtures import load_fixture

SCENARIOS = ["s03_parallel_subagents", "s05_nested_subagent", "s11_interrupt", "s07_api_errors",
             "s06_kill_orphan_resume", "s13_advisor", "s08_failing_tool", "s04_background_subagent"]
FIXTURES = [f"{v}{sc}" for v in ("", "2.1.330-", "2.1.332-") for sc in SCENARIOS]
GUIDE = set("│├└─ ")


def parser() -> argparse.ArgumentParser:
    """The parser cli.py builds for ``ccotel trace`` (the wiring given to the lead)."""
    p = argparse.ArgumentParser(prog="ccotel trace")
    p.add_argument("--root", action="append", default=None)
    p.add_argument("--prices", type=price_file, default=None)
    p.add_argument("-v", "--verbose", action="store_true")
    waterfall.add_arguments(p)
    return p


def trace(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = waterfall.run(parser().parse_args(list(argv)))
    out, err = capsys.readouterr()
    return rc, out, err


def exported(config_dir: Path | str, session_id: str) -> list[SpanRecord]:
    """What `ccotel backfill` exports for the session (every session of the root read, as it would)."""
    out: list[SpanRecord] = []
    Pipeline(Options(roots=(str(config_dir),)), emit=out.extend, state=None).backfill(close_all=False)
    return [s for s in out if s.attributes.get("session.id") == session_id]


def flatten(nodes: list[dict], depth: int = 0, parent: str | None = None) -> list[tuple[int, dict, str | None]]:
    rows = []
    for n in nodes:
        rows.append((depth, n, parent))
        rows += flatten(n["children"], depth + 1, n["spanId"])
    return rows


def parse_table(out: str) -> tuple[int, int, list[tuple[int, str, str, str]]]:
    """(bar start column, bar width, rows of (depth, name, took, bar)) of a rendered waterfall."""
    lines = out.splitlines()
    h = next(i for i, line in enumerate(lines) if line.startswith("span ") and " took " in line)
    header = lines[h]
    bar0 = header.index(" took ") + len(" took ")
    bar1 = header.index(" tokens · status")
    rows = []
    for line in lines[h + 1:]:
        if line.startswith(("✗ ", "in: ")):
            break
        name_cell = line[:bar0 - 8].rstrip()
        guide = len(name_cell) - len(name_cell.lstrip("".join(GUIDE)))
        assert guide % 3 == 0, line
        rows.append((guide // 3, name_cell[guide:], line[bar0 - 7:bar0 - 1].strip(), line[bar0:bar1]))
    return bar0, bar1 - bar0, rows


def same_name(shown: str, name: str) -> bool:
    """The span's name, or on a narrow terminal its short form (the tool's name alone, the model
    without ``claude-``), either maybe cut with an ellipsis."""
    op, _, rest = name.partition(" ")
    forms = {name, rest if op == "execute_tool" else name, f"chat {rest.removeprefix('claude-')}"}
    return any(shown == f or (shown.endswith("…") and f.startswith(shown[:-1])) for f in forms)


def plain(value: object) -> object:
    """An attribute value as JSON gives it back (tuples are lists)."""
    return json.loads(orjson.dumps(value))


@pytest.mark.parametrize("name", FIXTURES)
def test_waterfall_is_the_exported_trace(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture(name)
    sid = fx.session_ids[-1]
    reference = exported(fx.config_dir, sid)
    assert reference, name
    by_id = {s.span_id: s for s in reference}
    rc, out, _ = trace(capsys, sid[:8], "--root", str(fx.config_dir), "--list", "--json")
    assert rc == 0
    turns = json.loads(out)["turns"]
    assert len(turns) == sum(1 for s in reference if s.parent_span_id is None)
    seen: Counter[int] = Counter()
    for t in turns:
        rc, out, _ = trace(capsys, sid, "--root", str(fx.config_dir), "--turn", str(t["turn"]), "--json")
        assert rc == 0
        doc = json.loads(out)
        nodes = flatten(doc["spans"])
        for depth, node, parent in nodes:
            span = by_id[int(node["spanId"], 16)]
            seen[span.span_id] += 1
            # the tree is the spans' own parent/child structure, and the JSON is the exported span
            assert node["parentSpanId"] == parent == (f"{span.parent_span_id:016x}" if span.parent_span_id else None)
            assert (depth == 0) == (span.parent_span_id is None)
            assert node["traceId"] == f"{span.trace_id:032x}" == doc["traceId"]
            assert (node["name"], node["kind"], node["startNs"], node["endNs"]) == \
                (span.name, span.kind.name, span.start_ns, span.end_ns)
            assert node["attributes"] == plain(span.attributes)
            assert (node["status"], node["statusMessage"]) == (span.status.name, span.status_message)
            assert node["open"] is False
            starts = [c["startNs"] for c in node["children"]]
            assert starts == sorted(starts)  # children in start order
        # the rendered tree is the same tree, row by row, at both widths a user would have
        for width in (80, 100, 160):
            rc, out, _ = trace(capsys, sid, "--root", str(fx.config_dir), "--turn", str(t["turn"]),
                               "--width", str(width))
            assert rc == 0 and max(len(line) for line in out.splitlines()) <= width
            _, bar_width, rows = parse_table(out)
            assert len(rows) == len(nodes)
            t0 = min(n["startNs"] for _, n, _ in nodes)
            total = max(n["endNs"] for _, n, _ in nodes) - t0
            firsts = []
            for (depth, shown, took, bar), (node_depth, node, _) in zip(rows, nodes, strict=True):
                assert depth == node_depth and same_name(shown, node["name"]), (shown, node["name"])
                assert len(bar) == bar_width
                first = len(bar) - len(bar.lstrip())
                cells = len(bar.strip())
                # where and how long: proportional to the span's times on the trace's axis
                assert first == min(int((node["startNs"] - t0) * bar_width // total), bar_width - 1), (shown, bar)
                exact = (node["endNs"] - node["startNs"]) * bar_width / total
                end = (node["endNs"] - t0) * bar_width / total
                # both edges where the times put them: the start within the cell, the end rounded
                assert first + cells == max(first + 1, min(bar_width, math.floor(end + 0.5))), (shown, bar, end)
                assert abs(cells - max(exact, 1)) <= 1.5, (shown, bar, exact)
                assert bar.strip() == ("▏" if exact < 0.5 else "█" * cells)
                assert took == waterfall._duration(node["endNs"] - node["startNs"])
                firsts.append((node["startNs"], first))
            assert [f for _, f in sorted(firsts)] == sorted(f for _, f in firsts)  # later starts never left
    assert set(seen) == set(by_id) and set(seen.values()) == {1}  # every exported span once


@pytest.mark.parametrize("name", ["s07_api_errors", "2.1.330-s07_api_errors", "s06_kill_orphan_resume",
                                  "2.1.330-s06_kill_orphan_resume", "s11_interrupt", "2.1.330-s11_interrupt",
                                  "s08_failing_tool", "2.1.330-s08_failing_tool"])
def test_errors_are_shown(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture(name)
    shown_errors = 0
    for sid in fx.session_ids:
        reference = exported(fx.config_dir, sid)
        roots = sorted((s for s in reference if s.parent_span_id is None), key=lambda s: s.start_ns)
        for i, root in enumerate(roots, 1):
            rc, out, _ = trace(capsys, sid, "--root", str(fx.config_dir), "--turn", str(i), "--width", "160")
            assert rc == 0
            errors = [s for s in reference if s.trace_id == root.trace_id and s.status is StatusCode.ERROR]
            listed = [line for line in out.splitlines() if line.startswith("✗ ")]
            assert len(listed) == len(errors), out
            for s in errors:
                what = s.attributes.get("error.type") or s.attributes.get("claude_code.turn.outcome")
                assert any(line.startswith(f"✗ {s.name} at +") and f": {what}" in line for line in listed), (s, out)
            outcome = root.attributes["claude_code.turn.outcome"]
            assert f"outcome {outcome}" in out
            if errors:
                kinds = Counter(str(s.attributes.get("gen_ai.operation.name")) for s in errors)
                assert "errors: " in out or kinds == Counter({"invoke_agent": 1})
            shown_errors += len(errors)
    assert shown_errors > 0


def test_a_small_fixture_renders_as_expected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """s01 (2.1.197) at 100 columns, with fixed prices. The figures are the fake API's ground truth:
    input shown = input + cache read + cache write of the response; cost at the prices below."""
    fx = load_fixture("s01_bash_tool")
    prices = tmp_path / "prices.json"
    rate = {"input": 1, "output": 10, "cache_read": 0.1, "cache_write_5m": 2, "cache_write_1h": 2}
    prices.write_text(json.dumps({"claude-opus-4-8": rate}))
    rc, out, _ = trace(capsys, "fae6cced", "--root", str(fx.config_dir), "--prices", str(prices), "--width", "100")
    assert rc == 0
    expected = """\
session fae6cced-87c5-4ed5-b276-5ba0c9d23de8  turn 1/1  trace b42f188144355216c66afa85e773690b
started 2026-11-21 05:31 UTC · took 156ms · outcome completed · Claude Code 2.1.197
cwd /tmp/ccotel-s01_bash_tool-yhjd9vq1/proj
2 API calls (claude-opus-4-8) · 1 tool call · 0 subagents
tokens in 22.5k out 293 cr 18.2k cw 607 · cost $0.01

span                       took 0           78ms       156ms tokens · status                       $
invoke_agent claude-code  155ms ████████████████████████████ completed · 2 calls · 1 tool
├─ chat claude-opus-4-8    68ms ████████████                 in 11.1k out 143 cr 9,017 cw 297 0.0047
│  └─ execute_tool Bash    69ms             █████████████
└─ chat claude-opus-4-8    19ms                         ████ in 11.4k out 150 cr 9,228 cw 310 0.0049
in: input incl. cache read (cr) and write (cw) · $: estimate at list prices
"""
    assert [line.rstrip() for line in out.splitlines()] == expected.splitlines()
    # the snapshot's figures, from the fake API's record of what it sent
    truth = fx.ground_truth
    for i, call in enumerate(truth):
        u = call["usage"]
        total_in = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        cost = (u["input_tokens"] * rate["input"] + u["output_tokens"] * rate["output"]
                + u["cache_read_input_tokens"] * rate["cache_read"]
                + u["cache_creation_input_tokens"] * rate["cache_write_5m"]) / 1e6
        line = out.splitlines()[8 + 2 * i]
        assert f"in {total_in / 1000:.1f}k out {u['output_tokens']} cr {u['cache_read_input_tokens']:,} " \
               f"cw {u['cache_creation_input_tokens']} {dollars(cost)}" in line  # under a cent: 2 digits
    total = sum(float(line.rsplit(" ", 1)[1]) for line in out.splitlines()[8:11:2])
    assert f"cost ${dollars(total)}" in out


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "a", "abc1234", "x;rm -rf", "..", "%2e%2e",
                                 "fae6cced-87c5-4ed5-b276-5ba0c9d23de8.jsonl", "-tmp-ccotel/fae6cced"])
def test_bad_ids_are_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture("s01_bash_tool")
    rc, out, err = trace(capsys, "--root", str(fx.config_dir), "--", bad)
    assert rc == 2 and out == "" and "ccotel trace:" in err


def test_a_transcript_path_is_refused_too(capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture("s01_bash_tool")
    rc, out, err = trace(capsys, str(fx.main_transcripts[0]), "--root", str(fx.config_dir))
    assert rc == 2 and out == "" and "not a session id" in err


def test_unknown_ambiguous_and_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture("s02_resume_two_turns")
    root = tmp_path / "claude"
    shutil.copytree(fx.config_dir, root)
    sid = fx.session_ids[0]
    main = next(root.glob(f"projects/*/{sid}.jsonl"))
    twin = sid[:9] + "ffff" + sid[13:]  # same first 9 characters, another session
    shutil.copy(main, main.with_name(f"{twin}.jsonl"))
    rc, out, err = trace(capsys, "00000000", "--root", str(root))
    assert rc == 2 and "unknown session 00000000" in err and out == ""
    rc, out, err = trace(capsys, sid[:9], "--root", str(root))
    assert rc == 2 and f"ambiguous: {sid[:9]} matches {', '.join(sorted([sid, twin]))}" in err and out == ""
    rc, out, _ = trace(capsys, sid[:10], "--root", str(root), "--list", "--json")  # unique again
    assert rc == 0 and json.loads(out)["sessionId"] == sid and len(json.loads(out)["turns"]) == 2
    for n in ("3", "-3", "0"):
        rc, out, err = trace(capsys, sid, "--root", str(root), "--turn", n)
        assert rc == 2 and "the session has 2 turns" in err and out == ""
    first = json.loads(trace(capsys, sid, "--root", str(root), "--turn", "1", "--json")[1])
    assert json.loads(trace(capsys, sid, "--root", str(root), "--turn", "-2", "--json")[1]) == first
    last = json.loads(trace(capsys, sid, "--root", str(root), "--json")[1])
    assert last["turn"] == 2 and last["traceId"] != first["traceId"]


def test_nothing_outside_the_roots_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture("s01_bash_tool")
    root = tmp_path / "claude"
    (root / "projects" / "-p").mkdir(parents=True)
    sid = fx.session_ids[0]
    (root / "projects" / "-p" / f"{sid}.jsonl").symlink_to(fx.main_transcripts[0])  # leads out of the root
    rc, out, _ = trace(capsys, sid, "--root", str(root), "--json")
    assert rc == 2 and out == ""


def _shift_to_now(path: Path, delta_ns: int) -> None:
    lines = []
    for raw in path.read_bytes().splitlines():
        doc = orjson.loads(raw)
        if isinstance(doc.get("timestamp"), str):
            t = datetime.fromisoformat(doc["timestamp"].replace("Z", "+00:00")).timestamp() * 1e9 + delta_ns
            doc["timestamp"] = datetime.fromtimestamp(t / 1e9, tz=timezone.utc).isoformat(
                timespec="milliseconds").replace("+00:00", "Z")
        lines.append(orjson.dumps(doc))
    path.write_bytes(b"\n".join(lines) + b"\n")


def live_copy(name: str, dest: Path) -> tuple[Path, str]:
    """The s06 transcript as the kill left it, moved to a few seconds ago, with its sessions file
    naming this test's own (live) process: a turn whose tool call is still running."""
    fx = load_fixture(name)
    root = dest / "claude"
    shutil.copytree(fx.snapshots["after_kill"], root)
    sid = fx.session_ids[0]
    main = next(root.glob(f"projects/*/{sid}.jsonl"))
    last = max(orjson.loads(raw).get("timestamp") or "" for raw in main.read_bytes().splitlines())
    last_ns = datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp() * 1e9
    _shift_to_now(main, int(datetime.now(timezone.utc).timestamp() * 1e9 - last_ns - 5e9))
    for f in (root / "sessions").glob("*.json"):
        f.unlink()
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    (root / "sessions" / f"{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "sessionId": sid, "procStart": start}))
    return root, sid


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_an_open_turn_is_shown_running(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, sid = live_copy(name, tmp_path)
    reference = exported(root, sid)
    assert not any(s.parent_span_id is None for s in reference)  # the exporter holds the open turn back
    rc, out, _ = trace(capsys, sid, "--root", str(root), "--json")
    assert rc == 0
    doc = json.loads(out)
    nodes = [n for _, n, _ in flatten(doc["spans"])]
    assert doc["outcome"] == "open" and nodes[0]["open"] is True
    sent = {f"{s.span_id:016x}" for s in reference}
    assert {n["spanId"] for n in nodes if not n["open"]} == sent  # what was exported, the rest is open
    tool = next(n for n in nodes if n["name"] == "execute_tool Bash")
    assert tool["open"] is True and tool["attributes"]["error.type"] == "orphaned"
    rc, out, _ = trace(capsys, sid, "--root", str(root), "--width", "160")
    assert "outcome open (still running" in out and "running: no result yet" in out
    assert not [line for line in out.splitlines() if line.startswith("✗ ")]  # running is not an error


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_a_killed_turn(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture(name)
    root = tmp_path / "claude"
    shutil.copytree(fx.snapshots["after_kill"], root)  # its sessions/<pid>.json names a dead process
    rc, out, _ = trace(capsys, fx.session_ids[0], "--root", str(root), "--width", "100")
    assert rc == 0 and "outcome killed" in out
    assert any(line.startswith("✗ execute_tool Bash at +") for line in out.splitlines()), out


def test_json_is_stable_for_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    fx = load_fixture("2.1.330-s13_advisor")
    args = (fx.session_ids[0], "--root", str(fx.config_dir), "--json")
    first, second = trace(capsys, *args)[1], trace(capsys, *args)[1]
    assert first == second
    doc = json.loads(first)
    advisor = [n for _, n, _ in flatten(doc["spans"]) if n["attributes"].get("claude_code.advisor")]
    assert len(advisor) == 1
    assert set(doc) >= {"sessionId", "turn", "turns", "traceId", "outcome", "spans", "inputTokens", "cost"}
    span_keys = {"spanId", "parentSpanId", "traceId", "name", "kind", "startNs", "endNs", "start", "end",
                 "durationS", "status", "statusMessage", "open", "attributes", "events", "children"}
    assert all(set(n) == span_keys for _, n, _ in flatten(doc["spans"]))
    assert math.isclose(doc["cost"], sum(n["attributes"].get("claude_code.cost.usd", 0)
                                         for _, n, _ in flatten(doc["spans"])), rel_tol=1e-9)


def test_errors_are_red_on_a_terminal() -> None:
    """What a user's terminal gets: the failed call's name, bar and message in red, the turn's name
    not dimmed with the tree guides."""
    import io

    from rich.console import Console

    from ccotel.commands import sessions

    fx = load_fixture("s07_api_errors")
    opts = Options(roots=(str(fx.config_dir),))
    ss = sessions.collect_spans(opts, sessions.find_session(fx.session_ids[0], opts.roots))
    (turn,) = waterfall.turns_of(ss)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=100)
    console.print(waterfall.render_turn(turn, ss, 1, 100))
    out = buf.getvalue()
    red, dim = "\x1b[1;31m", "\x1b[2m"
    assert f"{red}chat\x1b[0m" in out and f"{red}✗ 400: API Error: 400" in out and f"{red}█" in out
    assert "\x1b[1minvoke_agent claude-code\x1b[0m" in out and f"{dim}└─ \x1b[0m" in out


@pytest.mark.parametrize("width", range(12, 61))  # _layout: the bar is at least 12 wide
def test_the_axis_labels_never_collide(width: int) -> None:
    """Issue 28: at 80 columns the axis read `4m06s8m12s`. Every label stands apart, 0 and the end
    are always there."""
    for total in (175_000_000, 492_000_000_000, 7_384_000_000_000):
        axis = str(waterfall._axis(total, width))
        assert len(axis) == width and axis.startswith("0 ")
        assert axis.rstrip().endswith(waterfall._duration(total)[:width - 2])
        labels = axis.split()
        assert "".join(labels) == axis.replace(" ", "")  # no two labels touch
        assert all(lab in ("0", waterfall._duration(total // 2), waterfall._duration(total)) for lab in labels), axis


def test_one_rule_for_costs() -> None:
    """To the cent; under a cent two significant digits (an API call's cost would read 0.00)."""
    assert [dollars(x) for x in (0, 0.0047, 0.00049, 0.005, 0.01, 1234.567)] == \
        ["0.00", "0.0047", "0.00049", "0.01", "0.01", "1,234.57"]


def seconds(took: str) -> float:
    """A duration as trace writes it (``101ms``, ``5.03s``, ``2m05s``, ``1h02m``) in seconds."""
    if took.endswith("ms"):
        return float(took[:-2]) / 1e3
    if took.endswith("s") and "m" in took:
        m, s = took[:-1].split("m")
        return int(m) * 60 + int(s)
    if took.endswith("m") and "h" in took:
        h, m = took[:-1].split("h")
        return int(h) * 3600 + int(m) * 60
    return float(took.removesuffix("s"))


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_an_open_turn_and_its_running_tool_run_until_now(name: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The transcript's last line (the Bash tool_use) was written 5 s ago and the process runs: the
    turn has been running at least 5 s, and so has its tool, however close its lines are."""
    root, sid = live_copy(name, tmp_path)
    for width in (80, 120):
        rc, out, _ = trace(capsys, sid, "--root", str(root), "--width", str(width))
        assert rc == 0 and max(len(line) for line in out.splitlines()) <= width
        head = out.split("\n\n")[0]
        assert " took " not in head, head  # not what its lines span
        so_far = head.split("running ")[1].split(" so far")[0]
        assert 5 <= seconds(so_far) < 60, head
        _, bar_width, rows = parse_table(out)
        tool = next(r for r in rows if r[1] in ("execute_tool Bash", "Bash"))
        assert seconds(tool[2]) >= 5, out  # its elapsed time, not 0 ms
        assert tool[3].count("█") >= bar_width // 2, out  # a bar to now, not a tick
        assert "running" in out.split(tool[1], 1)[1].splitlines()[0]
        assert seconds(rows[0][2]) >= 5  # the turn's own row
    rc, out, _ = trace(capsys, sid, "--root", str(root), "--list", "--width", "120")
    row = next(line for line in out.splitlines() if line.strip().startswith("1 "))
    assert "open" in row and 5 <= seconds(row.split()[3]) < 60, out
    rc, out, _ = trace(capsys, sid, "--root", str(root), "--json")
    doc = json.loads(out)
    assert 5 <= doc["runningS"] < 60 and doc["durationS"] < 1  # the spans' own times stay the exporter's


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_a_live_process_s_tool_past_the_stall_timeout_is_running_not_orphaned(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its process runs: a tool 5 s without a result, past a 2 s stall timeout, is a long tool
    (stalled), not an orphan, for a backfill as for `ccotel run` live (closing.tick_session)."""
    root, sid = live_copy(name, tmp_path)
    out: list[SpanRecord] = []
    from ccotel.assemble.closing import Timeouts

    options = Options(roots=(str(root),), timeouts=Timeouts(stall_ns=2 * 10 ** 9))
    kept = Pipeline(options, emit=out.extend, state=None).backfill(close_all=False)
    assert kept == 1 and not [s for s in out if s.parent_span_id is None or "orphaned" in str(s.attributes)]
    rc, text, _ = trace(capsys, sid, "--root", str(root), "--width", "120", "--stall-timeout", "2")
    assert rc == 0 and "outcome open (still running" in text and "running: no result yet" in text, text
    assert not [line for line in text.splitlines() if line.startswith("✗ ")], text
