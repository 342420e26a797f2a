"""Baseline watcher: a bare watchdog inotify observer on <root>/projects that writes
``<time_ns> <path>`` for every file modification to stdout (redirect it to a file), and nothing
else. Its append -> notice latency is the floor under ccotel's append -> span latency, and its
idle CPU the floor under ccotel's idle CPU.

    python -m bench.watchbase --root DIR
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


class _Handler(FileSystemEventHandler):
    def __init__(self, out: os.PathLike[str] | int) -> None:
        self.fd = out

    def on_modified(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            os.write(self.fd, f"{time.time_ns()} {os.fsdecode(event.src_path)}\n".encode())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.watchbase")
    ap.add_argument("--root", required=True)
    args = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    obs = Observer()
    obs.schedule(_Handler(sys.stdout.fileno()), os.path.join(args.root, "projects"), recursive=True)
    obs.start()
    os.write(sys.stderr.fileno(), b"watching\n")
    while not stop.is_set():
        stop.wait(0.5)
    obs.stop()
    obs.join(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
