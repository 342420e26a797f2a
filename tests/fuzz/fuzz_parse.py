"""Fuzz target: transcript bytes -> parse_line -> Assembler -> build_span -> OTLP encoding.

Nothing may raise, every span must encode to an OTLP Span that protobuf can read back, and no
span id may be sent twice.

    python tests/fuzz/fuzz_parse.py [libFuzzer flags] [corpus dir]   # with atheris (coverage-guided)
    python tests/fuzz/fuzz_parse.py --plain [--seconds S] [--seed N]  # without: seeded random mutations

The input is a transcript: lines split on newlines. The first byte picks the mode (content
capture, which kind of file the lines come from); a line starting with ``M`` is a subagent's
meta.json instead of a transcript line.
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

try:
    import atheris
except ImportError:  # the plain mode still runs
    atheris = None


def _imports() -> None:
    global orjson, trace_pb2, Assembler, Timeouts, ContentPolicy, parse_line, FileKind, TranscriptFile
    global build_span, encode_span
    import orjson
    from opentelemetry.proto.trace.v1 import trace_pb2

    from ccotel.assemble.assembler import Assembler
    from ccotel.assemble.closing import Timeouts
    from ccotel.export.otlp import encode_span
    from ccotel.read.parse import parse_line
    from ccotel.records import FileKind, TranscriptFile
    from ccotel.spans.build import build_span
    from ccotel.spans.content import ContentPolicy


if atheris is not None and __name__ == "__main__" and "--plain" not in sys.argv:
    with atheris.instrument_imports(include=["ccotel"]):
        _imports()
else:
    _imports()

SID = "f0220000-1111-4222-8333-444444444444"
_FILES = None


def _files() -> list:
    global _FILES
    if _FILES is None:
        proj = "/fuzz/projects/-tmp-proj"
        _FILES = [
            TranscriptFile(f"{proj}/{SID}.jsonl", FileKind.MAIN, "-tmp-proj", SID),
            TranscriptFile(f"{proj}/{SID}/subagents/agent-a1.jsonl", FileKind.SUBAGENT, "-tmp-proj", SID, "a1",
                           f"{proj}/{SID}/subagents/agent-a1.meta.json"),
            TranscriptFile(f"{proj}/agent-b2.jsonl", FileKind.FLAT_AGENT, "-tmp-proj", None, "b2"),
        ]
    return _FILES


def one_input(data: bytes) -> None:
    mode = data[0] if data else 0
    capture = bool(mode & 1)
    content = ContentPolicy(max_length=64) if capture else None
    files = _files()
    asm = Assembler(Timeouts(quiet_ns=1_000_000_000, idle_ns=5_000_000_000, stall_ns=10_000_000_000),
                    capture_content=capture)
    offset = 0
    spans = []
    for i, line in enumerate(data[1:].split(b"\n")):
        src = files[(mode >> 1) % 3] if mode & 8 else files[i % 3]
        if line.startswith(b"M"):
            try:
                meta = orjson.loads(line[1:])
            except orjson.JSONDecodeError:
                meta = None
            if isinstance(meta, dict):
                asm.set_agent_meta(SID, "a1", meta)
        else:
            for entry in parse_line(line, offset, capture).entries:
                asm.add(entry, src, arrival_ns=offset)
        offset += len(line) + 1
        if i % 7 == 6:
            asm.tick(1_750_000_000_000_000_000 + offset * 1_000_000, lambda _sid: None if mode & 16 else mode & 32 == 0)
            spans.extend(asm.drain())
    asm.flush(1_750_000_100_000_000_000)
    asm.flush(None)
    spans.extend(asm.drain())
    sent: dict[int, str] = {}
    for f in spans:
        span = build_span(f, content)
        trace_pb2.Span.FromString(encode_span(span))  # what the exporter sends must be a valid Span
        if span.span_id in sent:
            raise AssertionError(f"span id sent twice: {sent[span.span_id]!r} and {span.name!r}")
        sent[span.span_id] = span.name


def seeds() -> list[bytes]:
    """Valid transcripts and lines, shaped like Claude Code's (tests/transcript.py)."""
    from tests.transcript import Transcript, text, thinking, tool_use

    t = Transcript(SID, t_ms=1_750_000_000_000)
    t.prompt("list the files", parent=None)
    t.response("msg_1", [thinking(), text("let me look"), tool_use("toolu_1")], stop_reason="tool_use")
    t.tool_result("toolu_1", "a b c", source=t.last)
    t.response("msg_2", [tool_use("toolu_t", name="Task", subagent_type="Explore", prompt="sub task",
                                  run_in_background=True)], stop_reason="tool_use")
    t.tool_result("toolu_t", "launched", tool_use_result={"agentId": "a1", "status": "async_launched"})
    t.system("compact_boundary", parent=None, logicalParentUuid=t.last, compactMetadata={"trigger": "auto",
                                                                                          "preTokens": 5})
    t.response("msg_3", [text("done")], stop_reason="end_turn")
    t.prompt("[Request interrupted by user]")
    t.system("api_error", retryAttempt=1, error={"status": 529})
    main = t.bytes()
    sub = Transcript(SID, agent_id="a1", t_ms=1_750_000_000_500)
    sub.prompt("sub task", parent=None)
    sub.response("msg_s", [tool_use("toolu_s", name="Read", file_path="/x")], stop_reason="tool_use")
    sub.tool_result("toolu_s", "content", is_error=True)
    sub.response("msg_s2", [text("report")], stop_reason="end_turn")
    meta = b'M{"agentType":"Explore","description":"d","toolUseId":"toolu_t","spawnDepth":1}\n'
    summary = b'{"type":"summary","summary":"t","leafUuid":"x"}'
    lines = main.splitlines(keepends=True)
    return [
        b"\x00" + main,
        b"\x01" + main + meta + sub.bytes(),
        b"\x08" + sub.bytes(),
        b"\x11" + lines[0] + lines[1].rstrip(b"\n") + summary + b"\n" + b"".join(lines[2:]),
        b"\x20" + b"".join(lines[:4]),
        b'\x00{"type":"progress","data":{"type":"agent_progress","agentId":"a1"},"parentToolUseID":"toolu_t",'
        b'"uuid":"p1","sessionId":"' + SID.encode() + b'"}\n',
    ]


TOKENS = [b"[", b"{", b"}", b"}{", b'"', b"\\ud800", b"\x00", b"\xff", b"1e999", b"-1", b"null", b"true", b"[]",
          b"{}", b"0001-01-01T00:00:00Z", b"9" * 30, b'"uuid":', b'"parentUuid":', b'"type":"user"',
          b'"type":"assistant"', b'"tool_use"', b'"tool_result"', b'"Task"', b"\n"]


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(7)
        pos = rng.randint(0, len(b))
        if op == 0 and b:
            b[min(pos, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[pos:pos] = rng.choice(TOKENS) * rng.choice([1, 1, 2, 50, 2000])
        elif op == 2 and b:
            del b[pos: pos + rng.randint(1, 64)]
        elif op == 3:
            other = rng.choice(pool)
            start = rng.randint(0, len(other))
            b[pos:pos] = other[start: start + rng.randint(1, 400)]
        elif op == 4:
            lines = bytes(b).split(b"\n")
            rng.shuffle(lines) if rng.random() < 0.2 else lines.insert(rng.randint(0, len(lines)), rng.choice(lines))
            b = bytearray(b"\n".join(lines))
        elif op == 5:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        else:
            digits = [i for i, c in enumerate(b) if 48 <= c <= 57]
            if digits:
                b[rng.choice(digits)] = rng.choice(b"0123456789")
    return bytes(b)


def plain(seconds: float, seed: int, artifacts: str) -> int:
    rng = random.Random(seed)
    pool = seeds()
    deadline = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < deadline:
        data = pool[runs % len(pool)] if runs < len(pool) else mutate(rng, rng.choice(pool), pool)
        if runs >= len(pool) and rng.random() < 0.05:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
        runs += 1
        try:
            one_input(data)
        except Exception:  # noqa: BLE001
            path = os.path.join(artifacts, f"crash-plain-{seed}-{runs}")
            with open(path, "wb") as f:
                f.write(data)
            traceback.print_exc()
            print(f"crash after {runs} runs; input saved to {path}", file=sys.stderr)
            return 1
        if runs >= len(pool) and rng.random() < 0.02:
            pool.append(data)  # keep some survivors to mutate further
    print(f"plain fuzzing: {runs} runs in {seconds:.0f}s, no crash")
    return 0


def main(argv: list[str]) -> int:
    if "--plain" in argv or atheris is None:
        seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 20.0
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 1
        artifacts = argv[argv.index("--artifacts") + 1] if "--artifacts" in argv else "."
        return plain(seconds, seed, artifacts)
    if "--write-seeds" in argv:
        out = argv[argv.index("--write-seeds") + 1]
        os.makedirs(out, exist_ok=True)
        for i, s in enumerate(seeds()):
            with open(os.path.join(out, f"seed-{i}"), "wb") as f:
                f.write(s)
        return 0
    atheris.Setup(argv, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
