"""The floor for a backfill: read every line of every transcript ccotel would read and
``orjson.loads`` it, nothing else. Run as its own process, like ccotel, so both pay the same
interpreter start.

    python -m bench.floor --root DIR [--root DIR2]

Prints one JSON object: files, lines, bytes, seconds.
"""

from __future__ import annotations

import argparse
import sys
import time

import orjson

from ccotel.read.discover import scan

_CHUNK = 1 << 20


def floor(roots: list[str]) -> dict[str, float]:
    t0 = time.perf_counter()
    files = lines = size = 0
    loads = orjson.loads
    for root in roots:
        for tf in scan(root):
            files += 1
            with open(tf.path, "rb") as f:
                buf = b""
                while True:
                    chunk = f.read(_CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    parts = (buf + chunk if buf else chunk).split(b"\n")
                    buf = parts.pop()
                    for line in parts:
                        if line:
                            loads(line)
                            lines += 1
                if buf.strip():
                    loads(buf)
                    lines += 1
    return {"files": files, "lines": lines, "bytes": size, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.floor")
    ap.add_argument("--root", action="append", required=True)
    args = ap.parse_args(argv)
    sys.stdout.write(orjson.dumps(floor(args.root)).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
