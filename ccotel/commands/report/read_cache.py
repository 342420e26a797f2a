"""The report cache (``report-cache.bin`` in the state dir): what a report without a ledger read
of each session group, so that the next one reads only the groups whose files changed.

A group's calls depend on its own files alone (transcripts.py reads each group by itself, and
merges a call two groups hold afterwards), so an entry is reused exactly when every file of the
group has the same root, path, size, mtime and inode as when it was read. It holds the group's
calls (decoded only when needed: a call another group holds too, the blocks view) and their sums
per (session, model, failed, quarter hour), which most reports need alone. Written whole or not at
all (a temporary file renamed over it), private (0600), never under ``--no-ledger``; ``ccotel run``
neither reads nor writes it, so no lock is needed. A damaged or foreign file (another layout,
another ccotel or price table: costs may differ) is no cache: said once at debug level, and
written again after the report."""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Sequence

import msgspec

from ccotel import __version__
from ccotel.hashing import blake2b
from ccotel.store.private_file import write_private

__all__ = ["CACHE_FILE", "FORMAT", "MAGIC", "MAX_BYTES", "FileKey", "GroupEntry", "Row", "Sum", "Place",
           "fingerprint", "key_digest", "file_key", "load", "save", "discard", "encode_entry", "decode_entry",
           "decode_rows"]

log = logging.getLogger("ccotel.report")

CACHE_FILE = "report-cache.bin"
FORMAT = 1  # the layout below: a new one is no cache to an older ccotel, and the other way round
MAGIC = b"ccotelRC"
_HEAD = struct.Struct("<8sII")  # magic, format, crc32 of the rest
MAX_BYTES = 256 << 20  # the oldest groups first (they change least), up to this size

# One call: key, session, usage, is API error, model, first ns, last ns, cost, project, cwd.
Row = tuple[str, str, tuple[int, int, int, int, int, int, int] | None, bool, str | None, int, int, float | None,
            str | None, str | None]
# Calls summed per (session, model, failed, quarter hour): the twelve sums of summary.call_sums.
Sum = tuple[str, str | None, bool, int, tuple[int, ...]]
Place = tuple[str, str | None, str | None]  # (session, project, cwd): summary.place_items


class FileKey(msgspec.Struct, frozen=True, array_like=True):
    """A transcript file as it was read: its root and path (its session and project) and its size,
    mtime and inode (an appended line, a file replaced: another key)."""

    root: str
    path: str
    size: int
    mtime_ns: int
    inode: int


class GroupEntry(msgspec.Struct, frozen=True, array_like=True):
    """What one session group's files gave: the key of each file, the time span of the first
    (the groups' order), a digest of each call key (``key_digest``: which groups may share a call;
    two keys with one digest only make their groups' calls decoded and merged by key), the calls'
    sums and places, and the calls themselves, encoded."""

    files: tuple[FileKey, ...]
    span: tuple[int, int]
    digests: tuple[int, ...]
    sums: tuple[Sum, ...]
    places: tuple[Place, ...]
    rows: msgspec.Raw  # tuple[Row, ...]: decoded only when the calls are needed


class _File(msgspec.Struct, frozen=True, array_like=True):
    fingerprint: str
    entries: tuple[GroupEntry, ...]


class _FileOut(msgspec.Struct, frozen=True, array_like=True):
    fingerprint: str
    entries: tuple[msgspec.Raw, ...]


_entry_decoder = msgspec.msgpack.Decoder(GroupEntry)
_file_decoder = msgspec.msgpack.Decoder(_File)
_rows_decoder = msgspec.msgpack.Decoder(tuple[Row, ...])
_encoder = msgspec.msgpack.Encoder()


def fingerprint() -> str:
    """Who computed the costs: this ccotel and the installed price table."""
    from ccotel.spans.pricing import default_cache_path

    return f"ccotel {__version__} prices {os.path.basename(default_cache_path() or 'none')}"


def key_digest(key: str) -> int:
    """64 bits of a call key's hash: a set of these is quicker to build than one of the keys."""
    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "little")


def file_key(root: str, path: str) -> FileKey | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileKey(root, path, st.st_size, st.st_mtime_ns, st.st_ino)


def encode_entry(files: tuple[FileKey, ...], span: tuple[int, int], keys: Sequence[str], sums: Sequence[Sum],
                 places: Sequence[Place], rows: Sequence[Row]) -> bytes:
    return _encoder.encode(GroupEntry(files, span, tuple(map(key_digest, keys)), tuple(sums), tuple(places),
                                      msgspec.Raw(_encoder.encode(rows))))


def decode_entry(data: bytes) -> GroupEntry:
    return _entry_decoder.decode(data)


def decode_rows(entry: GroupEntry) -> tuple[Row, ...]:
    return _rows_decoder.decode(entry.rows)


def load(state_dir: str) -> dict[tuple[FileKey, ...], GroupEntry]:
    """The cached entries by their files; {} when there is no cache or it is damaged or foreign."""
    path = os.path.join(state_dir, CACHE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {}
    why = _unusable(data)
    if why is None:
        try:
            cached = _file_decoder.decode(memoryview(data)[_HEAD.size:])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            why = f"damaged ({exc})"
        else:
            if cached.fingerprint == fingerprint():
                return {e.files: e for e in cached.entries}
            why = f"written by {cached.fingerprint}, not {fingerprint()}"
    log.debug("report cache %s not used: %s", path, why)
    return {}


def _unusable(data: bytes) -> str | None:
    if len(data) < _HEAD.size:
        return "damaged (too short)"
    magic, fmt, crc = _HEAD.unpack_from(data)
    if magic != MAGIC:
        return "not a report cache"
    if fmt != FORMAT:
        return f"another format ({fmt}, this ccotel writes {FORMAT})"
    if zlib.crc32(memoryview(data)[_HEAD.size:]) != crc:
        return "damaged (checksum)"
    return None


def save(state_dir: str, entries: Sequence[GroupEntry | bytes]) -> None:
    """Write the entries (in the groups' order, oldest first: as many as fit in MAX_BYTES; an entry
    as read from the cache, or as ``encode_entry`` gave it) whole or not at all, private. A failure
    is let go: without the cache the next report reads again."""
    kept: list[msgspec.Raw] = []
    size = 0
    for entry in entries:
        data = entry if isinstance(entry, bytes) else _encoder.encode(entry)
        size += len(data)
        if size > MAX_BYTES - 4096:
            break
        kept.append(msgspec.Raw(data))
    payload = _encoder.encode(_FileOut(fingerprint(), tuple(kept)))
    path = os.path.join(state_dir, CACHE_FILE)
    try:
        write_private(path, [_HEAD.pack(MAGIC, FORMAT, zlib.crc32(payload)), payload])
    except OSError as exc:
        log.debug("report cache %s not written: %s", path, exc)


def discard(state_dir: str) -> None:
    """Remove the cache (its calls did not decode): the next report writes it again."""
    try:
        os.unlink(os.path.join(state_dir, CACHE_FILE))
    except OSError:
        pass
