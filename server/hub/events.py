"""The fleet's events as MCAP, one file per robot per UTC day: ``<events_dir>/<robot>/<YYYY-MM-DD>.mcap``
(issue 22; docs/fleet.md, "The fleet's events").

Each file holds the channels of a robot's own recording that events feed, with the same JSON schemas
(:mod:`server.gateway.recording.topics`): ``/teleop/events`` (every event the robot published, and the hub's
``online``/``offline`` notes) and ``/teleop/state`` (each change of state, for Foxglove's State Transitions panel);
Foxglove opens them as they are. The file's metadata names the robot and the fleet.

Off the event loop: :meth:`FleetEventLog.record` only appends to a bounded queue (a flood of events costs bounded
memory: over ``QUEUE_MAX`` they are dropped and counted); one writer thread for the whole fleet drains it, opens a
robot's file for the event's UTC day (the clock is injectable: the day rollover is tested), and every ``flush_s``
closes the open chunks and flushes them to the OS (``mcap.Writer.flush``, as the recorder does), so after a
``kill -9`` every file reads back with the ``mcap`` stream reader up to the last flush. At start-up the writer
thread repairs such files with the recorder's :func:`~server.gateway.recording.recovery.recover_directory`
(summary and index: seekable again); a day that already has a finished file (the hub restarted) continues in
``<YYYY-MM-DD>.1.mcap``, ``.2``, …
"""

from __future__ import annotations

import collections
import datetime
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

import orjson
from mcap.writer import CompressionType, Writer

from server.gateway.recording import topics
from server.gateway.recording.recovery import recover_directory

log = logging.getLogger(__name__)

#: events waiting for the writer at most (a robot publishes a handful a minute; this is a flood)
QUEUE_MAX = 10000
#: a file name of this log
FILE_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:\.(\d{1,4}))?\.mcap$")
LIBRARY = "teleop-hub"
CHANNELS = (topics.EVENTS, topics.STATE)


def utc_day(t: float) -> str:
    """The UTC day of unix time ``t`` (a file's name).

    >>> utc_day(86399.5), utc_day(86400.0)
    ('1970-01-01', '1970-01-02')
    """
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d")


class _DayFile:
    """One robot's open file for one day."""

    def __init__(self, path: Path, robot: str, fleet: str, day: str) -> None:
        self.path, self.day = path, day
        self.stream: BinaryIO = open(path, "wb")
        self.writer = Writer(self.stream, compression=CompressionType.ZSTD)
        self.writer.start(profile="", library=LIBRARY)
        self.writer.add_metadata("teleop_fleet", {"robot": robot, "fleet": fleet, "day": day})
        self.ids: dict[str, int] = {}
        for topic in CHANNELS:
            name, schema = topics.schema_for(topic)
            sid = self.writer.register_schema(name, "jsonschema", orjson.dumps(schema))
            self.ids[topic] = self.writer.register_channel(topic, "json", sid)
        self.seq = 0
        self.stream.flush()

    def write(self, topic: str, log_ns: int, data: bytes) -> None:
        self.seq += 1
        self.writer.add_message(self.ids[topic], log_time=log_ns, publish_time=log_ns, data=data, sequence=self.seq)

    def flush(self) -> None:
        self.writer.flush()
        self.stream.flush()

    def close(self) -> None:
        self.writer.finish()
        self.stream.close()


class FleetEventLog:
    """The writer of ``<dir>/<robot>/<day>.mcap`` (see the module docstring). :meth:`start`, then :meth:`record`
    from anywhere, :meth:`close` at the end."""

    def __init__(self, directory: str | Path, fleet: str, *, flush_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.dir = Path(directory)
        self.fleet = fleet
        self.flush_s = flush_s
        self.clock = clock
        self._queue: collections.deque[tuple[str, float, float, bytes, dict[str, Any]] | None] = collections.deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._files: dict[str, _DayFile] = {}
        self.written = 0
        self.dropped = 0
        self.error: str | None = None
        self.recovered: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ producers (any thread, never block)
    def record(self, robot: str, event: dict[str, Any]) -> bool:
        """One event of ``robot`` (its ``wall_t`` is the log time, else now); False when dropped."""
        if self._thread is None or len(self._queue) >= QUEUE_MAX:
            self.dropped += 1
            return False
        now = self.clock()
        wall_t = event.get("wall_t")
        t = float(wall_t) if isinstance(wall_t, (int, float)) and not isinstance(wall_t, bool) else now
        # the log time is the event's; the file's day is the hub's clock when it came
        self._queue.append((robot, now, t, orjson.dumps({"robot": robot, **event}, default=str), event))
        self._wake.set()
        return True

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleet-events", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish every file (blocks up to ``timeout_s``: call it through ``asyncio.to_thread``)."""
        if self._thread is None:
            return
        self._queue.append(None)
        self._wake.set()
        self._thread.join(timeout_s)
        self._thread = None

    def status(self) -> dict[str, Any]:
        return {"events_written": self.written, "events_dropped": self.dropped, "events_files_open": len(self._files)}

    # ------------------------------------------------------------------ files
    def robot_dir(self, robot: str) -> Path:
        return self.dir / robot

    def files(self, robot: str) -> list[dict[str, Any]]:
        """This robot's files, oldest first: ``{"name", "day", "bytes", "open"}``."""
        d = self.robot_dir(robot)
        try:
            paths = [p for p in d.iterdir() if FILE_NAME.match(p.name) and p.is_file()]
        except FileNotFoundError:
            return []
        open_now = {f.path for f in self._files.values()}

        def key(p: Path) -> tuple[str, int]:
            m = FILE_NAME.match(p.name)
            return m.group(1), int(m.group(2) or 0)

        return [{"name": p.name, "day": key(p)[0], "bytes": p.stat().st_size, "open": p in open_now}
                for p in sorted(paths, key=key)]

    def _path_for(self, robot: str, day: str) -> Path:
        d = self.robot_dir(robot)
        d.mkdir(parents=True, exist_ok=True)
        path, n = d / f"{day}.mcap", 0
        while path.exists():  # the hub restarted today: the finished (or repaired) file stays as it is
            n += 1
            path = d / f"{day}.{n}.mcap"
        return path

    def _file(self, robot: str, day: str) -> _DayFile:
        f = self._files.get(robot)
        if f is not None and f.day != day:  # the UTC day rolled over: finish yesterday's file
            f.close()
            f = None
        if f is None:
            f = self._files[robot] = _DayFile(self._path_for(robot, day), robot, self.fleet, day)
            log.info("fleet events of %s to %s", robot, f.path)
        return f

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        if self.dir.is_dir():
            for d in sorted(p for p in self.dir.iterdir() if p.is_dir()):
                try:
                    self.recovered += recover_directory(d)
                except OSError as err:
                    log.error("repairing the fleet events in %s failed: %s", d, err)
        last_flush = time.monotonic()
        while True:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            stop = False
            try:
                while self._queue:
                    item = self._queue.popleft()
                    if item is None:
                        stop = True
                        break
                    self._write(*item)
                if stop or time.monotonic() - last_flush >= self.flush_s:
                    for f in self._files.values():
                        f.flush()
                    last_flush = time.monotonic()
            except Exception as err:  # noqa: BLE001 - a full disk must not end the hub: count, log, go on
                self.error = f"{type(err).__name__}: {err}"
                log.exception("writing the fleet events failed")
                self._files.clear()
            if stop:
                for f in self._files.values():
                    try:
                        f.close()
                    except OSError as err:
                        log.error("finishing %s failed: %s", f.path, err)
                self._files.clear()
                return

    def _write(self, robot: str, now: float, t: float, data: bytes, event: dict[str, Any]) -> None:
        ns = int(round(t * 1e9))
        f = self._file(robot, utc_day(now))
        f.write(topics.EVENTS, ns, data)
        before, after = event.get("state_before"), event.get("state_after")
        if before != after:
            f.write(topics.STATE, ns, orjson.dumps({"t": t, "state": after, "previous": before,
                                                    "trigger": event.get("trigger"), "message": event.get("message")},
                                                   default=str))
        self.written += 1


__all__ = ["FILE_NAME", "FleetEventLog", "utc_day"]
