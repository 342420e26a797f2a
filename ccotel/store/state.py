"""Checkpoint stage: what has been delivered, kept so a restart neither loses nor repeats it.

The state is one interface (``State``) over two backends: SQLite in a state dir on one host
(sqlite.py), PostgreSQL at a ``postgresql://`` URL for a fleet of hosts sharing one state
(postgres.py); ``backends.open_state`` and ``backends.lock_state`` pick one from ``--state``.
This module holds what callers and both backends share, and loads neither backend:

- ``Commit``: everything one transaction writes, once per acknowledged batch: the offset before
  which every line of a transcript is fully delivered (its spans acknowledged by the backend),
  the span ids already delivered for turns still open (a restart re-reads an open turn from its
  first line and must not send those spans again), the digests of API responses and prompts of
  finished turns (a history replayed into another file after a restart is still counted once),
  the metric totals (a restart never makes a counter jump or count twice) and one-off events
  already counted (marks: a ghost session, a missing subagent transcript);
- anchors: each digest and mark is anchored to the file it was read from (``anchor_of``) and
  goes when its last file goes (Claude Code's cleanup sweep, ``Commit.forget_files``): a copy can
  only be made from a file that is still there, so nothing is ever counted twice, and the state
  follows what is on disk, not the history. ``PERMANENT`` rows (the first catch-up's mark) stay;
- where the state is (``resolve_state``, ``host_id``), the errors, and a lock's shape.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ccotel.assemble.digests import digest64
from ccotel.store.location import default_state_dir, is_url, resolve_state

if TYPE_CHECKING:  # the transcript reader (slow to import) is not needed to name a file's identity
    from ccotel.read.tail import FileIdentity, Marker

__all__ = ["State", "StateLock", "Commit", "Claimed", "anchor_of", "PERMANENT", "StateError", "StateUnavailable",
           "StateLocked", "default_state_dir", "is_url", "resolve_state", "host_id", "claim_lease",
           "DEFAULT_CLAIM_LEASE_S", "pack_ids", "unpack_ids", "signed64", "unsigned64", "DISK_REASONS",
           "write_error_reason"]

PERMANENT = 0  # the anchor of rows no file holds (the caught_up mark)

# Reasons a write fails that are the disk's, whichever file (checkpoints, ledger) hit them first.
DISK_REASONS = frozenset({"disk_full", "read_only", "io_error"})


def write_error_reason(exc: BaseException) -> str:
    """Why a state or ledger write failed, one of a bounded set (the reason label of
    ``ccotel_checkpoint_errors_total``): disk_full (ENOSPC, SQLite's "database or disk is full"),
    read_only, locked, corrupt, io_error, other."""
    text = str(exc).lower()
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "full" in text:
        return "disk_full"
    if "readonly" in text or "read-only" in text or isinstance(exc, OSError) and exc.errno in (errno.EROFS,
                                                                                             errno.EACCES):
        return "read_only"
    if "locked" in text or "busy" in text:
        return "locked"
    if "malformed" in text or "not a database" in text:
        return "corrupt"
    if "i/o" in text:
        return "io_error"
    return "other"


def anchor_of(path: str) -> int:
    """The anchor of rows read from this file."""
    return digest64(path)


class State(Protocol):
    """The state as the pipeline uses it, on either backend (sqlite.SqliteState, postgres.PgState).

    Counters are committed as increments: each commit adds what a counter grew by since the
    totals this process loaded (``counters``) or last committed, so processes that share one
    state (catch-up workers, a fleet's hosts) sum exactly. A commit that fails (disk full, the
    server away) is kept and written with the next one (``retry`` writes it alone), so nothing
    acknowledged is lost or counted twice while ccotel runs; ``on_error(reason)`` is told of each
    failed attempt, ``failures`` counts them and ``pending`` says how many records wait."""

    fresh: bool  # nothing was checkpointed before (a first start)
    rebuilt_from: str | None  # a corrupt database moved aside at open (its new name), else None
    on_error: Callable[[str], None] | None
    failures: int  # failed commit attempts since the last one written

    def files(self, paths: list[str] | None = None) -> dict[str, tuple[FileIdentity | None, int, int, Marker | None]]:
        """path -> (identity, offset of the first line not fully delivered, bytes already read,
        the offset marker: a digest of the last bytes read, None where none was kept); of
        ``paths`` only, if given (what a process takes over of a catch-up worker's part)."""
        ...

    def acked(self) -> set[int]:
        """The span ids delivered for turns still open."""
        ...

    def calls(self) -> set[int]:
        """The digests of the API calls delivered."""
        ...

    def prompts(self) -> set[int]:
        """The digests of the prompts delivered."""
        ...

    def sorted_digests(self, table: str) -> Iterable[int]:
        """The digests of ``calls`` or ``prompts`` in ascending order: a restart loads them packed
        (digests.py); a backend that can gives them one at a time, never as a set of them all."""
        ...

    def counters(self) -> dict[str, float]:
        """The counter totals (this process then commits what they grow by)."""
        ...

    def others_counters(self) -> dict[str, float]:
        """What other processes of this state (catch-up workers) added to the counters since this
        one last loaded or wrote them; from here on counted as loaded by this one."""
        ...

    def marks(self) -> set[str]:
        """The one-off events already counted."""
        ...

    def held_by(self, paths: list[str]) -> tuple[list[int], list[int]]:
        """The call and prompt digests these files hold, each ascending: what a process takes
        over with them from another that read them (a catch-up worker)."""
        ...

    def held_only_by(self, paths: list[str]) -> tuple[set[int], set[int], set[str]]:
        """The call digests, prompt digests and marks that no file but these holds: what goes
        from memory when these files go."""
        ...

    def claim(self, span_ids: list[int], anchor: int) -> Claimed:
        """Of these spans (built from the file of ``anchor``), the ones this process sends and
        counts, and those another host claimed and has not delivered yet."""
        ...

    def claim_mark(self, mark: str, anchor: int) -> bool:
        """Does this process count the one-off event ``mark``?"""
        ...

    def describe(self) -> str:
        """Where the state is, for logs (never a password)."""
        ...

    def sizes(self) -> dict[str, int]:
        """Rows per table, and the bytes the state takes: what bounded state is measured by."""
        ...

    @property
    def pending(self) -> int:
        """Records (offsets, span ids, owners) of failed commits not written yet; 0 when all is."""
        ...

    def commit(self, c: Commit) -> bool:
        """Write ``c`` (after whatever earlier commits failed to write). False if it failed: it is
        kept and written with the next commit or ``retry``."""
        ...

    def retry(self) -> bool:
        """Write what failed commits left; True if nothing is left."""
        ...

    def close(self) -> None: ...


class StateLock(Protocol):
    """The state taken for this process (statedir.DirLock: the state dir's flock; postgres_lease.HostLock:
    this host id's lock in PostgreSQL), held for its life; ``release`` gives it up; ``check``
    (cheap, about once a second while running) says why this process must stop if the state was
    taken from under it, else None."""

    path: str

    def release(self) -> None: ...

    def check(self) -> str | None: ...


class StateError(RuntimeError):
    """The state cannot be used; the message says why, for the operator."""


class StateUnavailable(StateError):
    """The state dir or database cannot be written (read-only file system, permissions)."""


class StateLocked(StateError):
    """Another ccotel holds the state dir (or this host id in a shared state)."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


@dataclass(frozen=True)
class Claimed:
    """What a claim on span ids found: ``mine`` this process sends and counts; ``elsewhere``
    another host of a fleet claimed and has not delivered yet (it may die before it does: the
    caller holds them and claims them again later, postgres.py). Any other id was delivered by
    another host."""

    mine: frozenset[int]
    elsewhere: frozenset[int] = frozenset()


@dataclass
class Commit:
    """Everything one transaction writes."""

    # ident, offset, read_to, marker (tail.Marker: the last bytes read, to tell a rewrite in place)
    offsets: dict[str, tuple[FileIdentity | None, int, int, Marker | None]] = field(default_factory=dict)
    forget_files: list[str] = field(default_factory=list)
    acked: list[tuple[int, str]] = field(default_factory=list)
    done_owners: list[str] = field(default_factory=list)
    calls: list[tuple[int, int]] = field(default_factory=list)  # (digest, anchor)
    prompts: list[tuple[int, int]] = field(default_factory=list)  # (digest, anchor)
    counters: dict[str, float] = field(default_factory=dict)
    marks: list[tuple[str, int]] = field(default_factory=list)  # (key, anchor)

    def empty(self) -> bool:
        return not (self.offsets or self.forget_files or self.acked or self.done_owners or self.calls
                    or self.prompts or self.counters or self.marks)

    def merge(self, later: Commit) -> None:
        """Add a later commit to this one (one not written yet): the result writes both, in order."""
        for path in later.offsets:
            if path in self.forget_files:
                self.forget_files.remove(path)
        for path in later.forget_files:
            self.offsets.pop(path, None)
        self.offsets.update(later.offsets)
        self.forget_files.extend(p for p in later.forget_files if p not in self.forget_files)
        self.acked.extend(later.acked)
        self.done_owners.extend(later.done_owners)
        self.calls.extend(later.calls)
        self.prompts.extend(later.prompts)
        self.counters.update(later.counters)  # totals: the later ones include the earlier
        self.marks.extend(later.marks)

    def size(self) -> int:
        return len(self.offsets) + len(self.forget_files) + len(self.acked) + len(self.done_owners)

    def file_rows(self) -> list[tuple[str, int | None, int | None, int | None, str | None, int, int, str | None]]:
        """The checkpoints as both backends' ``files`` tables hold them: path, dev, ino, head_len,
        fingerprint (all four None for a file without an identity), offset, read_to, marker (its
        ``Marker.text``, None without one)."""
        return [(path, ident.dev if ident else None, ident.ino if ident else None, ident.head_len if ident else None,
                 ident.fingerprint if ident else None, offset, read_to, marker.text() if marker else None)
                for path, (ident, offset, read_to, marker) in self.offsets.items()]

    def acked_by_owner(self) -> list[tuple[str, bytes]]:
        """The acknowledged span ids packed per owner (``pack_ids``): one row per owner and
        commit, as both backends keep them (a row per span made this most of a catch-up's time)."""
        by_owner: dict[str, list[int]] = {}
        for span_id, owner in self.acked:
            by_owner.setdefault(owner, []).append(span_id)
        return [(owner, pack_ids(ids)) for owner, ids in by_owner.items()]


# -- where the state is ---------------------------------------------------------------


def host_id(explicit: str | None = None, env: dict[str, str] | None = None) -> str:
    """This host's name in a shared state: ``--host-id``, ``$CCOTEL_HOST_ID``, or the host name.
    Checkpoints, acknowledged ids and counters are kept per host id; two hosts need two ids."""
    env = dict(os.environ) if env is None else env
    return explicit or env.get("CCOTEL_HOST_ID") or socket.gethostname()


DEFAULT_CLAIM_LEASE_S = 60.0


def claim_lease(explicit: str | float | None = None, env: dict[str, str] | None = None) -> float:
    """How long a fleet host's claims on spans it has not delivered outlive its last sign of
    life (postgres.py): ``--claim-lease``, ``$CCOTEL_CLAIM_LEASE`` (seconds), or 60 s. Raises
    ValueError for anything but a finite number of seconds from 1 to a day."""
    env = dict(os.environ) if env is None else env
    raw: str | float = explicit if explicit is not None else env.get("CCOTEL_CLAIM_LEASE") or DEFAULT_CLAIM_LEASE_S
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"a claim lease must be a number of seconds, not {str(raw)[:40]!r}") from None
    if not 1.0 <= seconds <= 86400.0:  # NaN fails this too
        raise ValueError(f"a claim lease must be from 1 to 86400 seconds, not {seconds}")
    return seconds


# -- span ids as both backends store them ---------------------------------------------


def pack_ids(span_ids: list[int]) -> bytes:
    """Span ids (unsigned 64-bit) as one blob, 8 bytes each."""
    return struct.pack(f">{len(span_ids)}Q", *span_ids)


def unpack_ids(blob: bytes) -> tuple[int, ...]:
    """The span ids of a ``pack_ids`` blob (a torn last id is left out)."""
    return struct.unpack(f">{len(blob) // 8}Q", blob[: len(blob) // 8 * 8])


def signed64(span_id: int) -> int:
    """An unsigned 64-bit id as the signed integer a database column holds."""
    return span_id - (1 << 64) if span_id >= 1 << 63 else span_id


def unsigned64(v: int) -> int:
    """The span id a signed 64-bit column holds."""
    return v + (1 << 64) if v < 0 else v
