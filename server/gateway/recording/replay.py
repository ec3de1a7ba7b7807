"""Replay: a recording played back on a clock, with play, pause, seek and speed.

The gateway drives the dashboard from a :class:`ReplaySource` instead of the runtime:
it calls :meth:`ReplaySource.due` periodically (from a worker thread: reading a chunk
decompresses it) and forwards each ``(t, topic, payload)`` exactly as it was
recorded, so a telemetry payload is already the snapshot JSON the dashboard expects.
Playback time maps to the injected clock: ``position = anchor + (clock() - clock_anchor)
· speed``; tests and the bench inject a fake clock, so no test waits for real time.

After a seek (and at the start), the next :meth:`due` call first returns the newest
snapshot *before* the new position, so a paused dashboard shows the robot as it was
at that instant rather than nothing.

>>> clock = FakeClock()
>>> clock.now
0.0
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import orjson

from server.gateway.recording import topics as _topics
from server.gateway.recording.reader import Msg, Recording, RecordingError

log = logging.getLogger(__name__)

#: what a dashboard needs from a recording: snapshots, events and (if recorded) camera frames
DEFAULT_TOPICS = (_topics.TELEMETRY, _topics.EVENTS, _topics.IMAGE)
MAX_SPEED = 100.0


class FakeClock:
    """A settable clock for tests and benches (``clock.now`` seconds; ``advance(dt)``)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, dt_s: float) -> None:
        self.now += dt_s


class ReplaySource:
    """Plays ``path`` back. Thread-safe: controls may come from the event loop while
    :meth:`due` runs in a worker thread."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.monotonic,
                 topics: Iterable[str] = DEFAULT_TOPICS, speed: float = 1.0, max_batch: int = 5000) -> None:
        self.recording = Recording(path)
        self.path = Path(path)
        self.clock = clock
        self.topics = tuple(topics)
        self.max_batch = max_batch
        info = self.recording.info()
        if info["start_t"] is None or not any(info["counts"].get(t) for t in self.topics):
            self.recording.close()
            raise RecordingError(f"{self.path.name} has no messages to replay")
        self.info = info
        self.start_t: float = info["start_t"]
        self.end_t: float = info["end_t"]
        self._lock = threading.Lock()
        self._speed = self._check_speed(speed)
        self._pos = self.start_t
        self._anchor: float | None = None  # clock reading when playback last (re)started; None = paused
        self._it: Iterator[Msg] | None = None
        self._next: Msg | None = None
        self._prime = False
        self._ended = False
        self.error: str | None = None
        self._cursor_t = self.start_t
        self._reset_cursor(self.start_t, prime=False)

    @property
    def robot(self) -> dict[str, Any]:
        """The recorded robot description, for ``GET /api/robot`` and the ``hello`` message."""
        return self.recording.robot

    def close(self) -> None:
        self.recording.close()

    # ------------------------------------------------------------------ controls
    def play(self) -> None:
        with self._lock:
            if self._ended:  # play after the end starts over
                self._reset_cursor(self.start_t, prime=True)
            if self._anchor is None:
                self._anchor = self.clock()

    def pause(self) -> None:
        with self._lock:
            self._pos = self._position()
            self._anchor = None

    def seek(self, t: float) -> float:
        """Jump to unix time ``t`` (clamped to the recording); returns the new position."""
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
            raise ValueError(f"seek time must be a finite number of seconds, not {t!r}")
        with self._lock:
            t = min(max(float(t), self.start_t), self.end_t)
            self._reset_cursor(t, prime=True)
            if self._anchor is not None:
                self._anchor = self.clock()
            return t

    def set_speed(self, speed: float) -> None:
        speed = self._check_speed(speed)
        with self._lock:
            self._pos = self._position()
            if self._anchor is not None:
                self._anchor = self.clock()
            self._speed = speed

    @staticmethod
    def _check_speed(speed: float) -> float:
        if (not isinstance(speed, (int, float)) or isinstance(speed, bool) or not math.isfinite(speed)
                or not 0 < speed <= MAX_SPEED):
            raise ValueError(f"speed must be in (0, {MAX_SPEED:g}], not {speed!r}")
        return float(speed)

    def status(self) -> dict[str, Any]:
        with self._lock:
            pos = self._position()
            return {
                "file": self.path.name,
                "playing": self._anchor is not None,
                "ended": self._ended,
                "speed": self._speed,
                "position_t": pos,
                "start_t": self.start_t,
                "end_t": self.end_t,
                "duration_s": self.end_t - self.start_t,
                "error": self.error,
                "progress": (pos - self.start_t) / (self.end_t - self.start_t) if self.end_t > self.start_t else 1.0,
            }

    # ------------------------------------------------------------------ playback
    def _position(self) -> float:
        if self._anchor is None:
            return self._pos
        return min(self.end_t, self._pos + (self.clock() - self._anchor) * self._speed)

    def _reset_cursor(self, t: float, prime: bool) -> None:
        self._pos = self._cursor_t = t
        self._it = self.recording.messages(self.topics, start_t=t)
        self._next = None
        self._prime = prime
        self._ended = False

    def due(self) -> list[Msg]:
        """The messages whose time has come since the last call (at most ``max_batch``), in order."""
        with self._lock:
            pos = self._position()
            out: list[Msg] = []
            if self._prime:
                self._prime = False
                if _topics.TELEMETRY in self.topics:
                    last = next(self.recording.messages(_topics.TELEMETRY, end_t=self._cursor_t, reverse=True), None)
                    if last is not None:
                        out.append(last)
            while len(out) < self.max_batch:
                if self._next is None:
                    try:
                        self._next = next(self._it, None)
                    except RecordingError as err:  # a damaged chunk: stop here rather than kill the caller's loop
                        log.error("replay of %s stopped: %s", self.path.name, err)
                        self.error = str(err)
                        self._ended, self._anchor, self._pos = True, None, pos
                        break
                    if self._next is None:
                        if pos >= self.end_t:
                            self._ended = True
                            self._pos, self._anchor = self.end_t, None
                        break
                if self._next.t > pos:
                    break
                out.append(self._next)
                self._next = None
            return out

    async def run(self, emit: Callable[[Msg], None], period_s: float = 0.02,
                  sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """Forward due messages to ``emit`` every ``period_s`` until cancelled (reads off the event loop)."""
        while True:
            for m in await asyncio.to_thread(self.due):
                emit(m)
            await sleep(period_s)


def decode_image(data: bytes) -> tuple[bytes, float, str]:
    """``(image bytes, unix time, format)`` of a recorded ``foxglove.CompressedImage`` payload.

    >>> decode_image(b'{"timestamp":{"sec":1,"nsec":500000000},"frame_id":"camera","format":"jpeg","data":"/9g="}')
    (b'\\xff\\xd8', 1.5, 'jpeg')
    """
    msg = orjson.loads(data)
    ts = msg["timestamp"]
    return base64.b64decode(msg["data"], validate=True), ts["sec"] + ts["nsec"] / 1e9, msg["format"]
