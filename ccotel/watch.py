"""Watch stage: which paths changed under the roots.

watchdog's inotify observer where it can run; its polling observer where it cannot (no
inotify, watch limit reached). Events only mark paths dirty; the pipeline reads them.
A root that does not exist yet is waited for, not an error.
"""

from __future__ import annotations

import logging
import os
import threading

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

__all__ = ["Watcher"]

log = logging.getLogger("ccotel.watch")


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write", "closed"):
            return
        if event.is_directory and event.event_type == "modified":
            return  # every append to a file also touches its directory; the file event suffices
        path = os.fsdecode(getattr(event, "dest_path", "") or event.src_path)
        self.watcher.mark(path)
        if event.event_type in ("deleted", "moved"):
            self.watcher.mark_gone(os.fsdecode(event.src_path))


class Watcher:
    def __init__(self, roots: tuple[str, ...], force_polling: bool = False, poll_interval_s: float = 2.0) -> None:
        self.roots = roots
        self.force_polling = force_polling
        self.poll_interval_s = poll_interval_s
        self.mode = "none"
        self._dirty: set[str] = set()
        self._gone: set[str] = set()  # paths deleted or moved away (a subset of what was dirty)
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._observer: BaseObserver | None = None
        self._watched: set[str] = set()

    def mark(self, path: str) -> None:
        with self._lock:
            self._dirty.add(path)
        self._event.set()

    def mark_gone(self, path: str) -> None:
        """A path deleted or moved away: only these need a look for what to forget (every append
        is an event too, and a look at each cost a syscall per read)."""
        with self._lock:
            self._dirty.add(path)
            self._gone.add(path)
        self._event.set()

    def take_gone(self) -> set[str]:
        """The paths deleted or moved away since the last call."""
        with self._lock:
            gone, self._gone = self._gone, set()
        return gone

    def start(self) -> None:
        if not self.force_polling:
            try:
                self._observer = Observer()
                self._schedule()
                self._observer.start()
                self.mode = "inotify"
                return
            except OSError as exc:  # inotify missing or out of watches
                log.warning("inotify unavailable (%s); polling every %.1fs", exc, self.poll_interval_s)
                self._stop_observer()
        self._observer = PollingObserver(timeout=self.poll_interval_s)
        self._schedule()
        self._observer.start()
        self.mode = "polling"

    def ensure_roots(self) -> bool:
        """Schedule roots that appeared since start. True if a new one was added."""
        if self._observer is None:
            return False
        return self._schedule()

    def _schedule(self) -> bool:
        assert self._observer is not None
        added = False
        for root in self.roots:
            target = os.path.join(root, "projects")
            if not os.path.isdir(target):
                continue  # not there yet: ensure_roots adds it later
            if target in self._watched:
                continue
            self._observer.schedule(_Handler(self), target, recursive=True)
            self._watched.add(target)
            self.mark(target)  # read whatever appeared before the watch existed
            added = True
        return added

    def wait(self, timeout_s: float) -> set[str]:
        self._event.wait(timeout_s)
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            self._event.clear()
        return dirty

    def stop(self) -> None:
        self._stop_observer()

    def _stop_observer(self) -> None:
        if self._observer is not None:
            try:
                self._observer.stop()
                self._observer.join(timeout=5)
            except Exception:  # noqa: BLE001
                pass
            self._observer = None
