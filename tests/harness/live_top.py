"""Three real Claude Code sessions at once against the fake API, to watch ``ccotel top`` on them.

    .venv/bin/python -m tests.harness.live_top /tmp/top-live      # prints the config dir, then runs

In one sandbox (its config dir is what ``ccotel top --root`` reads): session A runs a Bash command
of ``--slow`` seconds then answers; session B starts two foreground subagents that each run a
Bash command of half that; session C runs a long Bash command and is SIGKILLed after ``--kill-after``
seconds (its turn then reads killed). Nothing here asserts: tests/commands/test_top.py does.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from .fakeapi import FakeAPI, Message, Rule, text
from .install import CLAUDE_CODE_VERSION
from .runner import Sandbox, tool_use_seen
from .scenarios import agent, bash, foreground, long_command, usage_for


def rules(version: str, slow: int) -> list[Rule]:
    u = lambda i: usage_for(15, i)  # noqa: E731
    half = max(slow // 2, 1)
    return [
        Rule("a.bash", Message([text("Running it."), bash(long_command(version, slow), "A slow command")], u(0)),
             first_user="TOPA ", turns=0),
        Rule("a.final", Message([text("The slow command finished.")], u(1)), first_user="TOPA ", turns=1),
        Rule("b.spawn", Message([text("Two helpers."), agent("Alpha", "TOPB-ALPHA: a slow echo", **foreground(version)),
                                 agent("Beta", "TOPB-BETA: a slow echo", **foreground(version))], u(2)),
             first_user="TOPB main", turns=0),
        Rule("b.final", Message([text("Both helpers finished.")], u(3)), first_user="TOPB main", turns=1),
        Rule("b.alpha.bash", Message([bash(long_command(version, half), "Alpha's slow command")], u(4)),
             first_user="TOPB-ALPHA", turns=0),
        Rule("b.alpha.final", Message([text("alpha done")], u(5)), first_user="TOPB-ALPHA", turns=1),
        Rule("b.beta.bash", Message([bash(long_command(version, half + 3), "Beta's slow command")], u(6)),
             first_user="TOPB-BETA", turns=0),
        Rule("b.beta.final", Message([text("beta done")], u(7)), first_user="TOPB-BETA", turns=1),
        Rule("c.bash", Message([text("Sleeping."), bash(long_command(version, 600), "Sleep a long while")], u(8)),
             first_user="TOPC ", turns=0),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("base", type=Path, help="the sandbox goes under this directory")
    p.add_argument("--slow", type=int, default=40, help="seconds of session A's command (default 40)")
    p.add_argument("--kill-after", type=float, default=15.0, help="seconds before session C is killed (default 15)")
    p.add_argument("--version", default=CLAUDE_CODE_VERSION)
    args = p.parse_args()
    args.base.mkdir(parents=True, exist_ok=True)
    sb = Sandbox.create(prefix="top-", base=args.base, version=args.version)
    print(sb.config_dir, flush=True)
    started = time.monotonic()

    def kill_c() -> bool:
        return tool_use_seen(sb.config_dir, "Bash", "sleep 600") and time.monotonic() - started >= args.kill_after

    with FakeAPI("top", rules(args.version, args.slow), sb.root / "ground_truth.jsonl") as api:
        runs = [threading.Thread(target=sb.run, args=(api.base_url, prompt), kwargs=kw) for prompt, kw in (
            ("TOPA run a slow command with Bash", {"timeout": args.slow + 60}),
            ("TOPB main: two helpers in parallel", {"allowed_tools": "Bash,Agent", "timeout": args.slow + 60}),
            ("TOPC run a very long command", {"timeout": args.slow + 60, "kill_when": kill_c}),
        )]
        for t in runs:
            t.start()
            time.sleep(1.0)  # distinct start times
        for t in runs:
            t.join()
    print(f"done after {time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
