"""The transcript reader of ``ccotel report`` (imported only when transcripts must be read: a
report answered from the usage ledger alone loads none of this, nor msgspec, the pipeline or
genai-prices), and ``gather``: the calls a report sums when it reads them, the ledger's rows
(if there is one) and the calls of the transcripts written since.

It reads only what usage needs: assistant lines (a byte search finds them; tool results, most of
the bytes, are never decoded), and of those only ids, model, usage and time (msgspec skips the
content), with the assembler's rules for API calls: one call per (message.id, requestId) across
ALL files, the first file in time order keeps it, its largest usage snapshot counts,
``<synthetic>`` lines are no call unless an API error, a failed call is not billed, the same uuid
twice in a session is one line. A big history is read by several processes, split so that no
call can be in two of them (shard.py), and merged in time order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from ccotel.commands.report.freshness import REREAD_GRACE_NS
from ccotel.commands.report.read_options import ReadOptions
from ccotel.commands.report.rows import Data
from ccotel.commands.report.usage import SessionUsage, UsageTuple, session_usage
from ccotel.read.discover import SkipWarning, find, session_groups, unread_bytes
from ccotel.read.parse import parse_line
from ccotel.read.parse_fast import _JUsage
from ccotel.read.parse_time import parse_timestamp
from ccotel.read.shard import Group, balance, default_workers, plan_shards, run_jobs
from ccotel.read.tail import lines_with
from ccotel.records import AdvisorCall, FileKind, TranscriptFile, Usage
from ccotel.rules import transcript as rules
from ccotel.spans.pricing import Pricing
from ccotel.store.ledger import CallRow, Ledger

if TYPE_CHECKING:
    from ccotel.run.pipeline import Options

__all__ = ["ReadOptions", "build_report", "report_from_spans", "read_rows", "gather"]

_J = TypeVar("_J")
_R = TypeVar("_R")


def _pipeline_options(options: Options | ReadOptions) -> Options:
    from ccotel.run.pipeline import Options

    if isinstance(options, Options):
        return options
    return Options(roots=options.roots, since_ns=options.since_ns, max_line_bytes=options.max_line_bytes,
                   pricing=options.pricing)

def report_from_spans(options: Options | ReadOptions) -> dict[str, SessionUsage]:  # noqa: D401
    """The reference: the whole pipeline, its chat spans summed."""
    from ccotel.run.pipeline import Pipeline

    totals: dict[str, SessionUsage] = {}
    Pipeline(_pipeline_options(options), emit=lambda spans: session_usage(spans, totals)).backfill(close_all=True)
    return totals


@dataclass(slots=True)
class _Call:
    """One API call as the report sees it (merged over all the lines that carry its key)."""

    session_id: str
    usage: UsageTuple | None
    is_api_error: bool
    model: str | None
    first_ns: int
    last_ns: int
    project: str | None = None  # the projects/<dir> of the file that first held it
    cwd: str | None = None

    def flat(self) -> tuple[Any, ...]:
        return (self.session_id, self.usage, self.is_api_error, self.model, self.first_ns, self.last_ns)

    def merge(self, other: _Call) -> None:
        """``other`` is the same call seen later (another file or process)."""
        self.merge_line(other.usage, other.is_api_error, other.model, other.first_ns)
        self.last_ns = max(self.last_ns, other.last_ns)
        self.cwd = self.cwd or other.cwd

    def merge_line(self, usage: UsageTuple | None, is_api_error: bool, model: str | None, ts: int,
                   cwd: str | None = None) -> None:
        """A later line of the same call."""
        if not self.cwd:
            self.cwd = cwd
        have = self.usage
        # An equal snapshot (most lines of a response repeat its usage) is no bigger one.
        if usage is not None and (have is None or (usage != have and _bigger(usage, have))):
            self.usage = usage
        if is_api_error:
            self.is_api_error = True
        if model:
            self.model = model
        if ts:
            if not self.first_ns or ts < self.first_ns:
                self.first_ns = ts
            if ts > self.last_ns:
                self.last_ns = ts


def _bigger(a: UsageTuple, b: UsageTuple) -> bool:
    """rules.is_final_snapshot on the report's tuples (input, output, cache read, cache creation, ...)."""
    return rules.snapshot_rank(a[1], a[0] + a[1] + a[2] + a[3]) > rules.snapshot_rank(b[1], b[0] + b[1] + b[2] + b[3])


def _as_tuple(u: Usage | None) -> UsageTuple | None:
    return None if u is None else (u.input_tokens, u.output_tokens, u.cache_read_input_tokens,
                                   u.cache_creation_input_tokens, u.cache_creation_5m, u.cache_creation_1h,
                                   u.reasoning_tokens)


_NEEDLE = b'"assistant"'
_CHUNK = 4 << 20
# One assistant line: message id, request id, uuid, session id, usage, is API error, model, time.
_Line = tuple[Any, ...]


class _RMessage(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _JUsage | None = None  # parse.py's: counts typed and in range, else the line steps aside


class _RLine(msgspec.Struct):
    """What usage needs of a line; the message content (most of an assistant line) is skipped."""

    type: str
    uuid: str | None = None
    sessionId: str | None = None
    requestId: str | None = None
    timestamp: str | None = None
    cwd: str | None = None
    isApiErrorMessage: bool | None = None
    madeBy: Any = None
    message: _RMessage | None = None


_decoder = msgspec.json.Decoder(_RLine)


def _quick(line: bytes) -> _Line | None:
    """An assistant line of the usual shape, decoded into a small struct. None: let
    ``parse_line`` decide (glued objects, odd types, anything unusual); (): not an assistant line."""
    try:
        o = _decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None
    if o.type != "assistant":
        return ()
    return _line_of(o)


def _line_of(o: _RLine) -> _Line | None:
    """The fields of a decoded assistant line; None: ``parse_line`` decides."""
    msg, made_by, stamp = o.message, o.madeBy, o.timestamp
    if msg is None or (made_by is not None and type(made_by) is not str):
        return None
    ts = 0
    if stamp is not None:
        ts = parse_timestamp(stamp)  # type: ignore[assignment]
        if ts is None:
            return None
    u = msg.usage
    advisors: tuple[AdvisorCall, ...] = ()
    if u is None:
        usage = None
    elif not u.iterations and u.output_tokens_details is None:
        usage = (*u.counts(), 0)  # no advisor iterations or thinking details: what record() gives
    else:
        record, advisors = u.record()
        usage = _as_tuple(record)
    return (msg.id, o.requestId, o.uuid, o.sessionId, usage, o.isApiErrorMessage is True, msg.model, ts,
            made_by, advisors, o.cwd)


def _slow(line: bytes, offset: int) -> list[_Line]:
    return [(e.message_id, e.request_id, e.uuid, e.session_id, _as_tuple(e.usage), e.is_api_error, e.model,
             e.timestamp_ns or 0, e.made_by, e.advisors, e.cwd)
            for e in parse_line(line, offset).entries if e.type == "assistant"]


class _GroupCalls:
    """The calls of one session group as its lines are read, by call key, in the order they first
    appear."""

    __slots__ = ("calls", "seen_uuids", "last_mid", "last_key", "mids")

    def __init__(self) -> None:
        self.calls: dict[str, _Call] = {}
        self.seen_uuids: set[tuple[str, str]] = set()
        self.last_mid: str | None = None  # message id and key of the file's last response line
        self.last_key = ""
        self.mids: set[str] = set()  # message ids of the calls counted (a side question's replays)

    def take(self, line: _Line, tf: TranscriptFile) -> None:
        mid, rid, uuid, sid, usage, api_error, model, ts, made_by, advisors, cwd = line
        sid = sid or tf.session_id
        if sid is None or not rules.is_api_call(model, made_by, api_error):
            return
        again = uuid is not None and (sid, uuid) in self.seen_uuids
        if uuid is not None:
            self.seen_uuids.add((sid, uuid))
        # A line that lost its requestId belongs to the response just before it with the same
        # message id (the assembler's rule for its owner's current response).
        if mid and rid is None and self.last_mid == mid and not again:
            key: str | None = self.last_key
        else:
            key = rules.line_call_key(mid, rid, uuid if usage is not None else None)
        if key is None:
            return  # no message id and no usage
        calls = self.calls
        if again:  # the same line again, maybe a later snapshot (a compaction agent's copy)
            have = calls.get(key)
            if have is not None and usage is not None:
                have.merge_line(usage, False, None, 0)
            return
        if mid and rules.replays_parent_message(tf.kind is not FileKind.MAIN, mid in self.mids, key in calls):
            return  # a /btw side question's copy of its parent's response
        if mid:
            self.mids.add(mid)
        self.last_mid, self.last_key = mid, key
        _merge_line(calls, key, sid, usage, api_error, model, ts, tf.project, cwd)
        for i, adv in enumerate(advisors):  # each advisor iteration: a call of its own model
            _merge_line(calls, f"{key}#advisor{i}", sid, _as_tuple(adv.usage), False, adv.model, ts,
                        tf.project, cwd)

    def read_file(self, tf: TranscriptFile, max_line_bytes: int) -> None:
        """Take every assistant line of one file. The usual line (no advisor calls, nothing odd)
        is taken here, as ``take`` takes it, without a tuple or a
        call of ours in between: per line, this loop is most of a cold report's work
        (bench/NOTES.md). Anything else goes through ``_line_of``/``_slow`` and ``take``."""
        self.last_mid = None
        decode = _decoder.decode
        calls, seen, mids = self.calls, self.seen_uuids, self.mids
        file_sid, project = tf.session_id, tf.project
        in_agent = tf.kind is not FileKind.MAIN
        is_api_call, line_call_key, replays = rules.is_api_call, rules.line_call_key, rules.replays_parent_message
        for offset, raw in lines_with(tf.path, _NEEDLE, max_line_bytes, _CHUNK):
            try:
                o = decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
                for line in _slow(raw, offset):
                    self.take(line, tf)
                continue
            if o.type != "assistant":
                continue
            msg, made_by, stamp = o.message, o.madeBy, o.timestamp
            u = None if msg is None else msg.usage
            ts = 0 if stamp is None else parse_timestamp(stamp)
            usage: UsageTuple | None = None
            if u is not None and msg is not None and ts is not None:
                if not u.iterations:  # none, or [] (2.1.330 writes []): what record() gives
                    usage = (*u.counts(), 0 if u.output_tokens_details is None else u.thinking())
                else:
                    record, advisors = u.record()
                    usage = None if advisors else _as_tuple(record)  # advisor calls: the general route
            if (msg is None or ts is None or (made_by is not None and type(made_by) is not str)
                    or (u is not None and usage is None)):
                one = _line_of(o)
                for line in _slow(raw, offset) if one is None else (one,):
                    self.take(line, tf)
                continue
            sid = o.sessionId or file_sid
            api_error = o.isApiErrorMessage is True
            model = msg.model
            if sid is None or not is_api_call(model, made_by, api_error):
                continue
            uuid, mid = o.uuid, msg.id
            again = False
            if uuid is not None:
                seen_key = (sid, uuid)
                again = seen_key in seen
                seen.add(seen_key)
            if mid and o.requestId is None and self.last_mid == mid and not again:
                key: str | None = self.last_key
            else:
                key = line_call_key(mid, o.requestId, uuid if usage is not None else None)
            if key is None:
                continue
            have = calls.get(key)
            if again:  # the same line again, maybe a later snapshot (a compaction agent's copy)
                if have is not None and usage is not None:
                    have.merge_line(usage, False, None, 0)
                continue
            if mid:
                if replays(in_agent, mid in mids, have is not None):
                    continue
                mids.add(mid)
            self.last_mid, self.last_key = mid, key
            if have is None:
                calls[key] = _Call(sid, usage, api_error, model, ts, ts, project, o.cwd)
            else:
                have.merge_line(usage, api_error, model, ts, o.cwd)


def _read_group(group: Group, max_line_bytes: int) -> dict[str, _Call]:
    """The calls of one session group, by call key, in the order they first appear."""
    into = _GroupCalls()
    for _root, tf in group:
        into.read_file(tf, max_line_bytes)
    return into.calls


def _merge_line(calls: dict[str, _Call], key: str, sid: str, usage: UsageTuple | None, api_error: bool,
                model: str | None, ts: int, project: str | None, cwd: str | None) -> None:
    have = calls.get(key)
    if have is None:
        calls[key] = _Call(sid, usage, api_error, model, ts, ts, project, cwd)
    else:
        have.merge_line(usage, api_error, model, ts, cwd)


def _read_shard(groups: list[tuple[int, Group]], max_line_bytes: int, pricing: Pricing) -> list[tuple[Any, ...]]:
    """Calls of these groups (in time order), merged: one flat tuple per call, cheap to send back."""
    calls: dict[str, tuple[int, _Call]] = {}
    for index, group in groups:
        for key, call in _read_group(group, max_line_bytes).items():
            have = calls.get(key)
            if have is None:
                calls[key] = (index, call)
            else:
                have[1].merge(call)
    return [_row(key, index, c, pricing) for key, (index, c) in calls.items()]


def _row(key: str, index: int, c: _Call, pricing: Pricing) -> tuple[Any, ...]:
    """A call as sent back to the merging process, its cost computed here (in parallel)."""
    cost = None
    if c.usage is not None:
        cost = pricing.cost_of(rules.reported_model(c.model), c.usage, c.first_ns or None)
    return (key, index, *c.flat(), round(cost, 9) if cost is not None else None, c.project, c.cwd)


def build_report(options: Options | ReadOptions, workers: int | None = None,
                 parallel_min_bytes: int = 64 << 20) -> dict[str, SessionUsage]:
    """Per-session usage read from the transcripts (the fast path: assistant lines only)."""
    if options.since_ns is not None:
        # --since keeps or drops whole turns by when they started, as the traces do; only the
        # assembler knows turns, so this report is summed from the spans (slower, and exact).
        return report_from_spans(options)
    out: dict[str, SessionUsage] = {}
    for _key, _index, sid, usage, is_api_error, model, first_ns, last_ns, cost, *_where in \
            read_rows(options, workers, parallel_min_bytes):
        if usage is None or is_api_error:
            continue
        s = out.get(sid)
        if s is None:
            s = out[sid] = SessionUsage(sid)
        s.add(usage, cost, rules.reported_model(model), first_ns, last_ns)
    return out


def read_rows(options: Options | ReadOptions, workers: int | None, parallel_min_bytes: int,
               keep: Callable[[TranscriptFile], bool] | None = None) -> list[tuple[Any, ...]]:
    """Every call of the transcripts (of the files ``keep`` accepts), merged, in time order:
    (key, group index, session, usage, is API error, model, first ns, last ns, cost, project, cwd)."""
    pricing = options.pricing
    files = find(options.roots, options.since_ns, {}, SkipWarning())
    if keep is not None:
        files = [(root, tf) for root, tf in files if keep(tf)]
    groups = session_groups(files)
    weights = [sum(unread_bytes(tf.path, {}) for _root, tf in g) for g in groups]  # file sizes
    n = default_workers() if workers is None else max(1, workers)
    if n == 1 or sum(weights) < parallel_min_bytes:
        return _merged([_read_shard(list(enumerate(groups)), options.max_line_bytes, pricing)], pricing)
    bins = balance(plan_shards(groups, weights), weights, n * _JOBS_PER_PROCESS)
    jobs = sorted(([(i, groups[i]) for i in b] for b in bins), key=lambda job: -sum(weights[i] for i, _g in job))
    if len(jobs) == 1:
        return _merged([_read_shard(jobs[0], options.max_line_bytes, pricing)], pricing)
    return _merged(_read_jobs(jobs, n, options.max_line_bytes, pricing), pricing)


# Jobs per reading process: more, smaller jobs than processes, handed out as processes come free,
# so that all of them end together however the machine shares its cores (bench/NOTES.md).
_JOBS_PER_PROCESS = 4


def _read_jobs(jobs: list[_J], n: int, max_line_bytes: int, pricing: Pricing,
               read: Callable[[_J, int, Pricing], _R] = _read_shard) -> list[_R]:  # type: ignore[assignment]
    """``read`` (``_read_shard``) of every job (heaviest first) over ``n`` processes, this one
    included (shard.run_jobs), the results in the jobs' order."""
    return run_jobs(jobs, n, read, max_line_bytes, pricing)


def _merged(results: Sequence[list[tuple[Any, ...]]], pricing: Pricing) -> list[tuple[Any, ...]]:
    """Merge the shards (a call in two of them: the earlier group keeps it), in time order."""
    rows: dict[str, tuple[Any, ...]] = {}
    for shard_rows in results:
        for row in shard_rows:
            have = rows.setdefault(row[0], row)
            if have is not row:  # only if the shard plan missed a link: still counted once
                first, later = (row, have) if row[1] < have[1] else (have, row)
                call = _Call(*first[2:8], *first[9:11])
                call.merge(_Call(*later[2:8], *later[9:11]))
                rows[row[0]] = _row(row[0], first[1], call, pricing)
    return sorted(rows.values(), key=itemgetter(1))


def gather(options: Options | ReadOptions, ledger: Ledger | None, workers: int | None = None,
           parallel_min_bytes: int = 64 << 20, grace_ns: int = REREAD_GRACE_NS) -> Data:
    """The calls (and, from the ledger, tools, subagents and turns) a report sums.

    With a ledger: its rows, plus the calls of transcript files written since ``grace_ns`` before
    its last write (every file while the ledger is still being filled) whose key it does not hold.
    Without: every call read from the transcripts."""
    if ledger is None:
        calls = [_call_row(r) for r in read_rows(options, workers, parallel_min_bytes)]
        return Data(calls, [], [], [], "transcripts")
    cover = ledger.coverage()
    calls = list(ledger.calls())
    since = cover.updated_ns - grace_ns
    keep = None if cover.filling else (lambda tf: _mtime_ns(tf.path) >= since)
    newer = read_rows(options, workers, parallel_min_bytes, keep=keep)
    fresh: list[CallRow] = []
    if newer:
        have = {c.key for c in calls}
        fresh = [_call_row(r) for r in newer if r[0] not in have]
        calls += fresh
    unrecorded, why = _unrecorded(fresh, cover.filling, cover.updated_ns, grace_ns)
    source = "ledger+transcripts" if newer else "ledger"
    return Data(calls, list(ledger.tools()), list(ledger.agents()), list(ledger.turns()), source, unrecorded, why)


def _unrecorded(fresh: list[CallRow], filling: str | None, updated_ns: int,
                grace_ns: int) -> tuple[list[CallRow], str | None]:
    """Of the calls read from the transcripts that the ledger lacks, those whose tool calls,
    subagents and health it does not hold either, and why. All of them while the ledger is being
    filled; else those not within ``grace_ns`` of its last write (a call then is of a turn still
    open, recorded when it ends: the ledger was being written): written while ccotel was not
    recording (stopped, or failing to write the ledger)."""
    if filling:
        out = fresh
        why = (f"the usage ledger is still being filled ({filling} not ended): {len(out)} API calls were read from "
               "the transcripts alone, and their tool calls, subagents and health are not known yet")
    else:
        out = [c for c in fresh if abs(c.time_ns - updated_ns) > grace_ns]
        why = (f"{len(out)} API calls were read from transcripts that the usage ledger does not hold (written "
               "while ccotel was not recording: not running, or its ledger writes failing): their tool calls, "
               "subagents and health are not known")
    return out, why if out else None


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _call_row(r: tuple[Any, ...]) -> CallRow:
    key, _index, sid, usage, is_api_error, model, _first_ns, last_ns, cost, project, cwd = r
    return CallRow(key, sid, last_ns, model, None, project, cwd, bool(is_api_error or usage is None),
                   usage if usage is not None else (0, 0, 0, 0, 0, 0, 0), cost)
