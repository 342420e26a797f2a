"""``ccotel statusline``: the line Claude Code shows under its prompt (its ``statusLine`` setting
runs this after each message with the session's JSON on stdin).

One line: the model; this session's cost and tokens with its subagents (and Claude Code's own
figure beside it when the two differ); today's cost; the active 5-hour block with the time left
and, on plans that have them, Claude Code's 5-hour and 7-day usage; and what is wrong right now
(a transcript missing or outside the roots, a tool call waiting for its result past the stall
timeout, what ``ccotel run`` recorded: a killed turn, stalled or orphaned tool calls, a killed
subagent).

It answers from the usage ledger (read-only) and the session's own transcript, read incrementally
(session.py). It never fails: bad input, no state, no ledger, a missing transcript still
print a line and exit 0. It reads only under the roots. ``python -m ccotel statusline`` reaches
here without argparse, logging or the pipeline (ccotel/__main__.py): the line costs little more
than Python's own start."""

from __future__ import annotations

import os
import sys
import time

from ccotel.commands.statusline.fastjson import loads

TYPE_CHECKING = False  # typing is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    from typing import Any

__all__ = ["main", "Options", "parse_options", "status_line"]

_STALL_NS = 180 * 1_000_000_000  # --stall-timeout's default (run, check, sessions)
_MAX_INPUT = 1 << 20


class Options:
    """--root (repeatable), --state / --state-dir, --no-ledger."""

    def __init__(self, roots: list[str], state: str | None, no_ledger: bool = False) -> None:
        self.roots = roots
        self.state = state
        self.no_ledger = no_ledger


def parse_options(argv: list[str], env: dict[str, str] | None = None) -> Options:
    """The few options, read by hand (argparse costs more than the whole line); an unknown one is
    ignored: a status line prints whatever it is given."""
    env = dict(os.environ) if env is None else env
    roots: list[str] = []
    state: str | None = None
    no_ledger = False
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        i += 1
        if name == "--no-ledger":
            no_ledger = True
        elif name in ("--root", "--state", "--state-dir"):
            if not eq:
                if i >= len(argv):
                    break
                value, i = argv[i], i + 1
            if name == "--root":
                roots.append(value)
            else:
                state = value
    if not roots:
        raw = env.get("CLAUDE_CONFIG_DIR", "").strip()  # layout.default_roots' rule (a copy)
        roots = [os.path.abspath(os.path.expanduser(p.strip())) for p in raw.split(",") if p.strip()] if raw \
            else [os.path.join(os.path.expanduser("~"), ".claude")]
    if state is None:
        state = env.get("CCOTEL_STATE") or os.path.join(  # store/location.default_state_dir's rule (a copy)
            env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"), "ccotel")
    return Options(roots, None if state == "none" else state, no_ledger)


def _under_roots(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    for root in roots:
        r = os.path.realpath(root)
        if real.startswith(r.rstrip(os.sep) + os.sep):
            return True
    return False


def _money(usd: float) -> str:
    return f"${usd:,.2f}"


def _tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1000:
        return f"{n / 1e3:.0f}k"
    return str(n)


def _duration(ns: int) -> str:
    m = max(0, ns) // 60_000_000_000
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m"


def _local_midnight_ns(now_ns: int) -> int:
    t = time.localtime(now_ns // 1_000_000_000)
    return int(time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))) * 1_000_000_000


class _Line:
    """The parts of the line, with colour unless NO_COLOR."""

    def __init__(self, color: bool) -> None:
        self.color = color
        self.parts: list[str] = []

    def add(self, text: str, code: str | None = None) -> None:
        self.parts.append(f"\x1b[{code}m{text}\x1b[0m" if self.color and code else text)

    def text(self) -> str:
        return (" \x1b[2m|\x1b[0m " if self.color else " | ").join(self.parts)


def _calls_by_key(ledger_rows: list[tuple[Any, ...]], session_calls: dict[str, list[Any]]
                  ) -> dict[str, tuple[int, int, float]]:
    """key -> (time ns, tokens, cost): the ledger's calls, and the session's read from its
    transcript (a call in both once: the transcript's, the newer reading)."""
    out = {r[0]: (r[2], r[3] + r[4] + r[5] + r[6], r[7] or 0.0) for r in ledger_rows}
    for key, c in session_calls.items():
        out[key] = (c[0], c[1] + c[2] + c[3] + c[4], c[9] or 0.0)
    return out


def _active_block(calls: dict[str, tuple[int, int, float]], now_ns: int) -> tuple[int, int, float] | None:
    """The active block's (end ns, tokens, cost), cut by rules/blocks.py, or None."""
    from ccotel.rules.blocks import BLOCK_NS, cut_blocks, is_active

    ordered = sorted(v for v in calls.values() if v[0])
    blocks = cut_blocks([v[0] for v in ordered])
    if not blocks:
        return None
    start, first, end = blocks[-1]
    if not is_active(start, ordered[end - 1][0], now_ns):
        return None
    part = ordered[first:end]
    return start + BLOCK_NS, sum(v[1] for v in part), sum(v[2] for v in part)


def status_line(data: Any, opts: Options, now_ns: int, color: bool) -> str:
    """The line for Claude Code's JSON ``data`` (anything: what is missing is left out)."""
    data = data if isinstance(data, dict) else {}
    line = _Line(color)
    wrong: list[str] = []
    model = data.get("model")
    name = (model.get("display_name") or model.get("id")) if isinstance(model, dict) else None
    line.add(str(name or "?"), "1")

    sid = data.get("session_id") if isinstance(data.get("session_id"), str) else ""
    transcript = data.get("transcript_path") if isinstance(data.get("transcript_path"), str) else ""
    session_calls: dict[str, list[Any]] = {}
    safe = "".join(ch for ch in sid if ch.isalnum() or ch in "-_")[:80]  # the name of its files under the state
    if transcript and not _under_roots(transcript, opts.roots):
        wrong.append("transcript outside the roots: not read")
    elif transcript and not os.path.isfile(transcript):
        wrong.append("transcript missing")
    elif transcript:
        from ccotel.commands.statusline.session import read_session

        cache = os.path.join(opts.state, "statusline", f"{safe}.json") if opts.state and safe else None
        read = read_session(transcript, sid or os.path.basename(transcript)[:-6], cache)
        session_calls = read.calls
        for _tool_id, (tool, since) in sorted(read.pending.items(), key=lambda kv: kv[1][1]):
            if since and now_ns - since > _STALL_NS:
                wrong.append(f"{tool} waiting {_duration(now_ns - since)}")
                break
    ours = sum(c[9] or 0.0 for c in session_calls.values())
    tokens = sum(c[1] + c[2] + c[3] + c[4] for c in session_calls.values())
    cost = data.get("cost")
    theirs = cost.get("total_cost_usd") if isinstance(cost, dict) else None
    session = f"session {_money(ours)} {_tokens(tokens)} tok" if session_calls else "session -"
    if isinstance(theirs, (int, float)) and abs(theirs - ours) >= 0.005:
        session += f" (Claude Code {_money(float(theirs))})"
    line.add(session)

    ledger = None
    midnight = _local_midnight_ns(now_ns)
    if opts.state and not opts.no_ledger and not opts.state.startswith(("postgresql://", "postgres://")):
        from ccotel.commands.statusline.ledger import ledger_part

        ledger = ledger_part(opts.state, opts.roots, sid, safe, midnight, now_ns)
    if ledger is not None:
        wrong += ledger.problems
    merged = _calls_by_key(ledger.rows if ledger is not None else [], session_calls)
    if ledger is not None:
        line.add(f"today {_money(sum(v[2] for v in merged.values() if v[0] >= midnight))}")
    block = _active_block(merged, now_ns)
    if block is not None:
        line.add(f"block {_money(block[2])} {_tokens(block[1])} tok, {_duration(block[0] - now_ns)} left")

    limits = data.get("rate_limits")
    if isinstance(limits, dict):
        shown = []
        for key, label in (("five_hour", "5h"), ("seven_day", "7d")):
            w = limits.get(key)
            if isinstance(w, dict) and isinstance(w.get("used_percentage"), (int, float)):
                shown.append(f"{label} {w['used_percentage']:.0f}%")
        if shown:
            line.add(" ".join(shown))
    if wrong:
        line.add("! " + ", ".join(dict.fromkeys(wrong)), "31")
    return line.text()


def main(argv: list[str] | None = None, stdin: Any = None, now_ns: int | None = None) -> int:
    """Print the line; exit 0 whatever happens (Claude Code blanks the line on a failure)."""
    try:
        opts = parse_options(sys.argv[2:] if argv is None else argv)
        raw = (stdin or sys.stdin).read(_MAX_INPUT)
        try:
            data = loads(raw) if raw.strip() else {}
        except ValueError:
            data = {}
        now = time.time_ns() if now_ns is None else now_ns
        text = status_line(data, opts, now, color=not os.environ.get("NO_COLOR"))
    except Exception as exc:  # noqa: BLE001 - a status line must print a line, whatever went wrong
        text = f"ccotel: {type(exc).__name__}"
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError:
        pass
    return 0
