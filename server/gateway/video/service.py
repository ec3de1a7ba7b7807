"""Camera video to the browser: one capture+encode thread, per-client senders with credit flow control.

Pipeline::

    CameraSource.read() ─▶ scale to width×height ─▶ JPEG once ─▶ latest slot ─▶ one sender per client
    └──────────── capture thread (never the event loop) ───────┘  └──────── event loop ─────────┘

- The capture thread reads the source at ``fps``, encodes each frame **once**
  and hands the newest frame to the event loop with ``call_soon_threadsafe``;
  a frame the loop has not picked up yet is replaced, never queued.
- Each websocket client holds one **credit**: it gets a frame, and the next one
  only after it acks that frame (``{"type": "ack", "seq": n}``). Waiting for
  ``drain()`` alone is not enough: loopback and kernel buffers held several
  seconds of frames for a slow client (notes/performance.md §3). Frames a
  client misses meanwhile are counted (``dropped``); when the ack arrives it
  gets the newest frame, so its latency stays bounded by one frame in flight.
- MJPEG (``/video.mjpeg``) has no acks: its sender writes only the newest frame
  and skips frames while the previous write is still in the transport's buffer.
  Kernel socket buffers still hold frames, so it cannot bound latency the way
  the websocket does; it is for plain ``<img>`` embeds.
- Camera failures (no device, unplugged, bad URL) never reach the rest of the
  server: the thread reports ``retrying`` and reopens with exponential backoff
  (``retry_initial_s`` doubling up to ``retry_max_s``); after ``retry_limit``
  consecutive failures (0 = never) or on a configuration error the source
  cannot recover from, the state is ``failed`` until the settings change.

Wire format of ``/ws/video`` (server → client):

- binary: one message per frame = 4-byte big-endian header length ``n``, ``n``
  bytes of UTF-8 JSON header ``{"type": "frame", "seq", "capture_t", "width",
  "height", "encode_ms", "bytes"}`` (``capture_t``: Unix time in s at
  capture), then the JPEG;
- text: ``{"type": "status", "data": {...}}`` on connect and on every change of
  camera state or settings; ``{"type": "error", "error": {"code", "message"}}``
  for a message the server did not understand.

Client → server: text ``{"type": "ack", "seq": n}`` after each frame is shown.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import cv2
import numpy as np

from drivers.camera.base import CameraError, CameraSource
from drivers.errors import DriverError
from server.gateway.video.frames import EncodedFrame, encode_frame
from server.gateway.video.settings import RUNTIME_LIMITS, validate_runtime_settings, validate_video_settings

log = logging.getLogger(__name__)


def camera_factory(context: Mapping[str, Any] | None = None) -> Callable[[dict], CameraSource]:
    """The usual ``source_factory``: the registered camera of ``settings["source"]`` (``sim`` or
    ``opencv``), built with ``context`` (the sim camera's world and pose source)."""
    from drivers.registry import camera_class

    def make(settings: dict) -> CameraSource:
        try:
            return camera_class(settings["source"]).from_context(settings, dict(context or {}))
        except (KeyError, ValueError) as err:
            raise DriverError(f"video.source {settings['source']!r}: {err}") from err

    return make


MAX_OUTBOX = 16


@dataclass(eq=False)
class VideoViewer:
    """One viewer. Touched only on the event loop."""

    id: int
    kind: str  # "ws" | "mjpeg"
    remote: str | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0
    dropped: int = 0
    acked: int = 0
    last_seq: int = 0
    first_seq: int = 0  # the oldest frame this client could have received
    in_flight: int | None = None  # seq sent and not yet acked (websocket only)
    status_dirty: bool = False
    # error replies waiting to be sent: bounded, so a client that never reads cannot grow the server
    outbox: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_OUTBOX))
    replies_dropped: int = 0
    send_since: float | None = None  # monotonic start of the send in progress
    in_flight_since: float | None = None  # when the unacked frame was sent
    transport: Any = None

    def stuck_for(self, now: float) -> float:
        """How long this viewer has blocked progress: a send the peer does not read, or a frame it
        does not ack (0 when neither)."""
        since = [t for t in (self.send_since, self.in_flight_since) if t is not None]
        return now - min(since) if since else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "remote": self.remote, "sent": self.sent,
            "dropped": self.dropped, "acked": self.acked, "in_flight": 0 if self.in_flight is None else 1,
        }


# --------------------------------------------------------------------------- the service


class VideoService:
    """Owns the capture thread, the latest frame and the client list.

    ``source_factory(settings)`` returns an unopened :class:`CameraSource` for
    the current settings (the validated ``[video]`` table with the run-time
    values); it is called again for every reopen. Start and stop it from the
    event loop (:func:`setup_video` does that in ``cleanup_ctx``).
    """

    def __init__(self, source_factory: Callable[[dict], CameraSource], settings: Mapping[str, Any]) -> None:
        self._factory = source_factory
        self._settings = validate_video_settings(settings)
        self._settings_dirty = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._kick = threading.Event()  # settings changed or stopping: end a backoff wait now
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # thread → loop hand-over, latest wins
        self._pending: EncodedFrame | None = None
        self._handover_scheduled = False
        # loop side
        self.latest: EncodedFrame | None = None
        self._loop_seq = 0  # newest seq the loop has seen
        self._coalesced = 0  # frames replaced in the hand-over before the loop saw them
        self._clients: dict[int, VideoViewer] = {}
        self._ids = itertools.count(1)
        # status, written by the thread under the lock
        self._state = "stopped"
        self._error: str | None = "not started"
        self._retries = 0
        self._next_retry_at: float | None = None
        self._source_info: dict[str, Any] = {}
        self._seq = 0
        self._counters = {
            "captured": 0, "encoded": 0, "raw_only": 0, "skipped_rate": 0, "late": 0,
            "read_errors": 0, "open_errors": 0, "scaled": 0,
        }
        self._encode_ms = 0.0
        self._jpeg_bytes = 0
        self._capture_times: collections.deque[float] = collections.deque(maxlen=121)  # 2 s at 60 fps
        #: called in the capture thread with every encoded frame (must not block: e.g. a recorder's enqueue);
        #: while there is one, frames are captured even with no viewer. A listener with a ``max_fps``
        #: attribute (see :class:`RateCappedListener`) needs no more than that: while only such listeners
        #: want frames, the camera is read at the highest of their rates instead of ``fps``
        self.frame_listeners: list[Callable[[EncodedFrame], None]] = []
        self._demand = threading.Event()  # a viewer or a snapshot wants frames
        self._demand_until = 0.0

    # ---------------------------------------------------------------- lifecycle (event loop)
    def start(self) -> None:
        """Start the capture thread (call on the event loop). Does nothing when ``enabled`` is false."""
        self._loop = asyncio.get_running_loop()
        if self._thread is not None:
            return
        if not self._settings["enabled"]:
            self._set_status("stopped", "video is disabled in the config ([video] enabled = false)")
            return
        self._stop.clear()
        self._kick.clear()
        # "retrying" with 0 retries: the first attempt is in progress (a stream may take seconds)
        self._set_status("retrying", None, 0, None)
        self._thread = threading.Thread(target=self._run, name="video-capture", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop and join the capture thread (blocking: call it in a worker thread from async code)."""
        self._stop.set()
        self._kick.set()
        self._demand.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout_s)
            if t.is_alive():
                log.warning("video capture thread did not stop within %.1f s (blocked in the camera?)", timeout_s)
        self._set_status("stopped", None)

    # ---------------------------------------------------------------- settings
    @property
    def settings(self) -> dict[str, Any]:
        """A copy of the current settings (the whole validated ``[video]`` table)."""
        with self._lock:
            return dict(self._settings)

    def runtime_settings(self) -> dict[str, int]:
        with self._lock:
            return {k: self._settings[k] for k in RUNTIME_LIMITS}

    def update_settings(self, changes: Mapping[str, Any]) -> dict[str, int]:
        """Apply run-time settings (validated with :func:`validate_runtime_settings` first).

        The capture thread picks them up before its next frame; a ``failed``
        camera is retried at once. Returns the new run-time settings.
        """
        changes = validate_runtime_settings(changes)
        with self._lock:
            self._settings.update(changes)
            self._settings_dirty = True
        self._kick.set()
        log.info("video settings changed: %s", changes)
        self._notify_status()
        return self.runtime_settings()

    # ---------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        with self._lock:
            nxt = self._next_retry_at
            return {
                "state": self._state,
                "error": self._error,
                "retries": self._retries,
                "next_retry_s": None if nxt is None else round(max(0.0, nxt - time.monotonic()), 3),
            }

    def counters(self) -> dict[str, Any]:
        with self._lock:
            c = dict(self._counters)
            ts = list(self._capture_times)
            c["encode_ms"] = round(self._encode_ms, 3)
            c["jpeg_bytes"] = self._jpeg_bytes
            c["seq"] = self._seq
            fps = self._settings["fps"]
        c["capture_fps"] = self.capture_fps(fps) if self._wanted() else 0.0  # the rate aimed at now
        recent = [t for t in ts if t >= time.monotonic() - 2.0]  # a stalled camera reads 0, not its old rate
        n = len(recent)
        c["coalesced"] = self._coalesced
        c["fps_measured"] = round((n - 1) / (recent[-1] - recent[0]), 2) if n > 1 and recent[-1] > recent[0] else 0.0
        return c

    def describe(self) -> dict[str, Any]:
        """The ``GET /api/video`` body: status, settings, source, counters and clients."""
        with self._lock:
            source = dict(self._source_info)
            kind = self._settings["source"]
            enabled = self._settings["enabled"]
        return {
            "status": self.status(),
            "settings": self.runtime_settings(),
            "limits": {k: list(v) for k, v in RUNTIME_LIMITS.items()},
            "source": {"type": kind, "enabled": enabled, **source},
            "counters": self.counters(),
            "clients": [c.to_json() for c in self._clients.values()],
        }

    def status_message(self) -> str:
        """The ``{"type": "status"}`` text message for websocket clients."""
        return json.dumps({"type": "status", "data": {**self.status(), "settings": self.runtime_settings()}})

    # ---------------------------------------------------------------- clients (event loop)
    def _watched(self) -> bool:
        """A viewer is connected or a snapshot was asked for: frames at ``fps``, JPEG-encoded."""
        return bool(self._clients) or time.monotonic() < self._demand_until

    def _wanted(self) -> bool:
        return self._watched() or bool(self.frame_listeners)

    def capture_fps(self, fps: float) -> float:
        """The rate to read the camera at: ``fps`` for a viewer or a snapshot, else what the listeners need."""
        if self._watched():
            return fps
        caps = [getattr(f, "max_fps", None) for f in self.frame_listeners]
        if not caps or None in caps:
            return fps
        return min(fps, max(caps))

    def want_frames(self, for_s: float = 2.0) -> None:
        """Capture for at least ``for_s`` (a snapshot request with no viewer connected)."""
        self._demand_until = max(self._demand_until, time.monotonic() + for_s)
        self._demand.set()

    def add_client(self, kind: str, remote: str | None) -> VideoViewer:
        c = VideoViewer(next(self._ids), kind, remote)
        c.first_seq = self.latest.seq if self.latest is not None else self._loop_seq + 1
        self._clients[c.id] = c
        c.wake.set()
        self._demand.set()
        return c

    def remove_client(self, client: VideoViewer) -> None:
        self._clients.pop(client.id, None)

    def clients(self) -> list[VideoViewer]:
        return list(self._clients.values())

    def ack(self, client: VideoViewer, seq: int) -> None:
        """A websocket client showed frame ``seq``: give its credit back."""
        if client.in_flight is not None and seq >= client.in_flight:
            client.in_flight = None
            client.in_flight_since = None
            client.acked += 1
            client.wake.set()

    # ---------------------------------------------------------------- thread → loop
    def _hand_over(self, frame: EncodedFrame) -> None:
        with self._lock:
            self._pending = frame
            if self._handover_scheduled:
                return  # the loop has not taken the previous one yet: this one replaces it
            self._handover_scheduled = True
        self._call_on_loop(self._take_pending)

    def _take_pending(self) -> None:
        with self._lock:
            frame, self._pending = self._pending, None
            self._handover_scheduled = False
        if frame is None:
            return
        if self._loop_seq and frame.seq > self._loop_seq + 1:
            self._coalesced += frame.seq - self._loop_seq - 1
        self._loop_seq = frame.seq
        self._replace_latest(frame)
        for c in self._clients.values():
            c.wake.set()

    def _replace_latest(self, frame: EncodedFrame | None) -> None:
        # a client's drop = a frame that was the latest while it watched and never went to it
        prev = self.latest
        if prev is not None:
            for c in self._clients.values():
                if c.first_seq <= prev.seq and c.last_seq < prev.seq:
                    c.dropped += 1
        self.latest = frame

    def _call_on_loop(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # loop closed during shutdown
            pass

    def _notify_status(self) -> None:
        self._call_on_loop(self._broadcast_status)

    def _broadcast_status(self) -> None:
        if self.status()["state"] != "ok":
            with self._lock:
                pending = self._pending
            if pending is None:
                self._replace_latest(None)  # no stale picture for snapshots or new viewers
        for c in self._clients.values():
            c.status_dirty = True
            c.wake.set()

    def _set_status(self, state: str, error: str | None, retries: int = 0, next_retry_at: float | None = None) -> None:
        with self._lock:
            changed = (state, error, retries) != (self._state, self._error, self._retries)
            self._state, self._error, self._retries, self._next_retry_at = state, error, retries, next_retry_at
        if changed:
            self._notify_status()

    # ---------------------------------------------------------------- the capture thread
    def _run(self) -> None:
        source: CameraSource | None = None
        failures = 0
        deadline = time.monotonic()
        try:
            while not self._stop.is_set():
                with self._lock:
                    s = dict(self._settings)
                    dirty, self._settings_dirty = self._settings_dirty, False
                if source is not None and not self._wanted():
                    # nobody watching: keep the camera open but read, render and encode nothing
                    # (idle CPU of the whole server; measured in bench/bench_server.py)
                    self._demand.wait(0.5)
                    self._demand.clear()
                    deadline = time.monotonic()
                    continue
                if source is None:
                    source, err = self._open(s)
                    if source is None:
                        failures += 1
                        if self._backoff(err, failures, s):
                            failures = 0
                        continue
                    deadline = time.monotonic()
                elif dirty:
                    try:
                        source.apply(s["width"], s["height"], s["fps"])
                    except Exception as err:  # noqa: BLE001 - a refused setting means reopen with it
                        log.info("camera refused new settings (%s); reopening", err)
                        source.close()
                        source = None
                        continue
                period = 1.0 / self.capture_fps(s["fps"])
                self_paced = source.self_paced
                if not self_paced:
                    delay = deadline - time.monotonic()
                    if delay > 0 and self._wait_for_frame(delay):
                        break
                    if time.monotonic() < deadline - 1e-3:  # a viewer came: its rate from now on
                        deadline = time.monotonic()
                        continue
                try:
                    frame, capture_t = source.read()
                except Exception as err:  # noqa: BLE001 - any read failure: close, report, retry
                    with self._lock:
                        self._counters["read_errors"] += 1
                    source.close()
                    source = None
                    failures += 1
                    if self._backoff(err, failures, s):
                        failures = 0
                    continue
                now = time.monotonic()
                with self._lock:
                    self._counters["captured"] += 1
                if self_paced and now < deadline - 0.25 * period:
                    # a device faster than the requested fps: drop here, before paying for the encode
                    with self._lock:
                        self._counters["skipped_rate"] += 1
                    continue
                deadline += period
                if deadline < now - period:  # fell more than a frame behind: resync, don't burst
                    deadline = now + period
                    with self._lock:
                        self._counters["late"] += 1
                if failures:
                    log.warning("camera recovered after %d failed attempt(s)", failures)
                    failures = 0
                self._set_status("ok", None)
                self._publish(frame, capture_t, s)
        except Exception:  # noqa: BLE001 - last resort: never let the thread die silently
            log.exception("video capture thread crashed")
            self._set_status("failed", "capture thread crashed (see the server log)")
        finally:
            if source is not None:
                source.close()

    def _wait_for_frame(self, delay: float) -> bool:
        """Wait until the next frame is due; cut short when a viewer arrives (the rate may have gone up
        from the listeners' cap). True when stopping."""
        self._demand.clear()
        self._demand.wait(delay)  # stop() sets it too
        return self._stop.is_set()

    def _open(self, s: dict) -> tuple[CameraSource | None, BaseException | None]:
        source = None
        try:
            source = self._factory(dict(s))
            source.open()
            with self._lock:
                self._source_info = source.describe()
            return source, None
        except Exception as err:  # noqa: BLE001 - reported in the status and retried
            if source is not None:
                source.close()
            with self._lock:
                self._counters["open_errors"] += 1
            return None, err

    def _publish(self, frame: np.ndarray, capture_t: float, s: dict) -> None:
        w, h = s["width"], s["height"]
        if frame.shape[0] != h or frame.shape[1] != w:
            frame = cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
            with self._lock:
                self._counters["scaled"] += 1
        with self._lock:
            self._seq += 1
            seq = self._seq
        listeners = self.frame_listeners
        # only listeners that take the picture itself (vision) and nobody to show it to: no JPEG to
        # encode here and decode again there
        raw_only = bool(listeners) and not self._watched() and all(getattr(f, "raw", None) for f in listeners)
        f = None if raw_only else encode_frame(frame, s["quality"], seq, capture_t)
        for listener in listeners:  # capture thread: a recorder only enqueues
            try:
                if f is None:
                    listener.raw(frame, capture_t, seq)  # type: ignore[attr-defined]
                else:
                    listener(f)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the camera
                log.exception("video frame listener failed")
        if f is None:
            with self._lock:
                self._counters["raw_only"] += 1
                self._capture_times.append(time.monotonic())
            return
        with self._lock:
            self._counters["encoded"] += 1
            self._encode_ms = f.encode_ms
            self._jpeg_bytes = len(f.jpeg)
            self._capture_times.append(time.monotonic())
        self._hand_over(f)

    def _backoff(self, err: BaseException | None, failures: int, s: dict) -> bool:
        """Report a failure and wait before the next attempt; True if it gave up (``failed``)
        and waited for a settings change, so the count starts again."""
        msg = f"{type(err).__name__}: {err}" if err is not None and str(err) else type(err).__name__
        permanent = not isinstance(err, CameraError)
        limit = s["retry_limit"]
        if permanent or (limit and failures > limit):
            why = "configuration error" if permanent else f"gave up after {failures} attempts"
            log.error("camera failed (%s): %s", why, msg)
            self._set_status("failed", msg, failures, None)
            self._kick.wait()  # until the settings change or the service stops
            self._kick.clear()
            return True
        delay = min(s["retry_initial_s"] * 2.0 ** (failures - 1), s["retry_max_s"])
        if failures == 1:
            log.warning("camera unavailable: %s; retrying in %.2f s", msg, delay)
        else:
            log.debug("camera still unavailable (%d): %s", failures, msg)
        self._set_status("retrying", msg, failures, time.monotonic() + delay)
        if self._kick.wait(delay):
            self._kick.clear()
        return False


class RateCappedListener:
    """A frame listener that needs at most ``max_fps`` frames a second (vision at its own rate): while it is
    the only reason to capture, the camera is read that often, not at the video ``fps``. With ``raw``
    (``raw(bgr, capture_t, seq)``), frames that nobody else wants are handed over as pictures, not JPEG."""

    __slots__ = ("fn", "max_fps", "raw")

    def __init__(self, fn: Callable[[EncodedFrame], None], max_fps: float,
                 raw: Callable[[np.ndarray, float, int], None] | None = None) -> None:
        self.fn = fn
        self.max_fps = max_fps
        self.raw = raw

    def __call__(self, frame: EncodedFrame) -> None:
        self.fn(frame)
