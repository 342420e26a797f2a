"""Per corpus (every fixture, then shared/realdata) and per model: the tokens ccotel's report counts
beside the tokens ccusage counts, and their difference.

    python -m tests.support.ccusage_table        # one line per corpus and model

Columns: input, output, cache creation, cache read (and ccotel's API calls). ccusage is read per
session (``ccusage claude session``, its ``modelBreakdowns``) and summed per model; ccotel from
``build_report`` (the transcripts alone). Where they differ, tests/whole/test_ccusage_totals.py
shows why from the files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ccotel.commands.report.transcripts import build_report
from ccotel.run.pipeline import Options
from tests.support.ccusage import run_ccusage_sessions
from tests.support.golden import corpora

_THEIRS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")


def ours(config: Path) -> dict[str, list[int]]:
    """model -> [input, output, cache creation, cache read, calls]."""
    out: dict[str, list[int]] = {}
    for u in build_report(Options(roots=(str(config),))).values():
        for model, row in u.by_model.items():
            have = out.setdefault(model, [0] * 5)
            for i in range(5):
                have[i] += int(row[i])
    return out


def theirs(config: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in run_ccusage_sessions(config).values():
        for b in row["modelBreakdowns"]:
            have = out.setdefault(str(b.get("modelName")), [0] * 4)
            for i, k in enumerate(_THEIRS):
                have[i] += int(b.get(k) or 0)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for name, config in corpora(Path(scratch)).items():
            a, b = ours(config), theirs(config)
            for model in sorted(set(a) | set(b)):
                x, y = a.get(model, [0] * 5), b.get(model, [0] * 4)
                diff = [p - q for p, q in zip(x[:4], y, strict=True)]
                print(f"{name}\t{model}\tcalls {x[4]}\tccotel {x[:4]}\tccusage {y}\t"
                      f"{'equal' if not any(diff) else f'ccotel - ccusage {diff}'}", flush=True)


if __name__ == "__main__":
    main()
