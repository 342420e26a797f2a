"""Digests (digests.py) behaves as a set of signed 64-bit ints, across its packings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.assemble import digests
from ccotel.assemble.digests import Digests, digest64

_D = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
# few distinct values, so adds repeat and removals hit
_SMALL = st.integers(min_value=-40, max_value=40)
_OPS = st.lists(st.tuples(st.sampled_from(["add", "update", "sorted", "remove"]),
                          st.lists(st.one_of(_SMALL, _D), max_size=30)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, probes=st.lists(st.one_of(_SMALL, _D), max_size=30))
def test_as_a_set(ops: list[tuple[str, list[int]]], probes: list[int]) -> None:
    model: set[int] = set()
    d = Digests()
    for op, values in ops:
        if op == "add":
            for v in values:
                d.add(v)
                model.add(v)
        elif op == "update":
            d.update(values)
            model |= set(values)
        elif op == "sorted":
            d.update_sorted(sorted(values))  # repeats allowed
            model |= set(values)
        else:
            d.difference_update(values)
            model -= set(values)
        assert len(d) == len(model)
    assert sorted(d) == sorted(model)
    for v in probes + sorted(model):
        assert (v in d) == (v in model)


def test_packs_and_stays_exact() -> None:
    """Enough adds to pack several times (PACK_MIN, then a quarter of the array): every digest
    is found, no other is, and the recent set stays small."""
    keys = [digest64(f"msg_{i}:req_{i}") for i in range(20_000)]
    d = Digests()
    for k in keys:
        d.add(k)
        d.add(k)  # again: no repeat counted
    assert len(d) == len(keys)
    assert len(d._recent) < max(digests.PACK_MIN, len(d._packed) // 4)
    assert all(k in d for k in keys)
    assert not any(digest64(f"other_{i}") in d for i in range(2_000))
    assert list(d._packed) == sorted(set(d._packed))
    d.difference_update(keys[:10_000])
    assert len(d) == 10_000 and keys[0] not in d and keys[-1] in d


def test_state_reads_them_in_order(tmp_path: object) -> None:
    """A restart's preload: SQLite's digests ascending, once each (a digest read from two files is
    one row per file), equal to the sets State.calls and State.prompts give; the pipeline's
    assembler then knows exactly those."""
    from ccotel.run.pipeline import Options, Pipeline
    from ccotel.store.sqlite import SqliteState as State
    from ccotel.store.state import Commit, anchor_of

    a, b = anchor_of("/r/a.jsonl"), anchor_of("/r/b.jsonl")
    calls = [(d, a) for d in (5, -(1 << 63), (1 << 63) - 1, 0, -7)] + [(5, b), (-7, b)]
    st = State(str(tmp_path))
    assert st.commit(Commit(calls=calls, prompts=[(3, a), (3, b), (-3, a)]))
    assert list(st.sorted_digests("calls")) == sorted(st.calls()) == [-(1 << 63), -7, 0, 5, (1 << 63) - 1]
    assert list(st.sorted_digests("prompts")) == sorted(st.prompts()) == [-3, 3]
    p = Pipeline(Options(roots=(str(tmp_path),)), emit=lambda _spans: None, state=st)
    assert sorted(p.assembler._seen_calls) == sorted(st.calls())
    assert sorted(p.assembler._seen_prompts) == [-3, 3]
    st.close()


def test_digest64_is_blake2b_and_its_memo_stays_bounded() -> None:
    """digest64 is memoised (the same key comes on every line of a response): the value is the
    plain digest whether it comes from the memo or not, and the memo does not grow with history."""
    import hashlib

    def plain(text: str) -> int:
        return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                              "big", signed=True)

    texts = [f"msg_{i}:req_{i}" for i in range(10_000)] + ["\ud800 lone surrogate", "é✓"]
    assert [digest64(t) for t in texts] == [plain(t) for t in texts]
    assert [digest64(t) for t in reversed(texts)] == [plain(t) for t in reversed(texts)]  # from the memo too
    assert digest64.cache_info().currsize <= 4096
