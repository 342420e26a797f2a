"""JSON for the status line without the ``json`` package: ``json`` imports ``re`` (and ``re``
imports ``enum`` and ``functools``), which cost the line more than all its own work. The scanner and
the encoder are the C ones ``json`` itself runs (``_json``), driven as ``json.decoder`` and
``json.encoder`` drive them; ``loads`` and ``dumps`` give what ``json.loads`` and
``json.dumps(obj, separators=(",", ":"))`` give (tests hold them equal), and fall back to ``json``
where ``_json`` is missing or the input is not UTF-8 without a BOM."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    from typing import Any

__all__ = ["loads", "dumps", "save"]

_WS = " \t\n\r"  # json.decoder.WHITESPACE
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Decoding:
    """The attributes json's C scanner reads from its JSONDecoder (json.loads' defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _no_default(o: object) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_scan: Any
_make_encoder: Any
_ascii: Any
try:
    import _json

    _scan = _json.make_scanner(_Decoding())  # type: ignore[arg-type]  # any object with its attributes
    _make_encoder = _json.make_encoder
    _ascii = _json.encode_basestring_ascii
except (ImportError, AttributeError, TypeError):  # another Python: json itself
    _scan = _make_encoder = _ascii = None


def _fallback_loads(s: str | bytes) -> Any:
    import json

    return json.loads(s)


def loads(s: str | bytes) -> Any:
    """``json.loads``: the value, or ValueError."""
    if isinstance(s, (bytes, bytearray)):
        if _scan is None or s[:1] in (b"\xef", b"\xfe", b"\xff") or b"\x00" in s[:4]:
            return _fallback_loads(s)  # a BOM or UTF-16/32: json's detect_encoding
        s = s.decode("utf-8", "surrogatepass")
    if _scan is None:
        return _fallback_loads(s)
    start = len(s) - len(s.lstrip(_WS))
    try:
        obj, end = _scan(s, start)
    except StopIteration:
        raise ValueError("Expecting value") from None
    except SystemError:  # the scanner raises json.decoder's error only when json.decoder is loaded
        return _fallback_loads(s)
    if end != len(s) and s[end:].strip(_WS):
        raise ValueError("Extra data")
    return obj


def dumps(obj: Any) -> str:
    """``json.dumps(obj, separators=(",", ":"))``."""
    if _make_encoder is None or isinstance(obj, str):
        import json

        return json.dumps(obj, separators=(",", ":"))
    # as JSONEncoder.iterencode(_one_shot=True): markers (a new dict: circular references), default,
    # ASCII strings, no indent, the separators, sort_keys, skipkeys, allow_nan
    return "".join(_make_encoder({}, _no_default, _ascii, None, ":", ",", False, False, True)(obj, 0))


def save(path: str, doc: object) -> None:
    """Write ``doc`` to ``path`` whole or not at all (a temporary file renamed over it), private to
    the user. A failure is let go: every file the status line keeps is a cache, and without it the
    next call reads again, never wrong."""
    from ccotel.store.private_file import write_private  # only when a snapshot is written

    try:
        write_private(path, [dumps(doc).encode()])
    except OSError:
        pass
