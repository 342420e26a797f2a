"""One place for each name: a span attribute's key is written in ccotel/spans/attributes.py and nowhere
else in the package (the code says the constant), so a renamed or misspelled key cannot hide in one
module of ten."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from ccotel.spans import attributes

PACKAGE = Path(__file__).resolve().parents[2] / "ccotel"
HOME = PACKAGE / "spans" / "attributes.py"
KEYS = {v for k, v in vars(attributes).items() if k.isupper() and isinstance(v, str)}
# The GenAI metrics name their own point attributes (metrics/genai.py): metric attributes, not span ones.
PREFIXES = ("claude_code.", "ccotel.result.", "ccotel.api_retry", "ccotel.relay.")


def _literals(path: Path) -> list[tuple[int, str]]:
    """Every plain string literal of a module (f-string parts included on the Pythons that split them)."""
    found = []
    with open(path, encoding="utf-8") as f:
        for tok in tokenize.generate_tokens(io.StringIO(f.read()).readline):
            if tok.type == tokenize.STRING and not tok.string.startswith(('"""', "'''")):
                body = tok.string.lstrip("rbuRBUfF")
                found.append((tok.start[0], body[1:-1]))
            elif tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                found.append((tok.start[0], tok.string))
    return found


def test_no_attribute_key_is_written_outside_its_module() -> None:
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        for line, text in _literals(path):
            if text in KEYS or text.startswith(PREFIXES):
                stray.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}")
    assert stray == [], "use the constants of ccotel/spans/attributes.py:\n" + "\n".join(stray)


def test_the_check_finds_a_stray_key(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('attrs = {"claude_code.turn.outcome": 1, "x": f"ccotel.result.{2}"}\n'
                      'DOC = """claude_code.cwd"""\n')
    texts = [text for _, text in _literals(module)]
    assert "claude_code.turn.outcome" in texts
    assert any(t.startswith("ccotel.result.") for t in texts)
    assert "claude_code.cwd" not in texts  # docstrings may name a key
