"""Property test of the registry's two input files (issue 27: an input surface with no fuzz test):
whatever bytes ``.active-pids.json`` and ``agent-responses/<id>.md`` hold (random, garbled JSON,
front matter cut anywhere, odd fields), the follower never raises, and each bad state of a file is
counted once, by the reasons its parse gives, however many polls read it again."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccotel.sources.registry.files import HEAD_BYTES, parse_active_pids, parse_front_matter
from ccotel.sources.registry.follower import Registry
from ccotel.sources.registry.telemetry import BAD_INPUT

S = 10**9
T0 = 1_795_000_000 * S


class Counts:
    """What the registry counts (the Counter protocol of telemetry.py)."""

    def __init__(self) -> None:
        self.c: Counter[tuple[str, tuple[str, ...]]] = Counter()

    def inc(self, name: str, *labels: str, value: float = 1.0, channel: str = "read") -> None:
        self.c[(name, labels)] += value

    def bad(self) -> Counter[str]:
        return Counter({labels[0]: int(v) for (name, labels), v in self.c.items() if name == BAD_INPUT})


_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
                     | st.text(max_size=12), lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_entry = st.fixed_dictionaries({}, optional={"pid": _json | st.integers(-5, 2**40), "depth": _json | st.integers(0, 9),
                                             "parentId": _json, "agentType": _json | st.text(max_size=10)})
_pids_doc = st.dictionaries(st.text(max_size=10), _entry | _json, max_size=6).map(
    lambda d: json.dumps(d).encode())


@st.composite
def pids_bytes(draw: st.DrawFn) -> bytes:
    doc = draw(_pids_doc | _json.map(lambda v: json.dumps(v).encode()))
    how = draw(st.sampled_from(["whole", "cut", "garbled", "random"]))
    if how == "cut":
        return doc[: draw(st.integers(0, len(doc)))]
    if how == "garbled" and doc:
        i = draw(st.integers(0, len(doc) - 1))
        return doc[:i] + draw(st.binary(min_size=1, max_size=4)) + doc[i + 1:]
    return draw(st.binary(max_size=200)) if how == "random" else doc


_key = st.sampled_from(["Task", "Instructions", "Started", "Status", "Depth", "ParentAgent", "Ended", "status",
                        "  indented", "X-Y", "??"])
_value = st.sampled_from(["done", "failed", "in-progress", "paused", "", "null", "2026-11-18T10:00:00.000Z",
                          "1795000000", "1795000000123", "not a time", "'quoted'", "3", "-1"]) | st.text(max_size=15)


@st.composite
def md_bytes(draw: st.DrawFn) -> bytes:
    lines = [f"{k}: {v}" for k, v in draw(st.lists(st.tuples(_key, _value), max_size=8))]
    text = "\n".join(["---", *lines, "---", draw(st.text(max_size=40))]).encode()
    how = draw(st.sampled_from(["whole", "cut", "random", "no-close", "bad-utf8"]))
    if how == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if how == "random":
        return draw(st.binary(max_size=200))
    if how == "no-close":
        return text.replace(b"\n---\n", b"\n", 1) if text.count(b"---") > 1 else text
    if how == "bad-utf8":
        return text[:5] + b"\xff\xfe" + text[5:]
    return text


def _expected_pids(data: bytes) -> Counter[str]:
    _entries, errors = parse_active_pids(data)
    return Counter(errors)


def _expected_md(data: bytes) -> Counter[str]:
    found = parse_front_matter(data[:HEAD_BYTES])
    if isinstance(found, str):
        return Counter([found])
    out: Counter[str] = Counter()
    if found.status not in (None, "in-progress", "done", "failed"):
        out["unknown_status"] += 1
    if found.status is not None and found.started_ns is None:
        out["bad_timestamp"] += 1
    return out


def _write(path: Path, data: bytes, mtime_ns: int) -> None:
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))  # each write a new state of the file, whatever the clock's grain


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes=st.lists(st.tuples(st.sampled_from(["pids", "a1", "a2"]), st.one_of(pids_bytes(), md_bytes()),
                                 st.integers(1, 4)), min_size=1, max_size=8))
def test_any_registry_file_never_crashes_and_each_bad_state_counts_once(writes: list[tuple[str, bytes, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        (directory / "agent-responses").mkdir()
        counts = Counts()
        now = [T0]
        reg = Registry(str(directory), (), counts, {"registry:seen:" + str(directory)}, clock=lambda: now[0])
        expected: Counter[str] = Counter()
        mtime = T0
        for target, data, polls in writes:
            mtime += S
            if target == "pids":
                _write(directory / ".active-pids.json", data, mtime)
                expected += _expected_pids(data)
            else:
                _write(directory / "agent-responses" / f"{target}.md", data, mtime)
                expected += _expected_md(data)
            for _ in range(polls + 1):  # read again by the polls after it: a bad read is retried once
                now[0] += S // 4
                reg.poll(now[0])
                reg.take_commit()
        assert counts.bad() == expected
