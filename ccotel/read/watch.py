"""Watch stage: which paths changed under the roots.

On Linux, inotify itself (through inotify_simple): a watch on every directory under a root, read
in batches by one thread. watchdog's recursive inotify observer does the same through three
threads and queues, which cost more CPU per append than reading the line does; it is still
used where inotify is not there (macOS: FSEvents), and its polling observer where nothing else
runs (no inotify, watch limit reached). Events only mark paths dirty; the pipeline reads them.
A root that does not exist yet is waited for, not an error.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from ccotel.read.layout import projects_dir
from ccotel.read.tree import walk

__all__ = ["Watcher"]

log = logging.getLogger("ccotel.watch")

# The least time between two reads of the inotify fd, the runner's POLL_GAP_S: while lines come,
# each read is one batch for one poll (the runner then polls at once: one gate, so no second gap
# out of phase with this one adds to an append's wait).
_READ_GAP_S = 0.02


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


class _InotifyTree:
    """inotify watches on every directory under some tops (what a recursive watch is), read by one
    thread a buffer at a time: one lock and one wake-up per batch of events, not per event."""

    _MASK = 0x2 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800  # MODIFY MOVED_FROM/TO CREATE DELETE DELETE/MOVE_SELF
    _IS_DIR, _OVERFLOW, _IGNORED = 0x40000000, 0x4000, 0x8000
    _CREATED, _REMOVED = 0x100 | 0x80, 0x200 | 0x40  # a name came (create, moved in) / went (delete, moved out)

    def __init__(self, mark: Callable[[set[str], set[str]], None]) -> None:
        from inotify_simple import INotify  # Linux only

        self._ino = INotify()
        self._mark = mark
        self._lock = threading.Lock()  # the watch tables: the reader thread and add_tree (ensure_roots)
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory
        self._wds: dict[str, int] = {}
        self._tops: list[str] = []
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="ccotel-inotify", daemon=True)
        self._warned = False
        self._failed = False  # an event's handling raised (said once)
        self.unreadable: list[OSError] = []  # directories inotify refused (EACCES): left out, to be counted
        self.gap_s = _READ_GAP_S  # set by the pipeline's thread (Watcher.space_batches)

    def add_tree(self, top: str, is_top: bool = False) -> None:
        """Watch ``top`` and every directory below it, each before its contents are listed (what is
        created meanwhile is seen either way). A directory below ``top`` that may not be read is left
        out (its files are not readable either; the scan counts it too) and the rest stays watched;
        any other OSError (ENOSPC: the watch limit) is the caller's."""
        self._add(top)
        if is_top:
            self._tops.append(top)
        for dirpath, dirnames, _files in walk(top):
            for d in dirnames:
                try:
                    self._add(os.path.join(dirpath, d))
                except FileNotFoundError:
                    pass  # removed again meanwhile
                except PermissionError as exc:
                    with self._lock:
                        self.unreadable.append(exc)

    def take_unreadable(self) -> list[OSError]:
        with self._lock:
            found, self.unreadable = self.unreadable, []
        return found

    def _add(self, path: str) -> None:
        wd = self._ino.add_watch(path, self._MASK)
        with self._lock:
            self._dirs[wd] = path
            self._wds[path] = wd

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        os.write(self._stop_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)
        self._ino.close()

    def _run(self) -> None:
        fd = self._ino.fileno()
        last = 0.0
        while True:
            ready, _, _ = select.select([fd, self._stop_r], [], [])
            if self._stop_r in ready:
                return
            # Appends in a burst come a millisecond apart: a read follows the one before by at
            # least _READ_GAP_S, so a batch is read per wake-up, not an event, and the pipeline
            # polls once per batch. A lone event waits for nothing.
            wait = self.gap_s - (time.monotonic() - last)
            if wait > 0:
                time.sleep(wait)
            last = time.monotonic()
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                return  # closed
            dirty: set[str] = set()
            gone: set[str] = set()
            try:
                for ev in _parse_events(data):
                    self._event(ev.wd, ev.mask, ev.name, dirty, gone)
            except Exception:  # noqa: BLE001 - this thread must live on: without it nothing new is seen
                if not self._failed:
                    self._failed = True
                    log.exception("inotify events could not be handled; the periodic rescan finds what they named")
            if dirty:
                self._mark(dirty, gone)

    def _event(self, wd: int, mask: int, name: str, dirty: set[str], gone: set[str]) -> None:
        if mask & self._OVERFLOW:  # events were lost: every file and directory is looked at again
            for top in list(self._tops):
                for dirpath, _dirs, files in walk(top):
                    dirty.add(dirpath)
                    dirty.update(os.path.join(dirpath, f) for f in files)
            return
        with self._lock:
            base = self._dirs.get(wd)
            if mask & self._IGNORED and base is not None:
                self._forget(base)
        if base is None or mask & self._IGNORED or not name:
            return  # DELETE_SELF/MOVE_SELF: the parent's event names it
        path = os.path.join(base, name)
        if mask & self._IS_DIR:
            if mask & self._CREATED:
                try:
                    self.add_tree(path)
                except OSError as exc:
                    if exc.errno != errno.ENOENT and not self._warned:
                        self._warned = True
                        log.warning("cannot watch %s (%s); files there are found by the periodic rescan",
                                    path, exc)
            elif mask & self._REMOVED:
                with self._lock:
                    self._forget_tree(path)
                gone.add(path)
            else:
                return  # a directory's own modification: every append touches it
        elif mask & self._REMOVED:
            gone.add(path)
        dirty.add(path)

    def _forget(self, path: str) -> None:
        wd = self._wds.pop(path, None)
        if wd is not None:
            self._dirs.pop(wd, None)

    def _forget_tree(self, top: str) -> None:
        """A directory moved away keeps its watches (and would name its files by the old path)."""
        prefix = top + os.sep
        for path in [p for p in self._wds if p == top or p.startswith(prefix)]:
            wd = self._wds.pop(path)
            self._dirs.pop(wd, None)
            try:
                self._ino.rm_watch(wd)
            except OSError:
                pass  # already gone with its directory


def _has_inotify_simple() -> bool:
    try:
        import inotify_simple  # noqa: F401
    except ImportError:
        return False
    return True


def _parse_events(data: bytes) -> list[Any]:
    from inotify_simple import parse_events

    events: list[Any] = parse_events(data)
    return events


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
        self._tree: _InotifyTree | None = None
        self._watched: set[str] = set()

    @property
    def spaces_batches(self) -> bool:
        """Events are read in batches at least _READ_GAP_S apart (inotify itself): the runner
        polls as each comes. watchdog's observers report each event as it comes."""
        return self._tree is not None

    def space_batches(self, gap_s: float) -> None:
        """Read inotify batches at least ``gap_s`` apart from now on (the runner's poll gap)."""
        if self._tree is not None:
            self._tree.gap_s = gap_s

    def mark(self, path: str) -> None:
        with self._lock:
            self._dirty.add(path)
        self._event.set()

    def _mark_batch(self, dirty: set[str], gone: set[str]) -> None:
        with self._lock:
            self._dirty |= dirty
            self._gone |= gone
        self._event.set()

    def mark_gone(self, path: str) -> None:
        """A path deleted or moved away: only these need a look for what to forget (every append
        is an event too, and a look at each cost a syscall per read)."""
        with self._lock:
            self._dirty.add(path)
            self._gone.add(path)
        self._event.set()

    def take_unreadable(self) -> list[OSError]:
        """Directories left unwatched because they may not be read, since the last call."""
        return [] if self._tree is None else self._tree.take_unreadable()

    def take_gone(self) -> set[str]:
        """The paths deleted or moved away since the last call."""
        with self._lock:
            gone, self._gone = self._gone, set()
        return gone

    def start(self) -> None:
        if not self.force_polling and self._start_native():
            self.mode = "inotify"
            return
        self._observer = PollingObserver(timeout=self.poll_interval_s)
        self._schedule()
        self._observer.start()
        self.mode = "polling"

    def _start_native(self) -> bool:
        """inotify through inotify_simple on Linux (watchdog's native observer where it is not
        installed, or not Linux); False when that fails (inotify missing, out of watches): polling."""
        try:
            if sys.platform.startswith("linux") and _has_inotify_simple():
                self._tree = _InotifyTree(self._mark_batch)
                self._schedule()
                self._tree.start()
            else:
                self._observer = Observer()
                self._schedule()
                self._observer.start()
            return True
        except OSError as exc:
            log.warning("inotify unavailable (%s); polling every %.1fs", exc, self.poll_interval_s)
            self._stop_tree()
            self._stop_observer()
            self._watched.clear()  # the roots watched before it failed are polled instead
            return False

    def ensure_roots(self) -> bool:
        """Schedule roots that appeared since start. True if a new one was added."""
        if self._observer is None and self._tree is None:
            return False
        return self._schedule()

    def _schedule(self) -> bool:
        added = False
        for root in self.roots:
            target = projects_dir(root)
            if not os.path.isdir(target):
                continue  # not there yet: ensure_roots adds it later
            if target in self._watched:
                continue
            if self._tree is not None:
                self._tree.add_tree(target, is_top=True)
            else:
                assert self._observer is not None
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
        self._stop_tree()
        self._stop_observer()

    def _stop_tree(self) -> None:
        if self._tree is not None:
            try:
                self._tree.stop()
            except OSError:
                pass
            self._tree = None

    def _stop_observer(self) -> None:
        if self._observer is not None:
            try:
                self._observer.stop()
                self._observer.join(timeout=5)
            except Exception:  # noqa: BLE001
                pass
            self._observer = None
