"""One rule for a session argument in every command (check, trace): the whole id or a unique prefix
of at least 8 characters; unknown and ambiguous said as such; paths and malformed ids refused
before the filesystem is touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ccotel.read import layout
from ccotel.read.layout import AmbiguousSession, SessionIdError, UnknownSession, resolve_session_id

A = "a1d982a6-1111-4222-8333-444444444444"
B = "a1d982a6-ffff-4222-8333-444444444444"  # the same first 13 characters as A
C = "c0ffee00-1111-4222-8333-444444444444"


def config_dir(tmp_path: Path, *ids: str) -> str:
    root = tmp_path / "claude"
    for i, sid in enumerate(ids):
        path = root / "projects" / f"-p{i % 2}" / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    (root / "projects" / "-p0" / "agent-a1d982a6.jsonl").write_text("{}\n")  # a 2.0.x agent file: no session
    return str(root)


def test_a_whole_id_and_a_unique_prefix_of_8_characters_find_the_session(tmp_path: Path) -> None:
    root = config_dir(tmp_path, A, C)
    assert resolve_session_id(A, [root]) == A
    assert resolve_session_id("a1d982a6", [root]) == A  # what `ccotel sessions` prints
    assert resolve_session_id("c0ffee00-11", [root]) == C


def test_a_prefix_shorter_than_8_characters_is_refused(tmp_path: Path) -> None:
    root = config_dir(tmp_path, A)
    with pytest.raises(SessionIdError) as refused:
        resolve_session_id("a1d982a", [root])
    assert not isinstance(refused.value, UnknownSession | AmbiguousSession)
    assert "at least its first 8 characters" in str(refused.value)


def test_unknown_names_the_id(tmp_path: Path) -> None:
    root = config_dir(tmp_path, A)
    with pytest.raises(UnknownSession, match=r"^unknown session deadbeef under "):
        resolve_session_id("deadbeef", [root])
    with pytest.raises(UnknownSession):
        resolve_session_id("a1d982a6", [str(tmp_path / "nothing")])


def test_a_long_argument_is_cut_in_the_message(tmp_path: Path) -> None:
    """A paste of 5,000 characters was echoed whole: the message is one terminal line."""
    root = config_dir(tmp_path, A)
    for arg, error in (("x" * 5000, SessionIdError), ("a" * 64, UnknownSession)):
        with pytest.raises(error) as refused:
            resolve_session_id(arg, [root])
        message = str(refused.value)
        assert f"({len(arg):,} characters)" in message and len(message) < 150 + len(root), message
        assert not isinstance(refused.value, UnknownSession) or error is UnknownSession


def test_ambiguous_names_the_candidates_and_a_whole_id_is_never_ambiguous(tmp_path: Path) -> None:
    root = config_dir(tmp_path, A, B, C)
    with pytest.raises(AmbiguousSession) as amb:
        resolve_session_id("a1d982a6", [root])
    assert str(amb.value) == f"ambiguous: a1d982a6 matches {A}, {B}"
    assert resolve_session_id("a1d982a6-f", [root]) == B
    assert resolve_session_id(A, [root]) == A
    assert layout.match_session_id("a1d982a6", [A, A]) == A  # the same session under two roots


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "a1d982a6/..", "a1d982a6.jsonl", "..",
                                 "%2e%2e%2fetc", "a1d982a6 x", "-a1d982a6", "", "a" * 65])
def test_path_like_or_malformed_ids_never_reach_the_filesystem(tmp_path: Path, bad: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = config_dir(tmp_path, A)

    def no_listing(path: str) -> list[str]:
        raise AssertionError(f"listed {path} for {bad!r}")

    monkeypatch.setattr(os, "listdir", no_listing)
    with pytest.raises(SessionIdError) as refused:
        resolve_session_id(bad, [root])
    assert not isinstance(refused.value, UnknownSession | AmbiguousSession)
