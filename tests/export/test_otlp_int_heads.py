"""otlp._key_values encodes a non-negative int from a cached per-key prefix: the same bytes as
the field-by-field encoding, for every varint length and each of the three attribute tags."""

from __future__ import annotations

import random

from ccotel.export import otlp


def _plain(attrs: dict[str, object], tag: bytes) -> bytes:
    return b"".join(otlp._ld(tag, otlp._ld(otlp._T_STR1, k.encode("utf-8", "surrogatepass"))
                             + otlp._ld(otlp._T_2LD, otlp._any_value(v)))
                    for k, v in attrs.items() if v is not None)


def test_int_prefixes_give_the_plain_bytes() -> None:
    rng = random.Random(3)
    values = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28, 2**35, 2**63 - 1, 2**64 - 1, -1, -(2**63), True]
    values += [rng.randrange(0, 2**64) for _ in range(2000)]
    for tag in (otlp._T_9LD, otlp._T_3LD, otlp._T_STR1):
        for v in values:
            for key in ("gen_ai.usage.input_tokens", "k", "x" * 200):  # a key whose field is 2 bytes long
                attrs = {"s": "short", key: v, "n": None}
                assert otlp._key_values(attrs, tag) == _plain(attrs, tag), (tag, key, v)
    assert (otlp._T_9LD, "gen_ai.usage.input_tokens") in otlp._INT_HEADS  # the prefix path was taken
