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

>>> validate_video_settings({"fps": 15})["fps"]
15
>>> validate_video_settings({"fps": 15.5})
Traceback (most recent call last):
...
ValueError: video.fps must be an integer, not float
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import json
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

import cv2
import numpy as np
from aiohttp import WSCloseCode, WSMsgType, web

from drivers.base import Driver
from drivers.camera.base import CameraError, CameraSource
from drivers.errors import DriverError
from server.errors import ApiError, MalformedError, error_response
from server.ratelimit import TokenBucket
from server.validation import MAX_BODY_BYTES, integer, parse_object, reject_unknown

log = logging.getLogger(__name__)

#: settings the operator may change at run time: key → (min, max), all integers
RUNTIME_LIMITS: dict[str, tuple[int, int]] = {
    "width": (32, 3840),
    "height": (32, 2160),
    "fps": (1, 60),
    "quality": (10, 100),
}

#: the ``[video]`` table's keys and defaults
DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "source": "sim",
    "device": 0,
    "width": 640,
    "height": 480,
    "fps": 30,
    "quality": 70,
    "retry_initial_s": 0.5,
    "retry_max_s": 10.0,
    "retry_limit": 0,
    "loop_file": True,
    # sim camera only
    "hfov_deg": 70.0,
    "mount_height_m": 0.25,
    "mount_forward_m": 0.10,
    "mount_pitch_deg": 0.0,
    "noise_sigma": 0.0,
    "render_process": True,
    # viewers (websocket + MJPEG) at once; more are refused with 503 busy
    "max_viewers": 20,
}

SOURCES = ("sim", "opencv")

_FLOAT_LIMITS: dict[str, tuple[float, float]] = {
    "retry_initial_s": (0.01, 60.0),
    "retry_max_s": (0.01, 3600.0),
    "hfov_deg": (10.0, 170.0),
    "mount_height_m": (0.0, 10.0),
    "mount_forward_m": (-5.0, 5.0),
    "mount_pitch_deg": (-90.0, 90.0),
    "noise_sigma": (0.0, 64.0),
}


def validate_video_settings(table: Mapping[str, Any]) -> dict[str, Any]:
    """Check a ``[video]`` config table and fill in defaults; raises ``ValueError`` naming the key.

    >>> s = validate_video_settings({"source": "opencv", "device": "/dev/video0"})
    >>> s["device"], s["width"], s["retry_max_s"]
    ('/dev/video0', 640, 10.0)
    >>> validate_video_settings({"colour": "red"})
    Traceback (most recent call last):
    ...
    ValueError: video: unknown key(s): colour
    """
    if not isinstance(table, Mapping):
        raise ValueError("video must be a table")
    unknown = sorted(set(table) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"video: unknown key(s): {', '.join(map(str, unknown))}")
    out = dict(DEFAULTS)
    out.update(table)
    for key in ("enabled", "loop_file", "render_process"):
        if not isinstance(out[key], bool):
            raise ValueError(f"video.{key} must be true or false")
    if out["source"] not in SOURCES:
        raise ValueError(f"video.source must be one of {', '.join(SOURCES)}, not {out['source']!r}")
    dev = out["device"]
    if isinstance(dev, bool) or not isinstance(dev, (int, str)) or (isinstance(dev, int) and dev < 0) or dev == "":
        raise ValueError("video.device must be a device index >= 0 or a non-empty path or URL")
    for key, (lo, hi) in RUNTIME_LIMITS.items():
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"video.{key} must be an integer, not {type(v).__name__}")
        if not lo <= v <= hi:
            raise ValueError(f"video.{key}={v} is outside [{lo}, {hi}]")
    v = out["retry_limit"]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError("video.retry_limit must be an integer >= 0 (0 = retry forever)")
    v = out["max_viewers"]
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10000:
        raise ValueError("video.max_viewers must be an integer in [1, 10000]")
    for key, (lo, hi) in _FLOAT_LIMITS.items():
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"video.{key} must be a finite number")
        if not lo <= v <= hi:
            raise ValueError(f"video.{key}={v:g} is outside [{lo:g}, {hi:g}]")
        out[key] = float(v)
    if out["retry_max_s"] < out["retry_initial_s"]:
        raise ValueError("video.retry_max_s must be >= video.retry_initial_s")
    return out


def validate_runtime_settings(obj: Mapping[str, Any]) -> dict[str, int]:
    """Check a ``PUT /api/video`` body: any of width, height, fps, quality as integers in range.

    Raises :class:`server.errors.ValidationError` (422); unknown fields, floats,
    booleans and NaN are refused.
    """
    reject_unknown(dict(obj), RUNTIME_LIMITS)
    return {k: integer(dict(obj), k, lo, hi) for k, (lo, hi) in RUNTIME_LIMITS.items() if k in obj}


def camera_factory(driver: Driver | None = None) -> Callable[[dict], CameraSource]:
    """The usual ``source_factory``: ``source = "sim"`` asks ``driver.camera_source(settings)``,
    ``"opencv"`` builds the registered OpenCV camera from the settings (``device``, …)."""
    from drivers.registry import camera_class

    def make(settings: dict) -> CameraSource:
        if settings["source"] == "sim":
            cam = driver.camera_source(settings) if driver is not None else None
            if cam is None:
                name = getattr(driver, "name", None)
                raise DriverError(f"video.source is 'sim' but driver {name!r} has no camera")
            return cam
        return camera_class(settings["source"])(settings)

    return make


# --------------------------------------------------------------------------- frames and clients


@dataclass(eq=False)
class EncodedFrame:
    """One frame, encoded once; ``message`` is the ready-made websocket payload."""

    seq: int
    capture_t: float
    width: int
    height: int
    encode_ms: float
    message: bytes
    offset: int  # where the JPEG starts in ``message``

    @property
    def jpeg(self) -> memoryview:
        return memoryview(self.message)[self.offset:]

    @functools.cached_property
    def mjpeg_part(self) -> bytes:
        jpeg = self.jpeg
        head = (
            f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n"
            f"X-Frame-Seq: {self.seq}\r\nX-Capture-Time: {self.capture_t:.6f}\r\n\r\n"
        ).encode()
        return head + jpeg + b"\r\n"


def encode_frame(frame_bgr: np.ndarray, quality: int, seq: int, capture_t: float) -> EncodedFrame:
    """JPEG-encode and wrap in the ``/ws/video`` binary format (see the module docstring)."""
    t0 = time.perf_counter()
    ok, buf = cv2.imencode(".jpg", frame_bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise CameraError("JPEG encoding failed")
    encode_ms = (time.perf_counter() - t0) * 1e3
    h, w = frame_bgr.shape[:2]
    header = json.dumps(
        {"type": "frame", "seq": seq, "capture_t": capture_t, "width": w, "height": h,
         "encode_ms": round(encode_ms, 3), "bytes": int(buf.size)},
        separators=(",", ":"),
    ).encode()
    message = b"".join((len(header).to_bytes(4, "big"), header, buf.tobytes()))
    return EncodedFrame(seq, capture_t, w, h, encode_ms, message, 4 + len(header))


MAX_OUTBOX = 16


@dataclass(eq=False)
class Client:
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
        self._clients: dict[int, Client] = {}
        self._ids = itertools.count(1)
        # status, written by the thread under the lock
        self._state = "stopped"
        self._error: str | None = "not started"
        self._retries = 0
        self._next_retry_at: float | None = None
        self._source_info: dict[str, Any] = {}
        self._seq = 0
        self._counters = {
            "captured": 0, "encoded": 0, "skipped_rate": 0, "late": 0,
            "read_errors": 0, "open_errors": 0, "scaled": 0,
        }
        self._encode_ms = 0.0
        self._jpeg_bytes = 0
        self._capture_times: collections.deque[float] = collections.deque(maxlen=121)  # 2 s at 60 fps

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
    def add_client(self, kind: str, remote: str | None) -> Client:
        c = Client(next(self._ids), kind, remote)
        c.first_seq = self.latest.seq if self.latest is not None else self._loop_seq + 1
        self._clients[c.id] = c
        c.wake.set()
        return c

    def remove_client(self, client: Client) -> None:
        self._clients.pop(client.id, None)

    def clients(self) -> list[Client]:
        return list(self._clients.values())

    def ack(self, client: Client, seq: int) -> None:
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
                period = 1.0 / s["fps"]
                self_paced = source.self_paced
                if not self_paced:
                    delay = deadline - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        break
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
        f = encode_frame(frame, s["quality"], seq, capture_t)
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


VIDEO_KEY = web.AppKey("video", VideoService)
_SOCKETS_KEY = web.AppKey("video_sockets", weakref.WeakSet)
_CLOSING_KEY = web.AppKey("video_closing", asyncio.Event)
_STALL_KEY = web.AppKey("video_writer_stall_s", float)


# --------------------------------------------------------------------------- HTTP and websockets


def _api(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Map :class:`ApiError` to the JSON error shape even without the app's error middleware."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return error_response(err)

    return wrapped


@_api
async def _get_video(request: web.Request) -> web.Response:
    return web.json_response(request.app[VIDEO_KEY].describe())


@_api
async def _put_video(request: web.Request) -> web.Response:
    service = request.app[VIDEO_KEY]
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedError(f"body of {request.content_length} bytes is over the {MAX_BODY_BYTES}-byte limit",
                             code="too_large", status=413)
    changes = validate_runtime_settings(parse_object(await request.content.read(MAX_BODY_BYTES + 1)))
    service.update_settings(changes)
    return web.json_response(service.describe())


@_api
async def _snapshot(request: web.Request) -> web.Response:
    service = request.app[VIDEO_KEY]
    f = service.latest
    if f is None:
        st = service.status()
        detail = f": {st['error']}" if st["error"] else ""
        raise ApiError(f"no video frame (camera {st['state']}{detail})", code="no_frame", status=503)
    return web.Response(
        body=bytes(f.jpeg),
        content_type="image/jpeg",
        headers={"Cache-Control": "no-store", "X-Frame-Seq": str(f.seq), "X-Capture-Time": f"{f.capture_t:.6f}"},
    )


def _admit(service: "VideoService", kind: str) -> None:
    """Refuse a viewer beyond ``video.max_viewers`` (503 busy, before the upgrade)."""
    limit = service.settings["max_viewers"]
    if len(service.clients()) >= limit:
        raise ApiError(f"too many video viewers (max {limit}); try again later", code="busy", status=503)


@_api
async def _ws_video(request: web.Request) -> web.WebSocketResponse:
    app = request.app
    service = app[VIDEO_KEY]
    _admit(service, "ws")
    # compress=False: JPEG does not deflate, and per-client compression would undo "encode once"
    ws = web.WebSocketResponse(heartbeat=10.0, compress=False, max_msg_size=4 * 1024)
    await ws.prepare(request)
    app[_SOCKETS_KEY].add(ws)
    client = service.add_client("ws", request.remote)
    client.transport = request.transport
    client.status_dirty = True
    # acks come at most once per frame: allow twice the frame rate, and a burst of a second's worth
    fps = service.runtime_settings()["fps"]
    bucket = TokenBucket(2.0 * fps + 10.0, 2 * fps + 20)
    sender = asyncio.create_task(_ws_sender(ws, client, service), name=f"video-ws-{client.id}")
    try:
        async for msg in ws:
            if not bucket.take():
                if bucket.flooding:
                    log.warning("video viewer %d keeps flooding: closing it", client.id)
                    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"rate limit exceeded")
                    break
                _ws_error(client, "rate_limited", "too many messages: send one ack per frame")
            elif msg.type == WSMsgType.TEXT:
                _ws_receive(msg.data, client, service)
            elif msg.type == WSMsgType.BINARY:
                _ws_error(client, "malformed", "binary messages are not accepted")
            await asyncio.sleep(0)  # a flooding reader yields to every other task
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        service.remove_client(client)
        app[_SOCKETS_KEY].discard(ws)
    return ws


def _ws_error(client: Client, code: str, message: str) -> None:
    if len(client.outbox) == client.outbox.maxlen:
        client.replies_dropped += 1  # the oldest reply goes: the client is not reading them anyway
    client.outbox.append(json.dumps({"type": "error", "error": {"code": code, "message": message}}))
    client.wake.set()


def _ws_receive(data: str, client: Client, service: VideoService) -> None:
    try:
        msg = parse_object(data, max_bytes=4 * 1024)
    except ApiError as err:
        _ws_error(client, err.code, err.message)
        return
    if msg.get("type") != "ack":
        _ws_error(client, "unknown_type", 'expected {"type": "ack", "seq": n}')
        return
    seq = msg.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int):
        _ws_error(client, "wrong_type", "seq must be an integer")
        return
    service.ack(client, seq)


async def _ws_sender(ws: web.WebSocketResponse, client: Client, service: VideoService) -> None:
    """The only writer of ``ws``: status and errors, then at most one unacked frame."""

    async def send(data: str | bytes) -> None:
        client.send_since = time.monotonic()
        await (ws.send_str(data) if isinstance(data, str) else ws.send_bytes(data))
        client.send_since = None

    try:
        while not ws.closed:
            await client.wake.wait()
            client.wake.clear()
            while client.outbox:
                await send(client.outbox.popleft())
            if client.status_dirty:
                client.status_dirty = False
                await send(service.status_message())
            if client.in_flight is not None:
                continue  # no credit: frames replaced meanwhile count as ``dropped``
            f = service.latest
            if f is None or f.seq <= client.last_seq:
                continue
            client.in_flight = client.last_seq = f.seq
            client.in_flight_since = time.monotonic()
            await send(f.message)
            client.sent += 1
    except (ConnectionError, RuntimeError) as err:  # peer went away mid-send
        log.debug("video websocket %d: %s", client.id, err)


@_api
async def _mjpeg(request: web.Request) -> web.StreamResponse:
    app = request.app
    service = app[VIDEO_KEY]
    _admit(service, "mjpeg")
    closing = app[_CLOSING_KEY]
    resp = web.StreamResponse(
        headers={
            "Content-Type": "multipart/x-mixed-replace; boundary=frame",
            "Cache-Control": "no-cache, no-store, must-revalidate",
            "Pragma": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    client = service.add_client("mjpeg", request.remote)
    client.transport = request.transport
    try:
        while not closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            try:
                # wake at least once a second so a viewer that left is noticed while the camera is down
                await asyncio.wait_for(client.wake.wait(), 1.0)
            except asyncio.TimeoutError:
                continue
            client.wake.clear()
            f = service.latest
            if f is None or f.seq <= client.last_seq:
                continue
            if transport.get_write_buffer_size() > 0:
                continue  # the previous frame has not drained: skip it (counted as dropped when replaced)
            client.last_seq = f.seq
            client.send_since = time.monotonic()
            await resp.write(f.mjpeg_part)
            client.send_since = None
            client.sent += 1
    except (ConnectionError, RuntimeError) as err:
        log.debug("mjpeg viewer %d left: %s", client.id, err)
    finally:
        service.remove_client(client)
    return resp


def setup_video(app: web.Application, service: VideoService, writer_stall_s: float = 10.0) -> None:
    """Register the video routes on ``app`` and tie the capture thread to the app's lifetime.

    Routes: ``GET /ws/video``, ``GET /video.mjpeg``, ``GET /api/video/snapshot.jpg``,
    ``GET /api/video``, ``PUT /api/video``.
    """
    app[VIDEO_KEY] = service
    app[_STALL_KEY] = writer_stall_s
    app[_SOCKETS_KEY] = weakref.WeakSet()
    app[_CLOSING_KEY] = asyncio.Event()
    app.router.add_get("/ws/video", _ws_video)
    app.router.add_get("/video.mjpeg", _mjpeg)
    app.router.add_get("/api/video/snapshot.jpg", _snapshot)
    app.router.add_get("/api/video", _get_video)
    app.router.add_put("/api/video", _put_video)
    app.on_shutdown.append(_on_shutdown)
    app.cleanup_ctx.append(_video_ctx)


async def _on_shutdown(app: web.Application) -> None:
    # before the runner waits for handlers: end the long-lived ones now
    app[_CLOSING_KEY].set()
    for c in app[VIDEO_KEY].clients():
        c.wake.set()
    for ws in list(app[_SOCKETS_KEY]):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")


async def _sweep_stuck_viewers(app: web.Application, stall_s: float) -> None:
    """Close every viewer that has blocked progress for ``stall_s``: a send it does not read, or a
    frame it does not ack (it would hold a viewer slot forever, whatever it sends)."""
    service = app[VIDEO_KEY]
    while True:
        await asyncio.sleep(min(1.0, stall_s / 2))
        now = time.monotonic()
        for c in service.clients():
            if c.stuck_for(now) > stall_s:
                log.warning("video viewer %d (%s) made no progress for %.1f s: closing it", c.id, c.kind,
                            c.stuck_for(now))
                service.remove_client(c)
                if c.transport is not None:
                    c.transport.abort()


async def _video_ctx(app: web.Application):
    service = app[VIDEO_KEY]
    service.start()
    sweeper = asyncio.create_task(_sweep_stuck_viewers(app, app[_STALL_KEY]), name="video-sweeper")
    yield
    sweeper.cancel()
    await asyncio.gather(sweeper, return_exceptions=True)
    await asyncio.to_thread(service.stop)
