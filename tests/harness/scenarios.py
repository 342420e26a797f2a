"""The scenarios: rules for the fake API plus the CLI runs that exercise them.

Each scenario is a :class:`Scenario` with a ``rules()`` factory (fresh, since rules count their
uses) and a ``drive(ctx)`` function that performs one or more CLI runs. :func:`run_scenario` runs
one in a fresh :class:`~tests.harness.runner.Sandbox` and returns a :class:`ScenarioResult` with
the config dir the CLI wrote, the stream-json stdout of every run and the ground-truth log.

Every prompt starts with the scenario's tag (``S01`` ...), and subagent prompts carry their own
tag, so the fake API recognises each conversation by a substring of its first user text.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .fakeapi import (
    ApiError,
    FakeAPI,
    Message,
    Rule,
    Usage,
    advisor_iteration,
    advisor_result,
    message_iteration,
    server_tool_use,
    text,
    thinking,
    tool,
)
from .install import CLAUDE_CODE_VERSION, OLDEST, VERSIONS
from .runner import RunResult, Sandbox, StdinStep, tool_use_seen

__all__ = ["Scenario", "ScenarioResult", "Context", "SCENARIOS", "run_scenario", "api_tag", "usage_for",
           "copy_config_tree"]


def usage_for(scenario_no: int, i: int) -> Usage:
    """Distinct, non-round usage numbers for response ``i`` of scenario ``scenario_no``."""
    k = scenario_no * 16 + i
    return Usage(
        input_tokens=1203 + 37 * k,
        output_tokens=31 + 7 * k,
        cache_creation_input_tokens=89 + 13 * k,
        cache_read_input_tokens=5641 + 211 * k,
    )


@dataclass
class Context:
    """What a scenario's ``drive`` gets: the fake API, the sandbox and a list to append runs to."""

    api: FakeAPI
    sandbox: Sandbox
    runs: list[tuple[str, RunResult]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        """The Claude Code version this scenario runs on (the sandbox's)."""
        return self.sandbox.version

    def run(self, label: str, prompt: str | None, **kw: Any) -> RunResult:
        res = self.sandbox.run(self.api.base_url, prompt, **kw)
        self.runs.append((label, res))
        return res

    def snapshot(self, label: str) -> Path:
        """Copy the config dir's ``projects/`` and ``sessions/`` as they are now to ``<root>/snapshots/<label>``."""
        dest = self.sandbox.root / "snapshots" / label
        copy_config_tree(self.sandbox.config_dir, dest)
        return dest


def copy_config_tree(config_dir: Path, dest: Path) -> list[Path]:
    """Copy what Claude Code wrote that matters here (``projects/``, ``sessions/``) from ``config_dir``
    to ``dest``; everything else (settings, .claude.json, backups, shell snapshots, todos) is dropped."""
    copied = []
    for sub in ("projects", "sessions"):
        src = config_dir / sub
        if not src.is_dir():
            continue
        for p in sorted(src.rglob("*")):
            if p.is_file() and not p.is_symlink():
                target = dest / p.relative_to(config_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, target)
                copied.append(target)
    return copied


@dataclass
class Scenario:
    name: str
    number: int
    description: str
    rules: Callable[..., list[Rule]]  # rules(version=CLAUDE_CODE_VERSION): fresh rules for that CLI version
    drive: Callable[[Context], None]
    notable: str = ""  # what the CLI did that a reader should know (copied into meta.json)
    hand_made: bool = False
    #: CLI versions the scenario is reachable on (None: every version of the matrix).
    versions: tuple[str, ...] | None = None
    #: Per-version notes (copied into meta.json instead of ``notable`` when present).
    notable_by_version: dict[str, str] = field(default_factory=dict)

    def runs_on(self, version: str) -> bool:
        return self.versions is None or version in self.versions

    def notable_for(self, version: str) -> str:
        return self.notable_by_version.get(version, self.notable)


@dataclass
class ScenarioResult:
    scenario: Scenario
    sandbox: Sandbox
    runs: list[tuple[str, RunResult]]
    ground_truth: Path
    notes: dict[str, Any]
    started: float
    finished: float

    @property
    def version(self) -> str:
        return self.sandbox.version

    @property
    def session_ids(self) -> list[str]:
        ids: list[str] = []
        for _, r in self.runs:
            sid = r.session_id
            if sid and sid not in ids:
                ids.append(sid)
        return ids


def api_tag(scenario: Scenario, version: str = CLAUDE_CODE_VERSION) -> str:
    """The fake API's id tag (``msg_<tag>_001``, ``req_<tag>_001``, ``toolu_<tag>_001_0``): ``s01`` for
    2.1.197 (its fixtures have those ids), ``s01_21330`` for 2.1.330. Real message ids are unique
    across sessions and readers (ccotel) treat the same id in two sessions as one call replayed, so
    two versions' fixtures of one scenario must not share ids."""
    tag = f"s{scenario.number:02d}"
    return tag if version == OLDEST else f"{tag}_{version.replace('.', '')}"


def run_scenario(scenario: Scenario, base: Path | str | None = None, debug_requests: bool = False,
                 version: str = CLAUDE_CODE_VERSION) -> ScenarioResult:
    """Run ``scenario`` with Claude Code ``version`` in a fresh sandbox (a temp dir under ``base``)."""
    sandbox = Sandbox.create(prefix=f"ccotel-{scenario.name}-", base=base, version=version)
    gt = sandbox.root / "ground_truth.jsonl"
    req_log = sandbox.root / "requests.jsonl" if debug_requests else None
    started = time.time()
    with FakeAPI(api_tag(scenario, version), scenario.rules(version=version), gt, req_log) as api:
        ctx = Context(api=api, sandbox=sandbox)
        scenario.drive(ctx)
    return ScenarioResult(scenario=scenario, sandbox=sandbox, runs=ctx.runs, ground_truth=gt, notes=ctx.notes,
                          started=started, finished=time.time())


# --------------------------------------------------------------------------- helpers


def bash(command: str, description: str, **extra: Any) -> dict[str, Any]:
    return tool("Bash", {"command": command, "description": description, **extra})


def agent(description: str, prompt: str, subagent_type: str = "general-purpose", **extra: Any) -> dict[str, Any]:
    return tool("Agent", {"description": description, "prompt": prompt, "subagent_type": subagent_type, **extra})


def newer_than_oldest(version: str) -> bool:
    """True for the versions after 2.1.197 (the behaviour changes this file adapts to appeared there)."""
    return version != OLDEST


def foreground(version: str) -> dict[str, Any]:
    """Agent input that keeps a subagent in the foreground. 2.1.197 runs Agent calls in the foreground
    unless ``run_in_background: true``; 2.1.330 runs them in the background by default (``async_launched``)
    unless ``run_in_background: false``."""
    return {"run_in_background": False} if newer_than_oldest(version) else {}


def long_command(version: str, seconds: int) -> str:
    """A Bash command that runs ``seconds``. 2.1.330 refuses a standalone ``sleep N`` ("Blocked: standalone
    sleep"); a sleep between two echos runs. 2.1.197 keeps the plain sleep its fixtures were made with."""
    return f"sleep {seconds}" if not newer_than_oldest(version) else f"echo a; sleep {seconds}; echo b"


# --------------------------------------------------------------------------- S01 one Bash call

S01_PROMPT = "S01 run echo hello with Bash and report"


def _s01_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(1, i)  # noqa: E731
    return [
        Rule("s01.bash", Message([text("Running it."), bash("echo hello", "Print hello")], u(0)),
             first_user="S01 ", turns=0),
        Rule("s01.final", Message([text("The command printed: hello")], u(1)), first_user="S01 ", turns=1),
    ]


def _s01_drive(ctx: Context) -> None:
    ctx.run("run1", S01_PROMPT, allowed_tools="Bash", timeout=90)


# --------------------------------------------------------------------------- S03 parallel subagents

S03_PROMPT = "S03 main: start two helper agents in parallel"
S03_ALPHA = "S03-ALPHA helper: run echo alpha with Bash and report"
S03_BETA = "S03-BETA helper: run echo beta with Bash and report"


def _s03_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(3, i)  # noqa: E731
    return [
        Rule("s03.main.spawn", Message([text("Starting two helpers."),
                                        agent("Alpha helper", S03_ALPHA, **foreground(version)),
                                        agent("Beta helper", S03_BETA, **foreground(version))], u(0)),
             first_user="S03 main", turns=0),
        Rule("s03.main.final", Message([text("Both helpers finished: alpha and beta.")], u(1)),
             first_user="S03 main", turns=1),
        Rule("s03.alpha.bash", Message([bash("echo alpha", "Print alpha")], u(2)),
             first_user="S03-ALPHA", turns=0, delay=0.5),
        Rule("s03.alpha.final", Message([text("alpha done")], u(3)), first_user="S03-ALPHA", turns=1, delay=0.5),
        Rule("s03.beta.bash", Message([bash("echo beta", "Print beta")], u(4)),
             first_user="S03-BETA", turns=0, delay=0.5),
        Rule("s03.beta.final", Message([text("beta done")], u(5)), first_user="S03-BETA", turns=1, delay=0.5),
    ]


def _s03_drive(ctx: Context) -> None:
    ctx.run("run1", S03_PROMPT, allowed_tools="Bash,Agent", timeout=120)



# --------------------------------------------------------------------------- S02 two turns via --resume

S02_FIRST = "S02 first turn: run echo one with Bash"
S02_SECOND = "S02 second turn: run echo two with Bash"


def _s02_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(2, i)  # noqa: E731
    return [
        Rule("s02.t1.bash", Message([bash("echo one", "Print one")], u(0)), first_user="S02 first", turns=0),
        Rule("s02.t1.final", Message([text("First turn printed one.")], u(1)), first_user="S02 first", turns=1),
        Rule("s02.t2.bash", Message([text("Again."), bash("echo two", "Print two")], u(2)),
             first_user="S02 first", turns=2),
        Rule("s02.t2.final", Message([text("Second turn printed two.")], u(3)), first_user="S02 first", turns=3),
    ]


def _s02_drive(ctx: Context) -> None:
    r1 = ctx.run("run1", S02_FIRST, allowed_tools="Bash", timeout=90)
    ctx.run("run2_resume", S02_SECOND, resume=r1.session_id, allowed_tools="Bash", timeout=90)


# --------------------------------------------------------------------------- S04 background subagent

S04_PROMPT = "S04 main: start one background helper agent"
S04_BG = "S04-BG helper: sleep a little, then run echo background with Bash"


def _s04_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(4, i)  # noqa: E731
    return [
        # 2.1.197 needs run_in_background: true; 2.1.330 launches in the background by default (flag omitted)
        Rule("s04.main.spawn", Message([agent("Background helper", S04_BG,
                                              **({} if newer_than_oldest(version) else {"run_in_background": True}))],
                                       u(0)),
             first_user="S04 main", turns=0),
        Rule("s04.main.after_launch", Message([text("The helper runs in the background.")], u(1)),
             first_user="S04 main", turns=1),
        Rule("s04.main.after_notification", Message([text("The background helper reported: background.")], u(2)),
             first_user="S04 main", turns=2),
        Rule("s04.main.more", Message([text("Nothing more to do.")], u(3)), first_user="S04 main"),
        Rule("s04.bg.bash", Message([bash("sleep 2; echo background", "Sleep then print background")], u(4)),
             first_user="S04-BG", turns=0, delay=0.5),
        Rule("s04.bg.final", Message([text("background done")], u(5)), first_user="S04-BG", turns=1),
    ]


def _s04_drive(ctx: Context) -> None:
    ctx.run("run1", S04_PROMPT, allowed_tools="Bash,Agent", timeout=120)


# --------------------------------------------------------------------------- S05 nested subagents

S05_PROMPT = "S05 main: start an outer helper that starts an inner helper"
S05_OUTER = "S05-OUTER helper: start an inner helper agent"
S05_INNER = "S05-INNER helper: run echo inner with Bash"


def _s05_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(5, i)  # noqa: E731
    return [
        Rule("s05.main.spawn", Message([agent("Outer helper", S05_OUTER, **foreground(version))], u(0)),
             first_user="S05 main", turns=0),
        Rule("s05.main.final", Message([text("Outer helper finished.")], u(1)), first_user="S05 main", turns=1),
        Rule("s05.outer.spawn", Message([agent("Inner helper", S05_INNER, **foreground(version))], u(2)),
             first_user="S05-OUTER", turns=0),
        Rule("s05.outer.final", Message([text("outer done")], u(3)), first_user="S05-OUTER", turns=1),
        Rule("s05.inner.bash", Message([bash("echo inner", "Print inner")], u(4)), first_user="S05-INNER", turns=0),
        Rule("s05.inner.final", Message([text("inner done")], u(5)), first_user="S05-INNER", turns=1),
    ]


def _s05_drive(ctx: Context) -> None:
    ctx.run("run1", S05_PROMPT, allowed_tools="Bash,Agent", timeout=120)


# --------------------------------------------------------------------------- S06 SIGKILL mid-tool, resume

S06_FIRST = "S06 first: run sleep 60 with Bash"
S06_SECOND = "S06 second: after the crash, run echo recovered"


def _s06_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(6, i)  # noqa: E731
    return [
        Rule("s06.t1.sleep", Message([text("Sleeping."), bash(long_command(version, 300 if newer_than_oldest(version)
                                                                            else 60), "Sleep for a while")], u(0)),
             first_user="S06 first", turns=0, times=1),
        Rule("s06.t2.bash", Message([bash("echo recovered", "Print recovered")], u(1)),
             first_user="S06 first", times=1),
        Rule("s06.t2.final", Message([text("Recovered after the crash.")], u(2)), first_user="S06 first", times=1),
    ]


def _sessions_snapshot(sb: Sandbox) -> list[dict[str, Any]]:
    out = []
    d = sb.config_dir / "sessions"
    if d.is_dir():
        for p in sorted(d.glob("*.json")):
            try:
                out.append({"file": p.name, "content": json.loads(p.read_text())})
            except (OSError, ValueError):
                out.append({"file": p.name, "content": None})
    return out


def _s06_drive(ctx: Context) -> None:
    sb = ctx.sandbox
    seen: dict[str, Any] = {}

    def kill_when() -> bool:
        if not tool_use_seen(sb.config_dir, "Bash", "sleep "):
            return False
        seen.setdefault("t", time.monotonic())
        if time.monotonic() - seen["t"] < 1.0:  # let the tool actually start
            return False
        ctx.notes["sessions_dir_before_kill"] = _sessions_snapshot(sb)
        return True

    r1 = ctx.run("run1_killed", S06_FIRST, allowed_tools="Bash", timeout=90, kill_when=kill_when)
    ctx.notes["sessions_dir_after_kill"] = _sessions_snapshot(sb)
    ctx.snapshot("after_kill")
    stale = {e["file"] for e in ctx.notes["sessions_dir_after_kill"]}

    def observe() -> bool:  # never kills: records the sessions/ dir once the resumed process registered
        now = _sessions_snapshot(sb)
        if "sessions_dir_during_resume" not in ctx.notes and {e["file"] for e in now} - stale:
            ctx.notes["sessions_dir_during_resume"] = now
        return False

    ctx.run("run2_resume", S06_SECOND, resume=r1.session_id or _only_session_id(sb), allowed_tools="Bash",
            timeout=90, kill_when=observe)
    ctx.notes["sessions_dir_after_resume"] = _sessions_snapshot(sb)


def _only_session_id(sb: Sandbox) -> str | None:
    files = [p for p in sb.projects_dir.glob("*/*.jsonl")]
    return files[0].stem if len(files) == 1 else None


# --------------------------------------------------------------------------- S07 API errors

S07_A = "S07-A: this request gets a 400 invalid_request_error"
S07_B = "S07-B: this request gets a 529 overloaded_error, then succeeds"


def _s07_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(7, i)  # noqa: E731
    return [
        Rule("s07.a.400", ApiError(400, "invalid_request_error", "messages.0: scripted invalid request for tests"),
             first_user="S07-A"),
        Rule("s07.b.529", ApiError(529, "overloaded_error", "Overloaded"), first_user="S07-B", turns=0, times=1),
        Rule("s07.b.ok", Message([text("Answered after one retry.")], u(0)), first_user="S07-B", turns=0),
    ]


def _s07_drive(ctx: Context) -> None:
    ctx.run("run1_400", S07_A, allowed_tools="Bash", timeout=90)
    ctx.run("run2_529_then_ok", S07_B, allowed_tools="Bash", timeout=90)


# --------------------------------------------------------------------------- S08 failing tool

S08_PROMPT = "S08 run a failing command with Bash"


def _s08_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(8, i)  # noqa: E731
    return [
        Rule("s08.bash_fail", Message([bash("echo failing >&2; exit 3", "Fail with exit code 3")], u(0)),
             first_user="S08 ", turns=0),
        Rule("s08.final", Message([text("The command failed with exit code 3.")], u(1)), first_user="S08 ", turns=1),
    ]


def _s08_drive(ctx: Context) -> None:
    ctx.run("run1", S08_PROMPT, allowed_tools="Bash", timeout=90)


# --------------------------------------------------------------------------- S09 thinking + 1 MB output

S09_PROMPT = "S09 think, then print more than a megabyte with Bash"
S09_COMMAND = "seq 1 200000"  # 1,288,895 bytes on stdout


def _s09_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(9, i)  # noqa: E731
    return [
        Rule("s09.think_bash", Message([thinking("The user wants a large output. I will use seq."),
                                        text("Printing numbers."),
                                        bash(S09_COMMAND, "Print 200000 numbers")], u(0)),
             first_user="S09 ", turns=0),
        Rule("s09.think_final", Message([thinking("The output was long; summarise it."),
                                         text("Printed 200000 lines.")], u(1)), first_user="S09 ", turns=1),
    ]


def _s09_drive(ctx: Context) -> None:
    ctx.run("run1", S09_PROMPT, allowed_tools="Bash", timeout=120)



# --------------------------------------------------------------------------- S10 compaction

S10_FIRST = "S10 first: run echo before-compact with Bash"
S10_AFTER = "S10 after compaction: run echo after-compact"
S10_SUMMARY_TAG = "S10-SUMMARY"


def _s10_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(10, i)  # noqa: E731
    summary = (f"<analysis>The user ran one command.</analysis>\n<summary>{S10_SUMMARY_TAG}: the user asked to run "
               "echo before-compact; it printed before-compact.</summary>")
    return [
        Rule("s10.t1.bash", Message([bash("echo before-compact", "Print before-compact")], u(0)),
             first_user="S10 first", turns=0),
        # The compaction request has the same first user text and turn count as "t1.final" (in 2.1.197 it
        # ends with the tool_result plus the summary instruction): recognised by its last user text.
        # Observed with 2.1.197: the compaction response itself is written to no transcript line
        # (no agent-acompact file either), hence in_transcript=False.
        Rule("s10.compact.summary", Message([text(summary)], u(2)), first_user="S10 first",
             last_user="create a detailed summary of the conversation", in_transcript=False),
        Rule("s10.t1.final", Message([text("It printed before-compact.")], u(1)), first_user="S10 first", turns=1),
        # After compaction the first user message is the summary ("This session is being continued ...").
        Rule("s10.t2.bash", Message([bash("echo after-compact", "Print after-compact")], u(3)),
             first_user=S10_SUMMARY_TAG, last_user="S10 after compaction"),
        Rule("s10.t2.final", Message([text("It printed after-compact.")], u(4)), first_user=S10_SUMMARY_TAG),
    ]


def _s10_drive(ctx: Context) -> None:
    r1 = ctx.run("run1", S10_FIRST, allowed_tools="Bash", timeout=90)
    sid = r1.session_id
    ctx.run("run2_compact", "/compact", resume=sid, allowed_tools="Bash", timeout=90)
    ctx.run("run3_after_compact", S10_AFTER, resume=sid, allowed_tools="Bash", timeout=90)



# --------------------------------------------------------------------------- S11 user interrupt

S11_FIRST = "S11 first: run sleep 30 with Bash (will be interrupted)"
S11_SECOND = "S11 second: after the interrupt, run echo resumed"
S11_THIRD = "S11 third: a slow answer, interrupted while waiting for the API"


def _s11_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(11, i)  # noqa: E731
    return [
        Rule("s11.t1.sleep",
             Message([text("Sleeping."), bash(long_command(version, 30), "Sleep for 30 seconds")], u(0)),
             first_user="S11 first", turns=0, times=1),
        Rule("s11.t2.bash", Message([bash("echo resumed", "Print resumed")], u(1)),
             first_user="S11 first", last_user="S11 second"),
        Rule("s11.t3.slow", Message([text("This answer arrives too late.")], u(3)), first_user="S11 first",
             last_user="S11 third", delay=6.0, in_transcript=False),
        Rule("s11.t2.final", Message([text("Resumed after the interrupt.")], u(2)), first_user="S11 first"),
    ]


def _user_line(text_: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text_}, "parent_tool_use_id": None,
            "session_id": ""}


def _s11_drive(ctx: Context) -> None:
    sb = ctx.sandbox
    state: dict[str, float] = {}

    def tool_running() -> bool:
        if not tool_use_seen(sb.config_dir, "Bash", "sleep 30"):  # also matches "echo a; sleep 30; echo b"
            return False
        state.setdefault("t", time.monotonic())
        return time.monotonic() - state["t"] >= 1.0

    def results(n: int) -> Callable[[], bool]:
        return lambda: sum(1 for r in sb.live_records() if r.get("type") == "result") >= n

    def slow_request_pending() -> bool:
        if "s11.t3.slow" not in ctx.api.decided:
            return False
        state.setdefault("slow", time.monotonic())
        return time.monotonic() - state["slow"] >= 1.0

    steps = [
        StdinStep(_user_line(S11_FIRST)),
        # 1. interrupt while the Bash tool runs
        StdinStep({"type": "control_request", "request_id": "interrupt-1", "request": {"subtype": "interrupt"}},
                  when=tool_running),
        StdinStep(_user_line(S11_SECOND), when=results(1)),
        # 2. interrupt while the CLI waits for a (scripted slow) API response
        StdinStep(_user_line(S11_THIRD), when=results(2)),
        StdinStep({"type": "control_request", "request_id": "interrupt-2", "request": {"subtype": "interrupt"}},
                  when=slow_request_pending),
        StdinStep(None, when=results(3)),
    ]
    ctx.run("run1_stream_json_interrupt", None, allowed_tools="Bash", timeout=90, stdin_steps=steps)


# --------------------------------------------------------------------------- S12 auto compaction

S12_FIRST = "S12 first: run echo big-context with Bash"
S12_SUMMARY_TAG = "S12-SUMMARY"
#: cache_read of the first response: the context then holds ~0.99M tokens, over the auto-compact
#: threshold of the 1M-token window both versions give their default model (no env override needed).
S12_BIG_CONTEXT = 988_877


def _s12_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(12, i)  # noqa: E731
    big = u(0)
    big = Usage(big.input_tokens, big.output_tokens, big.cache_creation_input_tokens, S12_BIG_CONTEXT)
    summary = (f"<analysis>One command ran.</analysis>\n<summary>{S12_SUMMARY_TAG}: the user asked to run echo "
               "big-context; it printed big-context.</summary>")
    return [
        Rule("s12.t1.bash", Message([bash("echo big-context", "Print big-context")], big), first_user="S12 first",
             turns=0),
        # Before the next request the CLI compacts on its own (trigger "auto"): a request with the same
        # first user text that ends with the summary instruction.
        Rule("s12.compact.summary", Message([text(summary)], u(1)), first_user="S12 first",
             last_user="create a detailed summary of the conversation", in_transcript=False),
        # After compaction the conversation restarts from the summary.
        Rule("s12.t1.final", Message([text("It printed big-context.")], u(2)), first_user=S12_SUMMARY_TAG),
    ]


def _s12_drive(ctx: Context) -> None:
    ctx.run("run1", S12_FIRST, allowed_tools="Bash", timeout=90)


# --------------------------------------------------------------------------- S13 advisor

S13_PROMPT = "S13 ask the advisor, then run echo advised with Bash"
#: Placeholder the fake API replaces with the advisor model the request offered (its ``advisor`` tool).
ADVISOR = "{advisor}"


def _s13_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(13, i)  # noqa: E731
    a, b = u(0), u(1)
    # One response, three samplings: the executor (sonnet) before the advisor call, the advisor (opus)
    # reading the conversation, the executor after it. The top-level usage is the executor's two
    # samplings summed; the advisor's tokens are only in its iteration.
    first = message_iteration(a.input_tokens, 17, a.cache_creation_input_tokens, a.cache_read_input_tokens)
    second = message_iteration(211, a.output_tokens - 17, 0, a.cache_read_input_tokens + 977)
    adv = advisor_iteration(ADVISOR, 9_431, 612, 1_207, 4_409)
    top = Usage(first["input_tokens"] + second["input_tokens"], first["output_tokens"] + second["output_tokens"],
                first["cache_creation_input_tokens"] + second["cache_creation_input_tokens"],
                first["cache_read_input_tokens"] + second["cache_read_input_tokens"], iterations=(first, adv, second))
    return [
        Rule("s13.advise_bash", Message([text("Asking the advisor first."), server_tool_use("advisor"),
                                         advisor_result("Run the echo, then report its output."),
                                         bash("echo advised", "Print advised")], top),
             first_user="S13 ", turns=0),
        Rule("s13.final", Message([text("The advisor agreed; it printed advised.")], b), first_user="S13 ", turns=1),
    ]


def _s13_drive(ctx: Context) -> None:
    # The advisor is a server tool (advisor_20260301, beta advisor-tool-2026-03-01) offered when the
    # advisorModel setting is set; outside claude.ai accounts it is gated behind this variable.
    ctx.run("run1", S13_PROMPT, allowed_tools="Bash", timeout=90,
            extra_args=["--model", "sonnet", "--settings", json.dumps({"advisorModel": "opus"})],
            env={"CLAUDE_CODE_ENABLE_EXPERIMENTAL_ADVISOR_TOOL": "1"})


# --------------------------------------------------------------------------- S14 model fallback

S14_A = "S14-A: the API answers with another model than the one requested"
S14_B = "S14-B: opus is overloaded, --fallback-model sonnet answers"
S14_OTHER_MODEL = "claude-haiku-4-5-20251001"


def _s14_rules(version: str = CLAUDE_CODE_VERSION) -> list[Rule]:
    u = lambda i: usage_for(14, i)  # noqa: E731
    return [
        Rule("s14.a.other_model", Message([text("Answered by another model.")], u(0), model=S14_OTHER_MODEL),
             first_user="S14-A"),
        # CLAUDE_CODE_MAX_RETRIES=3: three 529s, then the CLI switches to the fallback model.
        Rule("s14.b.529", ApiError(529, "overloaded_error", "Overloaded"), first_user="S14-B", times=3),
        Rule("s14.b.fallback", Message([text("Answered by the fallback model.")], u(1)), first_user="S14-B"),
    ]


def _s14_drive(ctx: Context) -> None:
    ctx.run("run1_other_model", S14_A, allowed_tools="Bash", timeout=90)
    ctx.run("run2_fallback_model", S14_B, allowed_tools="Bash", timeout=90,
            extra_args=["--model", "opus", "--fallback-model", "sonnet"])


SCENARIOS: dict[str, Scenario] = {}


def _register(*scenarios: Scenario) -> None:
    for s in scenarios:
        SCENARIOS[s.name] = s


_register(
    Scenario("s01_bash_tool", 1, "one prompt, one Bash tool call (echo hello), final answer",
             _s01_rules, _s01_drive,
             notable='text and tool_use of one response are two lines with the same message.id/requestId and the final '
                     'usage; Bash result has toolUseResult {stdout, stderr, interrupted, isImage, noOutputExpected}'),
    Scenario("s02_resume_two_turns", 2, "two turns in one session: a second -p run with --resume",
             _s02_rules, _s02_drive,
             notable="--resume appends to the same session file; the resumed run writes a 'mode' line"),
    Scenario("s03_parallel_subagents", 3, "two parallel foreground subagents (Agent tool), each running Bash",
             _s03_rules, _s03_drive,
             notable="tool is named Agent in the API and the transcript but Task in stream-json init.tools; subagent "
                     "files under <session>/subagents/ with meta.json {agentType, description, toolUseId, spawnDepth}; "
                     "Agent toolUseResult.usage = the subagent's last API call"),
    Scenario("s04_background_subagent", 4, "a background subagent (run_in_background) finishing after the main turn",
             _s04_rules, _s04_drive,
             notable="-p waits for the background agent; completion arrives as queue-operation enqueue + a user line "
                     "'<task-notification>...' with origin.kind=task-notification, then one more API call; two result "
                     "records on stdout"),
    Scenario("s05_nested_subagent", 5, "a subagent that spawns its own subagent", _s05_rules, _s05_drive,
             notable="nesting allowed; both agent files flat in the main session's subagents/ dir; inner meta "
                     "spawnDepth 2, toolUseId in the outer agent's file; subagent files have no toolUseResult"),
    Scenario("s06_kill_orphan_resume", 6, "SIGKILL during Bash sleep 60 (orphaned tool_use), then --resume",
             _s06_rules, _s06_drive,
             notable='orphaned tool_use stays as a dead branch; resumed prompt parented on the line before it; '
                     'sessions/<pid>.json survives SIGKILL (snapshots/after_kill) and is deleted by the next CLI '
                     'start'),
    Scenario("s07_api_errors", 7, "a non-retryable 400 (run 1) and a retryable 529 then success (run 2)",
             _s07_rules, _s07_drive,
             notable="400 -> one <synthetic> isApiErrorMessage line with apiErrorStatus 400 and the error's requestId; "
                     "the 529 retry leaves no trace in the transcript, only stream-json system/api_retry"),
    Scenario("s08_failing_tool", 8, "a Bash call exiting non-zero (tool_result is_error)", _s08_rules, _s08_drive,
             notable="is_error true, content 'Exit code 3\\nfailing', toolUseResult is the string 'Error: Exit code "
                     "3\\nfailing'"),
    Scenario("s09_thinking_big_output", 9, "thinking blocks and a Bash output over 1 MB", _s09_rules, _s09_drive,
             notable='thinking blocks on their own lines with signature; 1.29 MB stdout persisted to '
                     '<session>/tool-results/<id>.txt, tool_result is a <persisted-output> 2 KB preview, '
                     'toolUseResult.stdout cut to 30000 chars'),
    Scenario("s10_compact", 10, "/compact via -p --resume, then one more turn", _s10_rules, _s10_drive,
             notable='compact_boundary (parentUuid null, logicalParentUuid) + isCompactSummary line; the compaction '
                     'API response is recorded in no transcript (only in stdout result.modelUsage)'),
    Scenario("s11_interrupt", 11, "--input-format stream-json: interrupt (control_request) during Bash sleep 30, "
             "then a second prompt", _s11_rules, _s11_drive,
             notable="interrupt during a tool: is_error tool_result 'User rejected tool use' + '[Request interrupted "
                     "by user for tool use]'; during an API wait: '[Request interrupted by user]' and the response is "
                     "not recorded"),
    Scenario("s12_auto_compact", 12, "auto compaction: a response reports a ~0.99M-token context, the CLI compacts "
             "by itself before the next request", _s12_rules, _s12_drive,
             # 2.1.197 never auto-compacted here (same turn, next turn by --resume or on stdin, or with
             # CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=50 + CLAUDE_CODE_AUTO_COMPACT_WINDOW=200000): not reachable.
             versions=tuple(v for v in VERSIONS if v != OLDEST)),
    Scenario("s13_advisor", 13, "an advisor call inside a response (server_tool_use advisor + advisor_tool_result, "
             "usage.iterations with an advisor_message of its own model and tokens)", _s13_rules, _s13_drive),
    Scenario("s14_model_fallback", 14, "a response whose model differs from the requested one (run 1); "
             "three 529s then --fallback-model answers (run 2)", _s14_rules, _s14_drive),
)
