"""What tells turns apart in a trace backend's list: every turn's root span is named
``invoke_agent claude-code`` (the GenAI conventions' name), so the root carries the project
(``claude_code.project``, and OpenInference ``metadata`` for Phoenix's column and filter) and, only with
content capture, the prompt's first words (OpenInference ``input.value``: Phoenix's input column)."""

from __future__ import annotations

import os

import orjson
import pytest

from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.spans.attributes import (
    CLAUDE_CODE_CWD,
    CLAUDE_CODE_PROJECT,
    GEN_AI_INPUT_MESSAGES,
    INPUT_VALUE,
    METADATA,
)
from ccotel.spans.build import project_name
from ccotel.spans.content import ContentPolicy
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.transcript import Transcript, text

SID = "11111111-2222-4333-8444-555555555555"
FIXTURES = list_fixtures()


def _roots(root: str, content: ContentPolicy | None = None) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    Pipeline(Options(roots=(root,), content=content), emit=spans.extend).backfill(close_all=True)
    return [s for s in spans if s.parent_span_id is None]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_turn_names_its_project_and_its_prompt_only_when_captured(fixture: str) -> None:
    root = str(load_fixture(fixture).config_dir)
    plain = _roots(root)
    assert plain
    for span in plain:
        cwd = span.attributes[CLAUDE_CODE_CWD]
        assert span.attributes[CLAUDE_CODE_PROJECT] == os.path.basename(cwd.rstrip("/")) != ""
        assert orjson.loads(span.attributes[METADATA]) == {"project": span.attributes[CLAUDE_CODE_PROJECT]}
        assert INPUT_VALUE not in span.attributes  # content is exported only when asked
    captured = _roots(root, ContentPolicy())
    assert {s.span_id for s in captured} == {s.span_id for s in plain}
    prompts = 0
    for span in captured:
        if GEN_AI_INPUT_MESSAGES not in span.attributes:
            assert INPUT_VALUE not in span.attributes
            continue
        prompts += 1
        prompt = orjson.loads(span.attributes[GEN_AI_INPUT_MESSAGES])[0]["parts"][0]["content"]
        words = span.attributes[INPUT_VALUE]
        assert 0 < len(words) <= 101 and "\n" not in words
        assert " ".join(prompt.split()).startswith(words.removesuffix("…"))
    assert prompts > 0


def test_the_first_words_are_redacted_on_one_line_and_cut_at_a_word(tmp_path) -> None:
    t = Transcript(SID)
    t.prompt("deploy with key sk-ant-api03-SECRETSECRETSECRET\n\nthen " + "check the logs carefully " * 20,
             parent=None)
    t.response("msg_1", [text("ok")], stop_reason="end_turn")
    t.write(os.path.join(tmp_path, "projects", "-home-u-code-shop", f"{SID}.jsonl"))
    (turn,) = _roots(str(tmp_path), ContentPolicy())
    words = turn.attributes[INPUT_VALUE]
    assert words.startswith("deploy with key [REDACTED] then check the logs")
    assert "SECRET" not in words and "\n" not in words
    whole = "deploy with key [REDACTED] then " + "check the logs carefully " * 20
    assert words.endswith("…") and len(words) <= 101 and whole.startswith(words.removesuffix("…") + " ")
    (plain,) = _roots(str(tmp_path))
    assert INPUT_VALUE not in plain.attributes and "deploy" not in repr(plain.attributes)


@pytest.mark.parametrize(("cwd", "name"), [
    ("/home/u/code/ccotel", "ccotel"),
    ("/home/u/code/ccotel/", "ccotel"),
    ("C:\\Users\\u\\shop", "shop"),
    ("/", "/"),
    ("", None),
    (None, None),
])
def test_the_project_is_the_cwds_last_part(cwd: str | None, name: str | None) -> None:
    assert project_name(cwd) == name
