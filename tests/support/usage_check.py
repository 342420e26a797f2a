"""Independent token arithmetic over transcripts, to judge ccusage (and ccotel).

Standalone, standard library only: ``python -m tests.support.usage_check [CONFIG_DIR]``
prints, per session of a Claude config dir (default: a fresh realdata tree), the
totals by the rule of docs/format.md section 10 next to what ccusage reports.

Two readings:

- :func:`reference_totals` -- docs/format.md section 10: decode every JSON object of
  every physical line (glued objects too), take ``type: "assistant"`` objects
  with ``message.usage``, skip ``model: "<synthetic>"``, group by
  ``(message.id, requestId)`` (requestId may be missing), and count each key
  once: input / cache fields of the key (equal on all its lines) and the
  LARGEST ``output_tokens`` seen.  ``progress`` lines (``agent_progress``
  copies of subagent messages) are not counted: the subagent file is.
- :func:`ccusage_emulation` -- the rules of ccusage 20.x
  (``rust/crates/ccusage/src/adapter/claude/mod.rs``) re-implemented to explain
  the differences: only lines containing ``"usage":{``; a line containing
  ``"<f>":null`` for f in :data:`CCUSAGE_NULL_FIELDS` is dropped; the WHOLE
  physical line must be one JSON value (glued lines are dropped); ``version``
  must look like semver; empty ids/model rejected; dedupe across ALL files
  (sorted by path) on (message.id, requestId), or message.id alone when either
  side is a sidechain; a duplicate replaces the kept one if it is not a
  sidechain while the kept one is, or has a larger input+output+cache total.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CCUSAGE_NULL_FIELDS",
    "Totals",
    "ccusage_emulation",
    "naive_totals",
    "reference_totals",
    "session_files",
]

CCUSAGE_NULL_FIELDS = frozenset(
    {
        "id",
        "cwd",
        "model",
        "speed",
        "costUSD",
        "version",
        "sessionId",
        "requestId",
        "isApiErrorMessage",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }
)
_SEMVER_PREFIX = re.compile(r"^\d+\.\d+\.\d")


@dataclass
class Totals:
    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0
    keys: int = 0
    models: set[str] = field(default_factory=set)
    by_model: dict[str, list[int]] = field(default_factory=dict)  # model -> [input, output, cc, cr]

    def as_row(self) -> tuple[int, int, int, int]:
        return (self.input, self.output, self.cache_creation, self.cache_read)


def session_files(config_dir: Path) -> dict[str, list[Path]]:
    """``{session id: [main file, subagent files...]}`` the way ccusage names sessions."""
    out: dict[str, list[Path]] = {}
    for path in sorted((Path(config_dir) / "projects").rglob("*.jsonl")):
        rel = path.relative_to(Path(config_dir) / "projects").parts
        if len(rel) == 2:
            sid = rel[1][: -len(".jsonl")]
        elif len(rel) >= 4 and rel[-2] == "subagents":
            sid = rel[-3]
        else:
            sid = rel[-2]
        out.setdefault(sid, []).append(path)
    return out


def _objects(line: str) -> Iterator[dict[str, Any]]:
    decoder = json.JSONDecoder()
    pos, end = 0, len(line)
    while pos < end:
        while pos < end and line[pos].isspace():
            pos += 1
        if pos >= end:
            return
        try:
            obj, pos = decoder.raw_decode(line, pos)
        except json.JSONDecodeError:
            return
        if isinstance(obj, dict):
            yield obj


def _usage_int(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return int(value) if isinstance(value, (int, float)) else 0


def _assistant_records(obj: dict[str, Any], agent_progress: bool) -> Iterator[dict[str, Any]]:
    if obj.get("type") == "assistant":
        yield obj
    elif agent_progress and obj.get("type") == "progress":
        data = obj.get("data")
        if isinstance(data, dict) and data.get("type") == "agent_progress":
            inner = data.get("message")
            if isinstance(inner, dict) and inner.get("type") == "assistant":
                yield inner


def reference_totals(files: Iterable[Path], *, agent_progress: bool = False) -> Totals:
    """docs/format.md section 10 over ``files`` (deduped among themselves).

    With ``agent_progress`` the assistant messages copied into ``progress`` lines
    (``data.type: agent_progress``, ``data.message``) count too, deduped against
    the subagent files by the same key -- the only record of a subagent's calls
    when its own file is missing (all Entire checkpoints here).
    """
    by_key: dict[tuple[str, str | None, int], list[int]] = {}
    model_of: dict[tuple[str, str | None, int], str] = {}
    models: set[str] = set()
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                for obj in (
                    rec for top in _objects(line) for rec in _assistant_records(top, agent_progress)
                ):
                    msg = obj.get("message")
                    if not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict):
                        continue
                    if msg.get("model") == "<synthetic>":
                        continue
                    if obj.get("madeBy") == "other":
                        continue  # 2.1.3xx: a line Claude Code wrote itself
                    usage = msg["usage"]
                    call = (str(msg.get("id")), obj.get("requestId"))
                    # the response itself, then each advisor iteration as a call of its own model
                    parts = [(0, msg.get("model"), usage)] + [
                        (i + 1, it.get("model"), it)
                        for i, it in enumerate(usage.get("iterations") or [])
                        if isinstance(it, dict) and it.get("type") == "advisor_message"
                    ]
                    for index, model, u in parts:
                        key = (*call, index)
                        row = [
                            _usage_int(u, "input_tokens"),
                            _usage_int(u, "output_tokens"),
                            _usage_int(u, "cache_creation_input_tokens"),
                            _usage_int(u, "cache_read_input_tokens"),
                        ]
                        if isinstance(model, str):
                            models.add(model)
                            model_of[key] = model
                        old = by_key.get(key)
                        if old is None:
                            by_key[key] = row
                        else:  # input/cache are equal on every line; output grows
                            by_key[key] = [max(a, b) for a, b in zip(old, row, strict=False)]
    totals = Totals(keys=len({k[:2] for k in by_key}), models=models)
    for key, (inp, out, cc, cr) in by_key.items():
        totals.input += inp
        totals.output += out
        totals.cache_creation += cc
        totals.cache_read += cr
        per = totals.by_model.setdefault(model_of.get(key, "unknown"), [0, 0, 0, 0])
        for i, v in enumerate((inp, out, cc, cr)):
            per[i] += v
    return totals


def naive_totals(files: Iterable[Path], rule: str) -> Totals:
    """The wrong readings, for comparison: ``rule="every_line"`` sums the usage of
    every assistant line; ``rule="first_line"`` keeps the first line of each key."""
    if rule not in ("every_line", "first_line"):
        raise ValueError(rule)
    totals = Totals()
    seen: set[tuple[str, str | None]] = set()
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                for obj in _objects(line):
                    msg = obj.get("message")
                    if obj.get("type") != "assistant" or not isinstance(msg, dict):
                        continue
                    usage = msg.get("usage")
                    if not isinstance(usage, dict) or msg.get("model") == "<synthetic>":
                        continue
                    key = (str(msg.get("id")), obj.get("requestId"))
                    if rule == "first_line" and key in seen:
                        continue
                    if key not in seen:
                        totals.keys += 1
                    seen.add(key)
                    totals.input += _usage_int(usage, "input_tokens")
                    totals.output += _usage_int(usage, "output_tokens")
                    totals.cache_creation += _usage_int(usage, "cache_creation_input_tokens")
                    totals.cache_read += _usage_int(usage, "cache_read_input_tokens")
    return totals


def has_unsupported_null_field(line: str) -> bool:
    """ccusage's ``has_unsupported_null_field``: ``"<f>":null`` anywhere in the raw line."""
    offset = 0
    while (idx := line.find(":null", offset)) >= 0:
        field_end = max(idx - 1, 0)
        if line[field_end : field_end + 1] != '"':
            while field_end > 0 and line[field_end] != '"':
                field_end -= 1
        if line[field_end : field_end + 1] == '"':
            field_start = max(field_end - 1, 0)
            while field_start > 0 and line[field_start] != '"':
                field_start -= 1
            if (
                line[field_start : field_start + 1] == '"'
                and line[field_start + 1 : field_end] in CCUSAGE_NULL_FIELDS
            ):
                return True
        offset = idx + len(":null")
    return False


@dataclass
class _Entry:
    session: str
    message_id: str | None
    request_id: str | None
    sidechain: bool
    usage: tuple[int, int, int, int]
    model: str | None
    speed: bool


@dataclass
class EmulationReport:
    sessions: dict[str, Totals]
    dropped_null_rule: dict[str, int]
    dropped_glued: dict[str, int]
    moved_by_dedupe: list[tuple[str, str, str]]  # (message id, kept in, dropped from)


def ccusage_emulation(config_dir: Path) -> EmulationReport:
    """ccusage 20.x session totals, re-implemented (see module docstring)."""
    files = sorted((Path(config_dir) / "projects").rglob("*.jsonl"), key=str)
    sid_of = {p: sid for sid, paths in session_files(config_dir).items() for p in paths}
    entries: list[_Entry] = []
    index: dict[tuple[str, str | None], int] = {}
    by_message: dict[str, list[int]] = {}
    dropped_null: dict[str, int] = {}
    dropped_glued: dict[str, int] = {}
    moved: list[tuple[str, str, str]] = []
    for path in files:
        sid = sid_of[path]
        for raw in path.read_text(encoding="utf-8", errors="replace").split("\n"):
            if '"usage":{' not in raw:
                continue
            if has_unsupported_null_field(raw):
                dropped_null[sid] = dropped_null.get(sid, 0) + 1
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                dropped_glued[sid] = dropped_glued.get(sid, 0) + 1
                continue
            msg = obj.get("message") if isinstance(obj, dict) else None
            if not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict):
                continue  # e.g. progress lines: usage nested deeper
            if not isinstance(obj.get("timestamp"), str):
                continue
            version = obj.get("version")
            if isinstance(version, str) and not _SEMVER_PREFIX.match(version):
                continue
            if any(v == "" for v in (obj.get("sessionId"), obj.get("requestId"), msg.get("id"), msg.get("model"))):
                continue
            usage = msg["usage"]
            entry = _Entry(
                session=sid,
                message_id=msg.get("id"),
                request_id=obj.get("requestId"),
                sidechain=obj.get("isSidechain") is True,
                usage=(
                    _usage_int(usage, "input_tokens") + _advisor_sum(usage, "input_tokens"),
                    _usage_int(usage, "output_tokens") + _advisor_sum(usage, "output_tokens"),
                    _cache_creation(usage),
                    _usage_int(usage, "cache_read_input_tokens"),
                ),
                model=msg.get("model") if msg.get("model") != "<synthetic>" else None,
                speed=usage.get("speed") is not None,
            )
            if entry.message_id is None:
                entries.append(entry)
                continue
            found = index.get((entry.message_id, entry.request_id))
            if found is None:
                for i in by_message.get(entry.message_id, []):
                    if entry.sidechain or entries[i].sidechain:
                        found = i
                        break
            if found is not None:
                kept = entries[found]
                if _should_replace(entry, kept):
                    if kept.session != entry.session:
                        moved.append((entry.message_id, entry.session, kept.session))
                    entries[found] = entry
                    index[(entry.message_id, entry.request_id)] = found
                elif kept.session != entry.session:
                    moved.append((entry.message_id, kept.session, entry.session))
                continue
            entries.append(entry)
            index[(entry.message_id, entry.request_id)] = len(entries) - 1
            by_message.setdefault(entry.message_id, []).append(len(entries) - 1)
    sessions: dict[str, Totals] = {}
    for entry in entries:
        tot = sessions.setdefault(entry.session, Totals())
        tot.keys += 1
        tot.input += entry.usage[0]
        tot.output += entry.usage[1]
        tot.cache_creation += entry.usage[2]
        tot.cache_read += entry.usage[3]
        if entry.model:
            tot.models.add(entry.model)
    return EmulationReport(sessions, dropped_null, dropped_glued, moved)


def _cache_creation(usage: dict[str, Any]) -> int:
    """ccusage takes the TTL breakdown when there is one: with an advisor that object holds only
    the first iteration's writes (less than cache_creation_input_tokens), and a 0/0 breakdown
    next to a non-zero total counts 0."""
    split = usage.get("cache_creation")
    if isinstance(split, dict):
        return _usage_int(split, "ephemeral_5m_input_tokens") + _usage_int(split, "ephemeral_1h_input_tokens")
    return _usage_int(usage, "cache_creation_input_tokens")


def _advisor_sum(usage: dict[str, Any], key: str) -> int:
    """ccusage adds advisor iterations (as entries of their own model)."""
    return sum(_usage_int(it, key) for it in usage.get("iterations") or []
               if isinstance(it, dict) and it.get("type") == "advisor_message")


def _should_replace(candidate: _Entry, existing: _Entry) -> bool:
    if candidate.sidechain != existing.sidechain:
        return existing.sidechain
    if sum(candidate.usage) != sum(existing.usage):
        return sum(candidate.usage) > sum(existing.usage)
    return candidate.speed and not existing.speed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from tests.support.ccusage import realdata_tree, run_ccusage_sessions

    with tempfile.TemporaryDirectory(prefix="ccotel-usage-check-") as tmp:
        config = Path(args[0]) if args else realdata_tree(Path(tmp) / "claude")
        reported = run_ccusage_sessions(config)
        emulated = ccusage_emulation(config)
        print("| session | ref in/out/cc/cr | ccusage in/out/cc/cr | emulation matches ccusage |")
        print("|---|---|---|---|")
        for sid, paths in sorted(session_files(config).items()):
            ref = reference_totals(paths)
            rep = reported.get(sid)
            rep_row = (
                (rep["inputTokens"], rep["outputTokens"], rep["cacheCreationTokens"], rep["cacheReadTokens"])
                if rep
                else (0, 0, 0, 0)
            )
            emu = emulated.sessions.get(sid, Totals()).as_row()
            print(f"| {sid} | {ref.as_row()} | {rep_row} | {emu == rep_row} |")
        print("dropped by null rule:", emulated.dropped_null_rule)
        print("dropped as glued:", emulated.dropped_glued)
        print("moved by cross-file dedupe:", len(emulated.moved_by_dedupe))
    return 0


if __name__ == "__main__":
    sys.exit(main())
