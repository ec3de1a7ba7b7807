"""Recording file names, the directory lock and pruning to a byte budget.

A file is ``<UTC start>_<name>_<part>.mcap`` (``20261130T193600Z_auto_000.mcap``), so
sorting by name is sorting by age and a rotated recording keeps its parts together.
Only one recorder may write to a directory: it holds an exclusive ``flock`` on
``.recorder.lock`` there, which the kernel drops when the process dies (so ``kill -9``
leaves nothing stale behind).

>>> check_name("run-42_left.turn")
'run-42_left.turn'
>>> check_name("../etc")
Traceback (most recent call last):
...
ValueError: recording name '../etc' must be 1-64 characters of letters, digits, '_', '-' or '.', starting with a letter or digit
>>> file_name(0.0, "auto", 3)
'19700101T000000Z_auto_003.mcap'
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

SUFFIX = ".mcap"
AUTO_NAME = "auto"
LOCK_NAME = ".recorder.lock"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_FILE_RE = re.compile(r"^(\d{8}T\d{6}Z)_([A-Za-z0-9][A-Za-z0-9_.-]{0,63})_(\d{3,})\.mcap$")


def check_name(name: str) -> str:
    """A recording name safe to use in a file name; ``ValueError`` otherwise."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"recording name {name!r} must be 1-64 characters of letters, digits, '_', '-' or '.', "
                         "starting with a letter or digit")
    return name


def file_name(start_t: float, name: str, part: int) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start_t))
    return f"{stamp}_{name}_{part:03d}{SUFFIX}"


def parse_file_name(file: str) -> tuple[str, int] | None:
    """``(name, part)`` of a recorder-made file name, ``None`` for anything else.

    >>> parse_file_name("20261130T193600Z_run-1_002.mcap")
    ('run-1', 2)
    """
    m = _FILE_RE.match(file)
    return (m.group(2), int(m.group(3))) if m else None


def safe_path(directory: Path, file: str) -> Path:
    """The path of ``file`` inside ``directory``; ``ValueError`` for anything that is not a plain
    ``.mcap`` file name there (no separators, no ``..``), so a request cannot reach outside."""
    if (not isinstance(file, str) or "/" in file or "\\" in file or "\x00" in file or file.startswith(".")
            or not file.endswith(SUFFIX) or len(file) > 255):
        raise ValueError(f"{file!r} is not a recording file name")
    return directory / file


def recording_files(directory: Path) -> list[Path]:
    """The ``.mcap`` files in ``directory``, oldest first (by name, then modification time)."""
    try:
        entries = [p for p in directory.iterdir() if p.suffix == SUFFIX and p.is_file()]
    except FileNotFoundError:
        return []
    return sorted(entries, key=lambda p: (p.name if parse_file_name(p.name) else "", p.stat().st_mtime))


class DirectoryLock:
    """An exclusive, non-blocking ``flock`` on ``<dir>/.recorder.lock``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"another recorder is writing to {self.path.parent}") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def prune(directory: Path, budget_bytes: int, keep: set[Path] = frozenset(), keep_named: bool = False,
          safety_events: Callable[[Path], int] = lambda p: 0) -> list[dict[str, Any]]:
    """Delete recordings until the directory holds at most ``budget_bytes``; returns what was deleted
    (``{"file", "bytes", "named", "safety_events"}`` each, in order).

    Files in ``keep`` (the one being written) are never deleted. Files without safety events go
    before files with any (``safety_events(path)`` counts them): an incident is the last thing to
    lose. Within each of those two groups named recordings go first (``keep_named``: automatic
    ones first), then the oldest first. So however much an operator records, the always-on
    recording of an e-stop outlives it, as long as the budget can hold it at all."""
    files = [p for p in recording_files(directory) if p not in keep]
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values()) + sum(p.stat().st_size for p in keep if p.exists())
    if total <= budget_bytes:
        return []

    def named(p: Path) -> bool:
        parsed = parse_file_name(p.name)
        return parsed is None or parsed[0] != AUTO_NAME

    safety = {p: safety_events(p) for p in files}
    order = sorted(files, key=lambda p: (safety[p] > 0, named(p) == keep_named))  # stable: oldest first within
    deleted: list[dict[str, Any]] = []
    for p in order:
        if total <= budget_bytes:
            break
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("could not prune %s: %s", p, err)
            continue
        total -= sizes[p]
        deleted.append({"file": p.name, "bytes": sizes[p], "named": named(p), "safety_events": safety[p]})
        log.warning("pruned %s (%d bytes, %s, %d safety event(s)) to stay within the %d-byte budget", p.name,
                    sizes[p], "named" if named(p) else "automatic", safety[p], budget_bytes)
    return deleted
