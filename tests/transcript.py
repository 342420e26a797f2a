"""Build Claude Code-shaped transcript lines for unit tests (shapes from docs/format.md, 2.1.x style).

Each call appends compact JSON lines and returns the uuid of the last line, so tests can
branch the parentUuid tree wherever they like.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

import orjson

_ids = itertools.count(1)


def uid(prefix: str = "u") -> str:
    n = next(_ids)
    return f"{prefix}{n:08d}-0000-4000-8000-{n:012d}"


def iso(ms: int) -> str:
    secs, msec = divmod(ms, 1000)
    import time as _t

    return _t.strftime("%Y-%m-%dT%H:%M:%S", _t.gmtime(secs)) + f".{msec:03d}Z"


@dataclass
class Transcript:
    session_id: str
    agent_id: str | None = None
    version: str = "2.1.39"
    t_ms: int = 1_750_000_000_000
    lines: list[dict[str, Any]] = field(default_factory=list)
    last: str | None = None

    def _env(self, kind: str, parent: str | None, **extra: Any) -> dict[str, Any]:
        self.t_ms += 100
        d: dict[str, Any] = {
            "parentUuid": parent, "isSidechain": self.agent_id is not None, "userType": "external",
            "cwd": "/tmp/proj", "sessionId": self.session_id, "version": self.version, "gitBranch": "main",
            "type": kind, "uuid": uid(), "timestamp": iso(self.t_ms),
        }
        if self.agent_id:
            d["agentId"] = self.agent_id
        d.update(extra)
        self.lines.append(d)
        self.last = d["uuid"]
        return d

    def _parent(self, parent: str | None | bool) -> str | None:
        return self.last if parent is True else parent  # type: ignore[return-value]

    def prompt(self, text: str, parent: str | None | bool = True, **extra: Any) -> str:
        return self._env("user", self._parent(parent), message={"role": "user", "content": text}, **extra)["uuid"]

    def response(self, msg_id: str, blocks: list[dict[str, Any]], usage: dict[str, int] | None = None,
                 stop_reason: str | None = None, request_id: str | None = None, model: str = "claude-opus-4-6",
                 parent: str | None | bool = True, grow_output: bool = True) -> list[str]:
        """One API response written as one line per block; usage repeated, output growing on the last."""
        usage = usage or {"input_tokens": 3, "cache_creation_input_tokens": 100,
                          "cache_read_input_tokens": 1000, "output_tokens": 50}
        request_id = request_id or f"req_{msg_id}"
        out = []
        par = self._parent(parent)
        for i, block in enumerate(blocks):
            last = i == len(blocks) - 1
            u = dict(usage)
            if grow_output and not last:
                u["output_tokens"] = 1
            msg = {"model": model, "id": msg_id, "type": "message", "role": "assistant", "content": [block],
                   "stop_reason": stop_reason if last else None, "stop_sequence": None, "usage": u}
            d = self._env("assistant", par, message=msg, requestId=request_id)
            par = d["uuid"]
            out.append(d["uuid"])
        return out

    def tool_result(self, tool_use_id: str, text: str = "ok", is_error: bool = False,
                    parent: str | None | bool = True, source: str | None = None,
                    tool_use_result: Any = None) -> str:
        block: dict[str, Any] = {"tool_use_id": tool_use_id, "type": "tool_result", "content": text}
        if is_error:
            block["is_error"] = True
        extra: dict[str, Any] = {}
        if source:
            extra["sourceToolAssistantUUID"] = source
        if tool_use_result is not None:
            extra["toolUseResult"] = tool_use_result
        return self._env("user", self._parent(parent),
                         message={"role": "user", "content": [block]}, **extra)["uuid"]

    def system(self, subtype: str, parent: str | None | bool = True, **extra: Any) -> str:
        return self._env("system", self._parent(parent), subtype=subtype, **extra)["uuid"]

    def tool_turn(self, tag: str, said: str = "x", result: str = "y") -> None:
        """A whole turn: prompt, a response with one Bash call, its result, the final answer."""
        self.prompt(f"turn {tag}", parent=self.last)
        self.response(f"msg_{tag}a", [text(said), tool_use(f"toolu_{tag}")], stop_reason="tool_use")
        self.tool_result(f"toolu_{tag}", result)
        self.response(f"msg_{tag}b", [text("done")], stop_reason="end_turn")

    def raw(self, obj: dict[str, Any]) -> None:
        self.lines.append(obj)

    def bytes(self) -> bytes:
        return b"".join(orjson.dumps(d) + b"\n" for d in self.lines)

    def write(self, path: str) -> str:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(self.bytes())
        return path


def tool_use(tool_id: str, name: str = "Bash", **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": inp or {"command": "true"}}


def text(t: str = "done") -> dict[str, Any]:
    return {"type": "text", "text": t}


def thinking(t: str = "hmm") -> dict[str, Any]:
    return {"type": "thinking", "thinking": t, "signature": "sig"}
