"""Answers of report, CSV, info and event jobs, kept as files and served again while their recording is unchanged.

A job's answer is a file in this cache's directory (``<state_dir>/report-cache/<one dir per
gateway>``): the gateway streams it to the client from the file and never holds it in
memory. The key of an answer names the recording by its identity on disk (file name,
inode, size, modification time) and the job's parameters, so an answer is reused only for
the very same file: a file that is still being written, or was replaced, gets new keys, and
:meth:`ResultCache.add` drops the answers of the same recording under an older identity
(invalidation). :meth:`ResultCache.forget` drops those of a deleted file.

The directory holds at most ``max_bytes`` of answers, the least recently used removed
first; an answer is *pinned* from :meth:`ResultCache.get` until its file is open (Linux keeps
an unlinked open file readable to the end), so it cannot go in between. An answer larger than
the whole budget is sent once and then removed. Each gateway holds
an ``flock`` on its own directory; at start-up the directories of gateways that died
(``kill -9``: no lock) are removed, so nothing piles up. Touched on the event loop only.

>>> import tempfile, pathlib
>>> cache = ResultCache(pathlib.Path(tempfile.mkdtemp()), max_bytes=10)
>>> key = ("report", "a.mcap", 1, 100, 5, "{}")
>>> path = cache.new_path(".json"); _ = path.write_bytes(b"12345678")
>>> cache.add(key, path).size, cache.bytes
(8, 8)
>>> entry = cache.get(key); entry.pins      # pinned until its file is open
1
>>> cache.release(entry); cache.forget("a.mcap"); cache.get(key), cache.bytes, path.exists()
(None, 0, False)
>>> cache.close()
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
#: a directory without its lock file this old was left half-made (a gateway made it and died)
ABANDONED_AFTER_S = 60.0

#: (job kind, recording file name, inode, size, mtime ns, the job's parameters as canonical JSON)
Key = tuple[str, str, int, int, int, str]


@dataclass
class Entry:
    key: Key
    path: Path
    size: int
    pins: int = 0
    evicted: bool = False   # out of the index; its file goes when the last pin does


class ResultCache:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: collections.OrderedDict[Key, Entry] = collections.OrderedDict()
        self._dir: Path | None = None
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------ the directory
    @property
    def dir(self) -> Path:
        """This gateway's directory (made, and the dead gateways' removed, on first use)."""
        if self._dir is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_abandoned()
            d = self.root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            d.mkdir(mode=0o700)
            fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._dir, self._lock_fd = d, fd
        return self._dir

    def _remove_abandoned(self) -> None:
        for d in self.root.iterdir():
            if not d.is_dir():
                continue
            try:
                fd = os.open(d / LOCK_NAME, os.O_RDWR)
            except OSError:  # no lock file: not a live gateway's, unless one is making it right now
                if time.time() - d.stat().st_mtime > ABANDONED_AFTER_S:
                    shutil.rmtree(d, ignore_errors=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another gateway's, in use
            finally:
                os.close(fd)
            log.info("removing the report cache of a gateway that is gone: %s", d)
            shutil.rmtree(d, ignore_errors=True)

    def new_path(self, suffix: str) -> Path:
        """Where a job writes a new answer (not in the index until :meth:`add`)."""
        return self.dir / f"{uuid.uuid4().hex}{suffix}"

    def close(self) -> None:
        """Remove the directory and every answer in it."""
        self._entries.clear()
        self.bytes = 0
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ answers
    def get(self, key: Key) -> Entry | None:
        """The answer for ``key``, pinned (call :meth:`release` once its file is open), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        entry.pins += 1
        return entry

    def add(self, key: Key, path: Path) -> Entry:
        """Index the answer a job wrote at ``path`` (its askers :meth:`get` it next). Answers of the
        same recording under another identity (it changed) go, then the least recently used until
        within budget (not this one: one larger than the budget goes once it has been sent)."""
        for other in [e for k, e in self._entries.items() if k[1] == key[1] and k[2:5] != key[2:5]]:
            self._evict(other)
        old = self._entries.get(key)
        if old is not None:  # two jobs for one key (one was started before the other finished)
            self._evict(old)
        entry = Entry(key, path, path.stat().st_size)
        self._entries[key] = entry
        self.bytes += entry.size
        self._trim(keep=entry)
        return entry

    def release(self, entry: Entry) -> None:
        entry.pins -= 1
        if entry.pins <= 0 and entry.evicted:
            _unlink(entry.path)
        self._trim()

    def forget(self, file: str) -> None:
        """Drop every answer about the recording ``file`` (it was deleted)."""
        for entry in [e for k, e in self._entries.items() if k[1] == file]:
            self._evict(entry)

    def discard(self, path: Path) -> None:
        """A job's answer that will not be indexed (it failed, or the cache is closed)."""
        _unlink(path)

    def _evict(self, entry: Entry) -> None:
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
            self.bytes -= entry.size
        entry.evicted = True
        if entry.pins <= 0:
            _unlink(entry.path)

    def _trim(self, keep: Entry | None = None) -> None:
        for entry in list(self._entries.values()):
            if self.bytes <= self.max_bytes:
                break
            if entry is not keep and (entry.pins <= 0 or entry.size > self.max_bytes):
                self._evict(entry)

    def stats(self) -> dict[str, Any]:
        return {"answers": len(self._entries), "bytes": self.bytes, "max_bytes": self.max_bytes}


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        log.warning("could not remove the cached answer %s: %s", path, err)


__all__ = ["Entry", "Key", "ResultCache"]
