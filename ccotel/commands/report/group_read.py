"""A report without a ledger: the transcripts read session group by session group, each group
by itself (in any process: no shard plan is needed), its calls priced and summed where it is
read, and the groups combined in their order; through the report cache (read_cache.py) when the
state dir may hold one, so that the next report reads only the groups whose files changed.

The answer is what reading every group in one process gives (transcripts.gather): a call that two
groups hold (a session copied or forked) is merged into the older group's, as there, and priced
again; only those groups' calls are decoded, the others' sums are taken as they are."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from ccotel.commands.report.read_cache import (
    FileKey,
    GroupEntry,
    Row,
    decode_entry,
    decode_rows,
    discard,
    encode_entry,
    file_key,
    load,
    save,
)
from ccotel.commands.report.read_options import ReadOptions
from ccotel.commands.report.rows import CallSums, Data, Summed
from ccotel.commands.report.summary import call_sums, merge_sums, place_items
from ccotel.read.discover import SkipWarning, find, group_files, time_span
from ccotel.store.ledger import SLOT_NS, CallRow

# The transcript reader (transcripts.py: the parser, the shard planner, multiprocessing) is loaded
# only when a group is read or a call decoded: a report the cache answers loads none of it.
if TYPE_CHECKING:
    from ccotel.commands.report.transcripts import _Call
    from ccotel.read.shard import Group
    from ccotel.spans.pricing import Pricing

    # A group to read: its index in the groups' list, its files and their keys (() when one could
    # not be stat'ed: not cached).
    _Todo = tuple[int, Group, tuple[FileKey, ...]]

__all__ = ["read_transcripts"]

log = logging.getLogger("ccotel.report")

def read_transcripts(options: ReadOptions, workers: int | None, parallel_min_bytes: int, cache_dir: str | None,
                     calls: bool = False) -> Data:
    """Every call of the transcripts, summed (``Data.summed``), or listed (``calls``: the blocks
    view); read through the report cache in ``cache_dir`` (None: no cache)."""
    cached = load(cache_dir) if cache_dir else {}
    files = find(options.roots, options.since_ns, {}, SkipWarning())
    keys = {(root, tf.path): file_key(root, tf.path) for root, tf in files}  # before anything is read
    # Each group's entry holds the time span of its first file (the groups' order: session_groups'),
    # taken where the group is read: the groups are put in order once all are there.
    groups = group_files(files)
    entries: list[GroupEntry | None] = []
    todo: list[_Todo] = []
    for index, group in enumerate(groups):
        found = [keys[(root, tf.path)] for root, tf in group]
        fks = tuple(k for k in found if k is not None) if None not in found else ()
        entry = cached.get(fks) if fks else None
        if entry is None:
            todo.append((index, group, fks))
        entries.append(entry)
    encoded: dict[int, bytes] = {}  # the entries just read, as they are written
    for index, data in _read(todo, options, workers, parallel_min_bytes):
        entries[index] = decode_entry(data)
        encoded[index] = data
    order = sorted(range(len(groups)), key=lambda i: _span(entries[i]))  # stable: session_groups' order
    entries = [entries[i] for i in order]
    encoded = {new: encoded[old] for new, old in enumerate(order) if old in encoded}
    read = [e for e in entries if e is not None]
    if cache_dir and (todo or len(read) != len(cached)):
        save(cache_dir, [encoded.get(i, e) for i, e in enumerate(read) if e.files])
    try:
        summed, rows = _combine(read, options.pricing, calls)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:  # calls that do not decode: checksummed, yet
        log.debug("report cache in %s not used: its calls do not decode (%s)", cache_dir, exc)
        if cache_dir:
            discard(cache_dir)
        return read_transcripts(options, workers, parallel_min_bytes, None, calls)
    return Data(rows, [], [], [], "transcripts", summed=None if calls else summed)


def _span(entry: GroupEntry | None) -> tuple[int, int]:
    return (0, 0) if entry is None else entry.span


def _read(todo: list[_Todo], options: ReadOptions, workers: int | None,
          parallel_min_bytes: int) -> list[tuple[int, bytes]]:
    if not todo:
        return []
    from ccotel.commands.report.transcripts import _read_jobs
    from ccotel.read.shard import default_workers

    weights = [sum(k.size for k in fks) if fks else 0 for _i, _g, fks in todo]
    n = default_workers() if workers is None else max(1, workers)
    if n == 1 or len(todo) == 1 or sum(weights) < parallel_min_bytes:
        return _read_entries(todo, options.max_line_bytes, options.pricing)
    # Each group a job of its own, heaviest first: processes take them as they come free, so all
    # end within about the last (smallest) group's time.
    jobs = [[todo[k]] for k in sorted(range(len(todo)), key=lambda k: -weights[k])]
    done = _read_jobs(jobs, n, options.max_line_bytes, options.pricing, read=_read_entries)
    return [item for result in done for item in result]


def _read_entries(job: list[_Todo], max_line_bytes: int, pricing: Pricing) -> list[tuple[int, bytes]]:
    """Each group of the job read, priced and summed (in a worker process: the sums too)."""
    from ccotel.commands.report.transcripts import _call_row, _read_group, _row

    out = []
    for index, group, fks in job:
        span = time_span(group[0][1].path)  # session_groups' key, read here (in parallel)
        rows = [_row(key, index, c, pricing) for key, c in _read_group(group, max_line_bytes).items()]
        call_rows = [_call_row(r) for r in rows]
        sums = [(*key, tuple(s)) for key, s in call_sums(call_rows, SLOT_NS).items()]
        places = place_items((c.session_id, c.project, c.cwd) for c in call_rows)
        out.append((index, encode_entry(fks, span, [r[0] for r in rows], sums, places,
                                        [(r[0], *r[2:]) for r in rows])))
    return out


def _combine(entries: list[GroupEntry], pricing: Pricing, want_calls: bool) -> tuple[Summed, list[CallRow]]:
    """The groups' sums and places in their order (and their calls, if wanted); a call that more
    than one group holds belongs to the oldest, merged with the others' and priced again."""
    linked = _sharing(entries)
    if want_calls or linked:
        from ccotel.commands.report.transcripts import _call_row
    final = _merged(entries, linked, pricing)
    sums: CallSums = {}
    places: list[tuple[str, str | None, str | None]] = []
    out: list[CallRow] = []
    for i, e in enumerate(entries):
        rows = final.get(i)
        if rows is None:
            merge_sums(sums, (((s[0], s[1], s[2], s[3]), s[4]) for s in e.sums))
            places += e.places
            if want_calls:
                out += [_call_row((r[0], i, *r[1:])) for r in decode_rows(e)]
            continue
        call_rows = [_call_row(r) for r in rows]
        merge_sums(sums, call_sums(call_rows, SLOT_NS).items())
        places += place_items((c.session_id, c.project, c.cwd) for c in call_rows)
        if want_calls:
            out += call_rows
    return Summed(sums, places), out


def _sharing(entries: list[GroupEntry]) -> list[int]:
    """The groups that may hold a call another group holds too (by the keys' digests, in set
    operations: no Python per call)."""
    seen: set[int] = set()
    shared: set[int] = set()
    for e in entries:
        if not seen.isdisjoint(e.digests):
            shared.update(seen.intersection(e.digests))
        seen.update(e.digests)
    return [i for i, e in enumerate(entries) if shared and not shared.isdisjoint(e.digests)]


def _merged(entries: list[GroupEntry], linked: list[int], pricing: Pricing) -> dict[int, list[tuple[Any, ...]]]:
    """The rows (transcripts._row's, with the group's index) of the groups that share calls: each
    call in the oldest group that holds it, merged with the later ones' (as ``_read_shard``)."""
    if not linked:
        return {}
    from ccotel.commands.report.transcripts import _row

    held: dict[str, tuple[int, _Call]] = {}
    again: set[str] = set()
    rows: dict[int, dict[str, tuple[Any, ...]]] = {}
    for i in linked:
        mine = rows[i] = {}
        for r in decode_rows(entries[i]):
            key = r[0]
            have = held.get(key)
            if have is None:
                held[key] = (i, _call_of(r))
                mine[key] = (key, i, *r[1:])
            else:
                have[1].merge(_call_of(r))
                again.add(key)
    for key in again:
        i, call = held[key]
        rows[i][key] = _row(key, i, call, pricing)
    return {i: list(r.values()) for i, r in rows.items()}


def _call_of(r: Row) -> _Call:
    from ccotel.commands.report.transcripts import _Call

    return _Call(r[1], r[2], r[3], r[4], r[5], r[6], r[8], r[9])
