"""Opt-in content capture: prompt, tool input and output text, truncated and redacted.

Off unless ``--capture-content`` is given: transcripts hold secrets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["ContentPolicy", "DEFAULT_REDACTIONS"]

DEFAULT_REDACTIONS: tuple[str, ...] = (
    r"sk-ant-[A-Za-z0-9_\-]{8,}",  # Anthropic API keys
    r"sk-[A-Za-z0-9_\-]{20,}",  # other sk- style API keys
    r"(?i)bearer\s+[A-Za-z0-9._~+/\-]+=*",  # bearer tokens
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",  # AWS access key ids
    r"(?i)aws_secret_access_key\s*[=:]\s*\S+",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub tokens
)
REDACTED = "[REDACTED]"


@dataclass(frozen=True)
class ContentPolicy:
    max_length: int = 4096
    patterns: tuple[str, ...] = DEFAULT_REDACTIONS
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(re.compile(p) for p in self.patterns))

    def text(self, value: str) -> str:
        for pattern in self._compiled:
            value = pattern.sub(REDACTED, value)
        if len(value) > self.max_length:
            value = value[: self.max_length] + "...[truncated]"
        return value

    def json_text(self, value: Any) -> str:
        try:
            raw = orjson.dumps(value).decode()
        except TypeError:
            raw = str(value)
        return self.text(raw)

    def first_words(self, value: str, limit: int = 100) -> str:
        """The start of a text on one line, redacted, cut at a word within ``limit`` characters: what a
        trace list shows of a prompt."""
        words = " ".join(self.text(value).split())
        if len(words) <= limit:
            return words
        cut = words[:limit].rsplit(" ", 1)[0] if " " in words[:limit] else words[:limit]
        return cut + "…"

    def messages_json(self, role: str, text: str) -> str:
        """gen_ai.input.messages as the GenAI conventions shape it: [{role, parts:[{type:text, content}]}]."""
        return orjson.dumps([{"role": role, "parts": [{"type": "text", "content": self.text(text)}]}]).decode()
