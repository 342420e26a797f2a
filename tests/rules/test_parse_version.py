"""rules/versions.parse_version, the one reading of a Claude Code version: its contract.

Both the doctor's verdicts (judge_version) and the resume rules of rules/transcript.py compare
the tuples it gives, so the contract is what they rely on: a plain X.Y.Z reads as its three
numbers, X.Y as X.Y.0, a suffix that is not more of the number is ignored, and anything else
is None, never an exception.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from ccotel.rules import transcript
from ccotel.rules.versions import parse_version

_PART = st.integers(0, 10**6)
# what a pre-release or build suffix starts with: anything but a digit or a dot
_SUFFIX = st.text(min_size=1, max_size=12).filter(lambda s: s[0] not in "0123456789.")


@given(_PART, _PART, _PART)
def test_plain_versions_read_as_their_numbers(major: int, minor: int, patch: int) -> None:
    assert parse_version(f"{major}.{minor}.{patch}") == (major, minor, patch)
    assert parse_version(f"{major}.{minor}") == (major, minor, 0)


@given(_PART, _PART, _PART, _SUFFIX)
@example(2, 2, 0, "-beta.1")
@example(2, 1, 330, "+build.7")
def test_a_suffix_is_ignored(major: int, minor: int, patch: int, suffix: str) -> None:
    assert parse_version(f"{major}.{minor}.{patch}{suffix}") == (major, minor, patch)
    assert parse_version(f" {major}.{minor}.{patch}{suffix}\n") == (major, minor, patch)


@given(st.one_of(st.none(), st.text(max_size=40), st.from_regex(r"\A[0-9.+\- a-z]{0,20}\Z")))
@example("")
@example("abc")
@example("2")
@example("2.1.3.4")
@example("+2.1.3")
@example("\u0662.\u0661.\u0663")  # other scripts' digits: not a version Claude Code writes
@example("9" * 5000 + ".1.1")  # more digits than int() reads
def test_anything_else_is_none_or_three_numbers_that_read_back(text: str | None) -> None:
    v = parse_version(text)
    if v is None:
        return
    assert len(v) == 3 and all(type(n) is int and n >= 0 for n in v)
    assert parse_version(".".join(map(str, v))) == v


def test_the_examples_of_the_contract() -> None:
    assert parse_version("2.1.330") == (2, 1, 330)
    assert parse_version("1.0.17") == (1, 0, 17)
    assert parse_version("2.2.0-beta.1") == (2, 2, 0)
    assert parse_version("2.1") == (2, 1, 0)
    for not_a_version in (None, "", "abc", "2", "2.1.3.4", "+2.1.3", "\u0662.\u0661.\u0663", "9" * 5000 + ".1.1"):
        assert parse_version(not_a_version) is None, not_a_version


@given(_PART, _PART, _PART, _PART, _PART, _PART)
def test_versions_compare_as_their_numbers(a: int, b: int, c: int, x: int, y: int, z: int) -> None:
    v, w = parse_version(f"{a}.{b}.{c}"), parse_version(f"{x}.{y}.{z}")
    assert v is not None and w is not None
    assert (v < w) == ((a, b, c) < (x, y, z)) and (v == w) == ((a, b, c) == (x, y, z))
    assert parse_version(f"{a}.{b}") == parse_version(f"{a}.{b}.0")


def test_the_resume_rules_read_versions_with_it() -> None:
    assert transcript.parse_version is parse_version
