"""The rules of the Claude Code transcript, in one place.

Every stage that decides what a line means asks here, so no rule is written twice: parse
(usage, advisor iterations, the cache-write split), assemble (what an API call is, which
snapshot of it counts, synthetic lines and repairs, what a prompt is), report (the same calls
from assistant lines alone), check and the pipeline's detectors (ghost sessions, orphans).
The evidence is docs/format.md (the transcript format, sections 1 to 11); each rule says
which Claude Code versions need it.

Identity of an API call: ``message.id`` + ``requestId`` (``message.id`` alone when a backend
writes no requestId: glm, qwen). One call may be written as several lines (one per content
block), into several files (main and subagent file, resumed or copied sessions) and with
different snapshots of its usage: it is counted once, with the final (largest) snapshot,
whichever file holds it. ``usage.iterations`` entries of type ``advisor_message`` (2.1.2xx+)
are calls to another model made during the response, billed, and not part of the top-level
usage: each is a call of its own model.

What is not an API call: lines Claude Code wrote itself: ``madeBy: "other"`` (2.1.3xx), model
``<synthetic>`` (all versions; "No response requested." after an interrupt or a repair).
An API error line (``isApiErrorMessage``, model ``<synthetic>``) is a failed call: counted as
an error, never billed.

Orphans: a tool_use without a tool_result. Before 2.1.2xx a resume left it on a dead branch;
from 2.1.3xx the resumed process writes a repair tool_result ("[Tool call interrupted...") and a
"No response requested." line (madeBy "other") and chains the new prompt on them. Either way the
orphan is one event, counted once (``ccotel_orphaned_tool_uses_total``): when the turn that owns it
closes without a real result (superseded, process dead, idle past the stall timeout with no live
process), or when the repair is the first ccotel sees of it. A repaired call's tool span ends at
the last line before the kill, with error.type ``interrupted`` and ``claude_code.tool.repaired``.
A session *reset* (``session_resets{reason="orphaned_tool_use"}``) is counted when the session is
resumed on a branch that does not hold the call (the conversation lost it): once, on the resumed
turn (``claude_code.turn.lost_tools``). A repaired call is no reset: nothing was lost.

Ghost session: a main transcript with a prompt and no assistant record of any kind. An API
error line is an assistant record (the CLI reached the API and wrote its answer), so a session
whose only reply is a failed call is not a ghost.

Resume blockers (``ccotel check``, and the detectors' reasons for an absent transcript): each is a
``Finding`` with a stable ``FindingCode``. Whether it blocks a resume depends on the version: the
real CLI 2.1.197 and 2.1.330 resumed minimally edited real transcripts with a dangling parentUuid,
a dangling ``logicalParentUuid`` or a ``pr-link``/``summary``/``file-history-snapshot`` first line
and sent the whole history (tests/harness/NOTES.md, "Resume blockers"); 2.1.143 answered "No
conversation found" to a ``pr-link`` first line (anthropics/claude-code#62851). An absent
transcript is told apart by its evidence (``absent_reason``): swept by the retention sweep
(``cleanupPeriodDays``, default 30: older than that), relocated (the file is under another project
dir), never persisted (``--no-session-persistence``, ``CLAUDE_CODE_SKIP_PROMPT_HISTORY``: the CLI
writes no transcript at all, only ``sessions/<pid>.json`` and an empty ``session-env/<id>/``), or
missing (the file held lines, or history.jsonl names prompts of it, and it is gone too young).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ccotel.records import AdvisorCall, Entry, Usage
from ccotel.rules.model_name import SYNTHETIC_MODEL, reported_model
from ccotel.rules.versions import parse_version

__all__ = [
    "api_error_type",
    "FINAL_STOP",
    "SYNTHETIC_MODEL",
    "TASK_TOOLS",
    "advisor_calls",
    "call_key",
    "line_call_key",
    "counts_a_call",
    "replays_parent_message",
    "cache_write_split",
    "classify_user",
    "ends_turn",
    "starts_turn",
    "is_api_call",
    "is_assistant_record",
    "is_billed_model",
    "is_repair_text",
    "is_final_snapshot",
    "snapshot_rank",
    "writes_final_usage",
    "reported_model",
    "KNOWN_FIELDS",
    "KNOWN_LINE_TYPES",
    "Absence",
    "ChainLine",
    "Finding",
    "FindingCode",
    "RETENTION_DAYS",
    "absent_reason",
    "broken_chain_blocks",
    "dangling_logical_parents",
    "dangling_parents",
    "first_line_blocks",
    "is_message_line",
    "orphan_blocks_resume",
    "repairs_orphans_on_resume",
    "response_continues",
    "resume_chain",
    "retention_days",
]

TASK_TOOLS = frozenset({"Task", "Agent"})
# stop_reasons after which the model owes nothing more in this turn
FINAL_STOP = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal"})
ADVISOR_ITERATION = "advisor_message"

# User texts on the main chain that a person did not type as a prompt.
_NOT_PROMPT_PREFIXES = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat: The messages below were generated",
)
_NOTIFICATION_PREFIXES = ("<task-notification>", "<agent-notification>")
INTERRUPT_PREFIX = "[Request interrupted by user"
# The tool_result a resumed 2.1.3xx process writes for a call its killed predecessor left open.
REPAIR_PREFIX = "[Tool call interrupted"


def call_key(message_id: str, request_id: str | None) -> str:
    """The identity of an API call: (message.id, requestId), message.id alone if no requestId."""
    return message_id if not request_id else f"{message_id}:{request_id}"


def line_call_key(message_id: str | None, request_id: str | None, uuid: str | None) -> str | None:
    """The call a line with usage records. With a message.id: ``call_key``. Without one there is
    nothing to dedup it by (ccusage never dedups such a line): it is a call of its own, named by its
    uuid. None: neither, nothing names it."""
    if message_id:
        return call_key(message_id, request_id)
    return f"line:{uuid}" if uuid else None


def counts_a_call(message_id: str | None, has_usage: bool) -> bool:
    """A line that counts its call whatever envelope fields it lacks (uuid, parentUuid, sessionId,
    type): it has a message id and usage. Other tools write Claude Code's format without them."""
    return bool(message_id) and has_usage


def replays_parent_message(in_agent_file: bool, message_seen: bool, key_seen: bool) -> bool:
    """A line of a subagent file (a /btw side question's is subagents/agent-aside_question-<id>.jsonl)
    whose message.id was already counted under another requestId replays that response (ccusage
    #913: /btw replays the parent's messages with new request ids): the same API call, not a new
    one. A message id names one API response; only a subagent file is known to replay one under
    a new requestId."""
    return in_agent_file and message_seen and not key_seen


def is_api_call(model: str | None, made_by: str | None, is_api_error: bool) -> bool:
    """Does an assistant line record an API call? Lines Claude Code wrote itself do not, except
    API errors (a failed call: counted as an error, never billed)."""
    if is_api_error:
        return True
    return made_by != "other" and model != SYNTHETIC_MODEL


def api_error_type(text: str | None) -> str:
    """The HTTP status of a failed API call as Claude Code writes it ('API Error: 529 {...}' ->
    '529'); anything else -> 'api_error'. The transcript's and the stream's error text alike."""
    if text and text.startswith("API Error: "):
        code = text[len("API Error: "):].split(" ", 1)[0]
        if code.isdigit():
            return code
    return "api_error"


def is_assistant_record(e: Entry) -> bool:
    """What tells a real session from a ghost: any assistant line, a failed call included."""
    return e.type == "assistant"


def is_billed_model(model: str | None) -> bool:
    return reported_model(model) is not None


def snapshot_rank(output_tokens: int, total_tokens: int) -> tuple[int, int]:
    """Which snapshot of a call is later: input and cache fields are equal on every line of a
    response and output only grows (docs/format.md 4.2), so larger output, then larger total.
    Placeholders (``output_tokens: 1``, early copies in another file) rank lower."""
    return output_tokens, total_tokens


def is_final_snapshot(a: Usage, b: Usage) -> bool:
    """Is ``a`` a later snapshot of the same call than ``b``?"""
    return snapshot_rank(a.output_tokens, a.total) > snapshot_rank(b.output_tokens, b.total)


def writes_final_usage(version: str | None) -> bool:
    """From 2.1.231 every line of a response carries its final usage and stop_reason (docs/format.md
    4.2): a copy with ``stop_reason: null`` is an early snapshot, whose final one may be in another
    file, so following live its call is held until its owner closes. Older versions leave
    stop_reason null on most lines (holding every call would hold whole turns): their calls go out
    as they finish. Either way the count does not depend on the version: a backfill builds no
    span before the session's every file is read, and a later, larger snapshot of a call already
    sent corrects the counts and the ledger by the difference (assemble/assembler.py)."""
    if not version:
        return False
    try:
        parts = tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        return False
    return parts >= (2, 1, 231)


def cache_write_split(top_5m: int, top_1h: int, cache_creation: int,
                      iterations: Iterable[tuple[str | None, int, int, int]]) -> tuple[int, int]:
    """(5-minute, 1-hour) cache writes of a call. ``iterations``: (type, cache_creation, 5m, 1h)
    of each ``usage.iterations`` entry. With an advisor, the top-level ``cache_creation`` object
    holds only the first iteration's split while ``cache_creation_input_tokens`` is the sum of
    all the model's iterations: the split is then the sum of the iterations' own splits."""
    msg = [(cc, m5, h1) for t, cc, m5, h1 in iterations if t != ADVISOR_ITERATION]
    if len(msg) > 1 and sum(cc for cc, _, _ in msg) == cache_creation \
            and sum(m5 + h1 for _, m5, h1 in msg) == cache_creation:
        return sum(m5 for _, m5, _ in msg), sum(h1 for _, _, h1 in msg)
    return top_5m, top_1h


def advisor_calls(iterations: Iterable[tuple[Any, ...]]) -> tuple[AdvisorCall, ...]:
    """The advisor iterations of a usage: (type, model, input, output, cache_read,
    cache_creation, 5m, 1h) each -> calls of their own model."""
    out = []
    for t, model, inp, outp, cr, cc, m5, h1 in iterations:
        if t == ADVISOR_ITERATION:
            out.append(AdvisorCall(model if isinstance(model, str) and model else "unknown",
                                   Usage(inp, outp, cr, cc, m5, h1)))
    return tuple(out)


def is_repair_text(text: str | None) -> bool:
    """The tool_result a resumed process writes for a call its killed predecessor left open."""
    return text is not None and text.lstrip().startswith(REPAIR_PREFIX)


def ends_turn(e: Entry) -> bool:
    """A line after which the turn owes nothing more: a final answer (or a failed call), or
    2.1.x's turn_duration note."""
    if e.type == "assistant":
        return e.stop_reason in FINAL_STOP or e.is_api_error
    return e.type == "system" and e.subtype == "turn_duration"


def response_continues(e: Entry, stop_reason: str | None, tool_use_written: bool) -> bool:
    """Does the response owe more lines after this one? Claude Code writes a line per content
    block as each completes (1.0 to 2.1.2xx: most of shared/realdata's multi-line responses),
    and a block can take minutes (a file written by Write is one tool input). A thinking block is
    never a response's last (its text or tool call follows), and a response whose stop_reason is
    ``tool_use`` has a tool_use still to come when none was written yet (an advisor's
    server_tool_use and its result come first). ``stop_reason``: the response's so far;
    ``tool_use_written``: a tool_use on an earlier line of the response. A text line with no
    stop_reason may be the final answer (versions that never write one) or be followed by a tool
    call: it owes nothing."""
    if stop_reason is not None and stop_reason != "tool_use":
        return False
    blocks = e.blocks
    if stop_reason == "tool_use" and not tool_use_written and not any(b.type == "tool_use" for b in blocks):
        return True
    return bool(blocks) and blocks[-1].type in ("thinking", "redacted_thinking")


def starts_turn(kind: str, turn_running: bool) -> bool:
    """Whether a main-chain user line of this kind (classify_user) starts a turn (a trace).
    Prompts and commands always do. A notification (a background agent done) does when no turn
    is running, i.e. none yet or the last one's final answer was written (ends_turn), however long
    after: the ids are the same whether the lines are read live or all at once in a backfill."""
    return kind in ("prompt", "command") or (kind == "notification" and not turn_running)


def classify_user(e: Entry) -> str:
    """What a user line is: prompt | command | tool_result | interrupt | notification | meta |
    compact_summary | other."""
    if e.is_meta:
        return "meta"
    if e.is_compact_summary:
        return "compact_summary"
    if any(b.type == "tool_result" for b in e.blocks):
        return "tool_result"
    text = next((b.text for b in e.blocks if b.type == "text" and b.text is not None), None)
    if text is None:
        return "other"
    stripped = text.lstrip()
    if stripped.startswith(INTERRUPT_PREFIX):
        return "interrupt"
    if stripped.startswith(_NOTIFICATION_PREFIXES):
        return "notification"
    if stripped.startswith(_NOT_PROMPT_PREFIXES):
        return "other"
    if stripped.startswith("<command-name>") or stripped.startswith("<command-message>"):
        return "command"
    return "prompt"


# -- the format as known: every line type and top-level field seen in shared/realdata (Claude Code
# 1.0.17 to 2.1.237) and in the real-CLI fixtures (2.1.197, 2.1.330, 2.1.332). Anything else is drift:
# a new release changed the format (drift.py counts it by version). Known is not always used: what each
# field means and which ccotel reads is in docs/format.md.
_ENVELOPE = frozenset({
    "agentId", "cwd", "entrypoint", "gitBranch", "isSidechain", "parentUuid", "sessionId", "sessionKind",
    "session_id", "slug", "timestamp", "type", "userType", "uuid", "version", "logicalParentUuid", "isMeta",
    "promptId",
})
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "user": _ENVELOPE | {
        "classifierMetaLines", "imagePasteIds", "isCompactSummary", "isVisibleInTranscriptOnly", "message",
        "origin", "permissionDecision", "permissionMode", "planContent", "promptSource", "queuePriority",
        "queueSkipAttachments", "rowSource", "sandboxed", "sentAtMs", "sourceToolAssistantUUID", "sourceToolUseID",
        "summarizedTurnPromptUuids", "thinkingMetadata", "todos", "toolDenialKind", "toolUseResult",
        "turnCompanion", "turnOrigin", "turnPosition", "userFeedback"},
    "assistant": _ENVELOPE | {
        "advisorModel", "apiBlockIndex", "apiErrorStatus", "apiErrorType", "attributionAgent", "attributionPlugin",
        "attributionSkill", "effort", "error", "failedResponseHadNoToolCall", "isApiErrorMessage", "madeBy",
        "message", "perTurnEffort", "promptCacheRequested", "requestId", "requestRef", "requestedModel",
        "thinkingDisplay", "thinkingDurationMs", "toolInputStreamMs"},
    "attachment": _ENVELOPE | {"attachment", "rendered", "renderedBesideToolResult", "renderedRole"},
    "system": _ENVELOPE | {
        "compactMetadata", "content", "durationMs", "error", "fallbackModel", "hasOutput", "hookAdditionalContext",
        "hookCount", "hookErrors", "hookInfos", "level", "maxRetries", "messageCount", "microcompactMetadata",
        "originalModel", "pendingBackgroundAgentCount", "pendingWorkflowCount", "preventedContinuation",
        "retryAttempt", "retryInMs", "source", "stopReason", "subtype", "toolUseID", "trigger"},
    "progress": _ENVELOPE | {"data", "parentToolUseID", "toolUseID"},
    "summary": frozenset({"leafUuid", "summary", "type"}),
    "file-history-snapshot": frozenset({"isSnapshotUpdate", "messageId", "snapshot", "type"}),
    "file-history-delta": frozenset({"backup", "messageId", "snapshotMessageId", "timestamp", "trackingPath",
                                     "type"}),
    "queue-operation": frozenset({"content", "operation", "sessionId", "timestamp", "type"}),
    "last-prompt": frozenset({"lastPrompt", "leafUuid", "sessionId", "type"}),
    "mode": frozenset({"mode", "sessionId", "type"}),
    "permission-mode": frozenset({"permissionMode", "sessionId", "type"}),
    "atis-latch": frozenset({"atis", "sessionId", "type"}),
    "ai-title": frozenset({"aiTitle", "sessionId", "type"}),
    "agent-name": frozenset({"agentName", "sessionId", "type"}),
    "agent-setting": frozenset({"agentSetting", "sessionId", "type"}),
    "pr-link": frozenset({"prNumber", "prRepository", "prUrl", "sessionId", "timestamp", "type"}),
    "relocated": frozenset({"relocatedCwd", "sessionId", "type"}),
    "worktree-state": frozenset({"sessionId", "type", "worktreeSession"}),
    "tools-used": frozenset({"sessionId", "tools", "type"}),
    "api-request": frozenset({"agentId", "base", "cacheControl", "echoWireToolInputs", "id", "keep", "params",
                              "querySource", "requestDigest", "sessionId", "shapeHash", "tail", "thread",
                              "timestamp", "type", "version"}),
    "api-request-blob": frozenset({"agentId", "hash", "message", "sessionId", "type"}),
    "api-request-shape": frozenset({"agentId", "sessionId", "shape", "shapeHash", "timestamp", "type", "version"}),
    "cost-state": frozenset({"hasUnknownModelCost", "modelUsage", "sessionId", "startTime", "totalAPIDuration",
                             "totalAPIDurationWithoutRetries", "totalCostUSD", "totalDuration", "totalLinesAdded",
                             "totalLinesRemoved", "totalToolDuration", "type"}),
}
KNOWN_LINE_TYPES = frozenset(KNOWN_FIELDS)


# -- resume blockers and absent transcripts ----------------------------------------------------------

RETENTION_DAYS = 30  # Claude Code's default cleanupPeriodDays
# The first version seen to write a repair for an orphaned tool_use on --resume: 2.1.330 does (fixture
# s06), 2.1.197 and the public 2.1.204-2.1.237 transcripts never do. The exact release in between is
# unknown; "2.1.3xx" is what docs/format.md 1b says.
_REPAIR_FROM = (2, 1, 300)
# The oldest version seen to resume a dangling parentUuid / logicalParentUuid or a non-message first
# line with its whole history (edited real fixtures, both pinned versions). Older ones are taken at the
# users' word (anthropics/claude-code#62851, 2.1.143: "No conversation found").
_TOLERANT_FROM = (2, 1, 197)
# Lines in the parentUuid tree (docs/format.md 7); the rest (summary, file-history-*, pr-link, ...) are metadata.
_CHAIN_TYPES = frozenset({"user", "assistant", "system", "attachment", "progress"})
# What a -p run writes first (both pinned versions): Claude Code's own first line, resumed fine.
_FIRST_OK = _CHAIN_TYPES | {"queue-operation"}


class FindingCode(str, Enum):
    """The stable codes of ``ccotel check`` findings (orchestrators match on them)."""

    NO_ASSISTANT_RECORD = "no_assistant_record"
    TRAILING_ORPHANED_TOOL_USE = "trailing_orphaned_tool_use"
    STALLED = "stalled"
    BROKEN_PARENT_CHAIN = "broken_parent_chain"
    COMPACT_LOGICAL_PARENT_MISSING = "compact_logical_parent_missing"
    FIRST_LINE_NOT_MESSAGE = "first_line_not_message"
    CWD_MISSING = "cwd_missing"
    WORKTREE_MISSING = "worktree_missing"
    SESSION_LIVE = "session_live"
    CONCURRENT_WRITERS = "concurrent_writers"
    TRANSCRIPT_SWEPT = "transcript_swept"
    TRANSCRIPT_RELOCATED = "transcript_relocated"
    TRANSCRIPT_NOT_PERSISTED = "transcript_not_persisted"
    TRANSCRIPT_MISSING = "transcript_missing"


@dataclass(frozen=True)
class Finding:
    code: FindingCode
    blocks: bool  # does it block a resume?
    message: str
    evidence: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"code": self.code.value, "severity": "blocks_resume" if self.blocks else "warning",
                "blocks_resume": self.blocks, "message": self.message, "evidence": list(self.evidence)}


def repairs_orphans_on_resume(version: str | None) -> bool:
    """Does ``claude --resume`` of this version write a result for a trailing orphaned tool_use?"""
    v = parse_version(version)
    return v is not None and v >= _REPAIR_FROM


def orphan_blocks_resume(version: str | None) -> bool:
    """A trailing orphan blocks a resume on versions that leave it as a dead branch (the lost call)."""
    return not repairs_orphans_on_resume(version)


def _tolerant(version: str | None) -> bool:
    v = parse_version(version)
    return v is not None and v >= _TOLERANT_FROM


def broken_chain_blocks(version: str | None) -> bool:
    """A dangling parentUuid/logicalParentUuid on the resumed chain: tolerated from 2.1.197."""
    return not _tolerant(version)


def is_message_line(line_type: str | None) -> bool:
    return line_type in _CHAIN_TYPES


def first_line_blocks(line_type: str | None, version: str | None) -> bool | None:
    """None: the first line is fine; else whether it blocks a resume on ``version``."""
    if line_type in _FIRST_OK:
        return None
    return not _tolerant(version)


@dataclass(frozen=True)
class ChainLine:
    """What the parentUuid rules need of a line."""

    type: str
    uuid: str | None
    parent_uuid: str | None
    logical_parent_uuid: str | None = None
    subtype: str | None = None


def dangling_parents(lines: Sequence[ChainLine]) -> list[tuple[str, str]]:
    """(uuid, parentUuid) of chain lines whose parent is not in the file."""
    known = {ln.uuid for ln in lines if ln.uuid}
    return [(ln.uuid or "", ln.parent_uuid) for ln in lines
            if ln.type in _CHAIN_TYPES and ln.parent_uuid and ln.parent_uuid not in known]


def dangling_logical_parents(lines: Sequence[ChainLine]) -> list[tuple[str, str]]:
    """(uuid, logicalParentUuid) of compact_boundary lines whose logical parent is not in the file."""
    known = {ln.uuid for ln in lines if ln.uuid}
    return [(ln.uuid or "", ln.logical_parent_uuid) for ln in lines
            if ln.subtype == "compact_boundary" and ln.logical_parent_uuid and ln.logical_parent_uuid not in known]


def resume_chain(lines: Sequence[ChainLine]) -> set[str]:
    """The uuids a resume loads: from the last chain line back by parentUuid, across a
    compact_boundary by logicalParentUuid. Bounded by the number of lines (a cycle ends it)."""
    by_uuid = {ln.uuid: ln for ln in lines if ln.uuid}
    leaf = next((ln for ln in reversed(lines) if ln.type in _CHAIN_TYPES and ln.uuid), None)
    seen: set[str] = set()
    cur = leaf
    while cur is not None and cur.uuid and cur.uuid not in seen:
        seen.add(cur.uuid)
        nxt = cur.parent_uuid or (cur.logical_parent_uuid if cur.subtype == "compact_boundary" else None)
        cur = by_uuid.get(nxt) if nxt else None
    return seen


def retention_days(settings: dict[str, Any] | None) -> int:
    """``cleanupPeriodDays`` of a settings.json (positive int), else Claude Code's default 30."""
    v = (settings or {}).get("cleanupPeriodDays")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else RETENTION_DAYS


class Absence(str, Enum):
    """Why a session known on disk has no transcript (the detectors' reset reasons)."""

    SWEPT = "transcript_swept"
    RELOCATED = "transcript_relocated"
    NOT_PERSISTED = "not_persisted"
    MISSING = "missing_transcript"


def absent_reason(*, elsewhere: bool, last_seen_s: float | None, now_s: float, retention: int,
                  had_transcript: bool) -> Absence:
    """Classify a known session without its transcript.

    elsewhere: its ``<id>.jsonl`` is under another project dir or root (relocated). last_seen_s: the
    newest time any evidence of it was written (history.jsonl timestamp, sessions file startedAt or
    updatedAt, remnant mtime, the transcript's own mtime). had_transcript: the file was seen holding a
    line (an empty file that disappears is no transcript lost: it is never judged), or
    history.jsonl holds prompts of it, or transcript remnants (``<id>/subagents``, ``tool-results``) are
    left. Without any of that the CLI never wrote one: persistence was off (the sessions file and the
    empty session-env dir are all a ``--no-session-persistence`` or ``CLAUDE_CODE_SKIP_PROMPT_HISTORY``
    run leaves)."""
    if elsewhere:
        return Absence.RELOCATED
    if last_seen_s is not None and now_s - last_seen_s > retention * 86400:
        return Absence.SWEPT
    if not had_transcript:
        return Absence.NOT_PERSISTED
    return Absence.MISSING
