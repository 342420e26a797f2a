"""The fast paths bench/NOTES.md describes (parse.py, otlp.py) give exactly what the plain code gives.

parse.py builds Entry/Block/Usage without their dataclass __init__ and caches the start of each
minute of a timestamp; otlp.py looks varints up in a table and caches encoded attributes. Each is
checked here against the straightforward computation, so a change to records.py or to the
encoders cannot silently make them differ (or silently turn them off).
"""

from __future__ import annotations

import calendar
import random
import time

from ccotel.export import otlp
from ccotel.read import parse, parse_full, parse_time
from ccotel.records import Block, Entry, Usage
from tests.transcript import Transcript, text, thinking, tool_use


def _plain_timestamp(value: str) -> int:
    secs = calendar.timegm((int(value[0:4]), int(value[5:7]), int(value[8:10]), int(value[11:13]),
                            int(value[14:16]), int(value[17:19]), 0, 0, 0))
    return secs * 1_000_000_000 + int(value[20:23]) * 1_000_000


def test_fast_constructors_are_on_and_equal_to_the_dataclasses():
    # on: a change to records.py that makes them unsafe (slots, __post_init__, factories) turns them off
    assert parse_full._new_entry.__name__ == "make"
    assert parse_full._new_block.__name__ == "make"
    assert parse_full._new_usage.__name__ == "make_held"
    t = Transcript("ffffffff-1111-4222-8333-444444444444")
    t.prompt("go", parent=None)
    t.response("msg_1", [thinking(), text("x"), tool_use("toolu_1", name="Task", prompt="p", subagent_type="E")],
               stop_reason="tool_use")
    t.tool_result("toolu_1", "done", tool_use_result={"agentId": "a1", "usage": {"output_tokens": 3}})
    t.system("compact_boundary", compactMetadata={"trigger": "auto", "preTokens": 5})
    for capture in (False, True):
        for line in t.bytes().splitlines():
            for e in parse.parse_line(line, 0, capture).entries:
                assert type(e) is Entry
                assert e == Entry(**vars(e)) and vars(e) == vars(Entry(**vars(e)))
                for b in e.blocks:
                    assert type(b) is Block and b == Block(**vars(b))
                if e.usage is not None:
                    assert type(e.usage) is Usage and e.usage == Usage(**vars(e.usage))


def test_timestamp_fast_path_equals_the_arithmetic():
    rng = random.Random(1)
    for _ in range(5000):
        ms = rng.randrange(0, 4_102_444_800_000)  # 1970 .. 2100
        secs, msec = divmod(ms, 1000)
        value = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{msec:03d}Z"
        assert parse_time.parse_timestamp(value) == _plain_timestamp(value) == ms * 1_000_000
    assert parse_time.parse_timestamp("2025-13-01T00:00:00.000Z") is None
    assert parse_time.parse_timestamp("2025-06-01T00:00:00.12aZ") is None
    assert parse_time.parse_timestamp("2025-06-01T00:00:00.123+01:00") == _plain_timestamp("2025-06-01T00:00:00.123Z") \
        - 3_600_000_000_000


def test_varint_table_and_shortcuts_equal_the_loop():
    values = [2**k + d for k in range(70) for d in (-1, 0, 1)] + [-(2**k) for k in range(64)] + list(range(20000))
    rng = random.Random(2)
    values += [rng.randrange(-(2**63), 2**64) for _ in range(20000)]
    for n in values:
        assert otlp._varint(n) == otlp._varint_slow(n), n


def test_attribute_cache_gives_the_uncached_bytes():
    attrs = {"s": "x" * 128, "long": "y" * 129, "t": ("end_turn",), "i": 70_000, "neg": -5, "b": True,
             "f": 0.5, "l": ("a", "b"), "none": None, "u": "ünï\ud800"}

    def plain(a: dict, tag: bytes) -> bytes:
        return b"".join(otlp._ld(tag, otlp._ld(otlp._T_STR1, k.encode("utf-8", "surrogatepass"))
                                 + otlp._ld(otlp._T_2LD, otlp._any_value(v)))
                        for k, v in a.items() if v is not None)

    for tag in (otlp._T_9LD, otlp._T_3LD, otlp._T_STR1):
        first = otlp._key_values(attrs, tag)
        assert first == otlp._key_values(attrs, tag) == plain(attrs, tag)
    assert (otlp._T_STR1, "s", "x" * 128) in otlp._KV_CACHE  # the cached path was taken
    assert (otlp._T_STR1, "long", "y" * 129) not in otlp._KV_CACHE
