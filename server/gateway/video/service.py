"""The video service: one camera, encoded once per kind of viewer, handed to every viewer fresh.

Pipeline::

                                     ┌─▶ JPEG once ─▶ latest slot ─▶ /ws/video (credits), MJPEG, snapshots
    Capture ─▶ scale to width×height ┼─▶ tier encoders (one per tier × codec with viewers) ─▶ per-viewer
    (capture thread, capture.py)     │    (their threads, encoder.py)                           streams
                                     └─▶ frame listeners (vision, the recorder)                 (tiers.py)

- The capture thread reads the source when somebody needs frames (a JPEG viewer, a snapshot, an
  encoded stream, a listener), at the highest rate any of them needs.
- **JPEG is encoded only when something takes JPEG** (a JPEG viewer, a snapshot, the recorder):
  a WebRTC or H.264 viewer costs no JPEG encode. A frame that nobody shows but vision wants goes to
  vision as a picture (``raw_only``), never encoded and decoded again.
- The JPEG goes to the loop through a :class:`~server.gateway.video.handover.LatestSlot` (latest
  wins, counted as ``coalesced``), and each JPEG viewer has one credit (viewers.py).
- The same BGR frame is offered to every running tier encoder (:class:`~server.gateway.video.tiers.TierSet`).
- Camera failures stay in the capture thread (capture.py); the status goes to every viewer.

Wire formats: docs/video.md.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from typing import Any, Callable, Mapping

import cv2
import numpy as np

from drivers.camera.base import CameraSource
from drivers.errors import DriverError
from server.gateway.video.capture import Capture
from server.gateway.video.encoder import CLOCK_HZ, EncodedPacket, EncoderSettings
from server.gateway.video.frames import EncodedFrame, encode_frame
from server.gateway.video.handover import LatestSlot
from server.gateway.video.ratecontrol import RateSettings
from server.gateway.video.settings import RUNTIME_LIMITS, validate_runtime_settings, validate_video_settings
from server.gateway.video.tiers import NATIVE, Subscription, Tier, TierSet
from server.gateway.video.viewers import VideoViewer, ViewerRegistry

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


def tiers_of(settings: Mapping[str, Any]) -> list[Tier]:
    return [Tier(t.name, t.width, t.height, t.fps, t.min_bitrate_bit_s, t.max_bitrate_bit_s)
            for t in settings["tiers"]]


class VideoService:
    """Owns the capture, the latest JPEG, the JPEG viewers and the tier encoders.

    ``source_factory(settings)`` returns an unopened :class:`CameraSource` for
    the current settings (the validated ``[video]`` table with the run-time
    values); it is called again for every reopen. Start and stop it from the
    event loop (:func:`~server.gateway.video.routes.setup_video` does that in ``cleanup_ctx``).
    """

    def __init__(self, source_factory: Callable[[dict], CameraSource], settings: Mapping[str, Any]) -> None:
        self._settings = validate_video_settings(settings)
        s = self._settings
        self._capture = Capture(source_factory, self._settings, wanted=self._wanted, rate=self.capture_fps,
                                on_frame=self._on_frame, on_status=self._notify_status)
        self._lock = self._capture.lock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slot = LatestSlot(None, self._take_jpeg)
        self.latest: EncodedFrame | None = None
        self._loop_seq = 0
        self._viewers = ViewerRegistry()
        self._jpeg_viewers = False  # read by the capture thread: a bool, set on the loop
        self._seq = 0
        self._counters = {"encoded": 0, "raw_only": 0, "scaled": 0}
        self._encode_ms = 0.0
        self._jpeg_bytes = 0
        self._capture_times: collections.deque[float] = collections.deque(maxlen=121)  # 2 s at 60 fps
        #: called in the capture thread with every encoded frame (must not block: e.g. a recorder's enqueue);
        #: while there is one, frames are captured even with no viewer. A listener with a ``max_fps``
        #: attribute (see :class:`~server.gateway.video.listener.RateCappedListener`) needs no more than
        #: that: while only such listeners want frames, the camera is read at the highest of their rates instead of ``fps``
        self.frame_listeners: list[Callable[[EncodedFrame], None]] = []
        self._demand_until = 0.0
        self.tiers = TierSet(tiers_of(s), EncoderSettings(s["h264_preset"], s["encoder_threads"], s["gop_s"],
                                                          s["keyframe_min_interval_s"], s["max_frame_age_s"]))
        self.tiers.on_demand = self._capture.demand.set
        self.tiers.set_capture(s["width"], s["height"], s["fps"])  # no tier above the capture (tiers.py)
        self.tiers.on_native_keyframe = self._capture.request_keyframe
        self._native_seen = False
        if s["passthrough"] and s["source"] == "sim" and s["format"] == "h264":
            # known before the first frame: the first viewer starts on the camera's stream, no encoder of ours
            self._declare_native(s["width"], s["height"])
        self.rate_settings = RateSettings(share=s["rate_share"])
        #: the bench's plain aiortc peer encodes raw frames itself: while keep_raw > 0 the newest is kept here
        self.keep_raw = 0
        self.latest_raw: tuple[np.ndarray, float] | None = None

    # ---------------------------------------------------------------- lifecycle (event loop)
    @property
    def _thread(self) -> threading.Thread | None:
        return self._capture.thread

    def start(self) -> None:
        """Start the capture thread (call on the event loop). Does nothing when ``enabled`` is false."""
        self._loop = asyncio.get_running_loop()
        self._slot.bind(self._loop)
        self.tiers.bind(self._loop)
        if self._capture.thread is not None:
            return
        if not self._settings["enabled"]:
            self._capture.set_status("stopped", "video is disabled in the config ([video] enabled = false)")
            return
        self._capture.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop and join the capture thread and the encoders (blocking: call it in a worker thread)."""
        self._capture.stop(timeout_s)
        self.tiers.stop()

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
            w, h, fps = self._settings["width"], self._settings["height"], self._settings["fps"]
        self.tiers.set_capture(w, h, fps)
        self._capture.settings_changed()
        log.info("video settings changed: %s", changes)
        self._notify_status()
        return self.runtime_settings()

    # ---------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        return self._capture.status()

    def counters(self) -> dict[str, Any]:
        with self._lock:
            c = dict(self._capture.counters)
            c.update(self._counters)
            ts = list(self._capture_times)
            c["encode_ms"] = round(self._encode_ms, 3)
            c["jpeg_bytes"] = self._jpeg_bytes
            c["seq"] = self._seq
            fps = self._settings["fps"]
        c["capture_fps"] = self.capture_fps(fps) if self._wanted() else 0.0  # the rate aimed at now
        recent = [t for t in ts if t >= time.monotonic() - 2.0]  # a stalled camera reads 0, not its old rate
        n = len(recent)
        c["coalesced"] = self._slot.coalesced
        c["fps_measured"] = round((n - 1) / (recent[-1] - recent[0]), 2) if n > 1 and recent[-1] > recent[0] else 0.0
        return c

    def describe(self) -> dict[str, Any]:
        """The ``GET /api/video`` body: status, settings, source, counters, clients and the encoders."""
        with self._lock:
            source = dict(self._capture.source_info)
            kind = self._settings["source"]
            enabled = self._settings["enabled"]
        return {
            "status": self.status(),
            "settings": self.runtime_settings(),
            "limits": {k: list(v) for k, v in RUNTIME_LIMITS.items()},
            "source": {"type": kind, "enabled": enabled, **source},
            "counters": self.counters(),
            "clients": [c.to_json() for c in self._viewers.all()],
            "encoded": self.tiers.to_json(),
        }

    def status_message(self) -> str:
        """The ``{"type": "status"}`` text message for websocket clients."""
        return json.dumps({"type": "status", "data": {**self.status(), "settings": self.runtime_settings()}})

    # ---------------------------------------------------------------- demand
    def _watched(self) -> bool:
        """A JPEG viewer is connected or a snapshot was asked for: JPEG at ``fps``."""
        return self._jpeg_viewers or time.monotonic() < self._demand_until

    def _wanted(self) -> bool:
        return self._watched() or bool(self.frame_listeners) or bool(self._viewers) or self.tiers.wanted()

    def capture_fps(self, fps: float) -> float:
        """The rate to read the camera at: ``fps`` for a viewer or a snapshot, else what the listeners need."""
        if self._watched() or self._viewers or self.tiers.wanted():
            return fps
        caps = [getattr(f, "max_fps", None) for f in self.frame_listeners]
        if not caps or None in caps:
            return fps
        return min(fps, max(caps))

    def want_frames(self, for_s: float = 2.0) -> None:
        """Capture for at least ``for_s`` (a snapshot request with no viewer connected)."""
        self._demand_until = max(self._demand_until, time.monotonic() + for_s)
        self._capture.demand.set()

    # ---------------------------------------------------------------- viewers (event loop)
    def add_client(self, kind: str, remote: str | None) -> VideoViewer:
        first = self.latest.seq if self.latest is not None else self._loop_seq + 1
        c = self._viewers.add(kind, remote, first)
        self._jpeg_viewers = self._viewers.any_jpeg()
        self._capture.demand.set()
        return c

    def remove_client(self, client: VideoViewer) -> None:
        self._viewers.remove(client)
        self._jpeg_viewers = self._viewers.any_jpeg()
        if client.stream is not None:
            client.stream.close()

    def clients(self) -> list[VideoViewer]:
        return self._viewers.all()

    def ack(self, client: VideoViewer, seq: int) -> None:
        """A websocket client showed frame ``seq``: give its credit back."""
        if client.in_flight is not None and seq >= client.in_flight:
            client.in_flight = None
            client.in_flight_since = None
            client.acked += 1
            client.wake.set()

    def subscribe(self, codec: str, tier: str | None = None) -> Subscription:
        """An encoded stream (``h264`` or ``vp8``) starting at ``tier`` (default: the best)."""
        sub = self.tiers.subscribe(codec, tier)
        self._capture.demand.set()
        return sub

    # ---------------------------------------------------------------- the capture thread's frames
    def _on_frame(self, frame: np.ndarray, capture_t: float, packet: Any) -> None:
        s = self._settings  # read without the lock: the capture thread is its only reader of width/height
        w, h = s["width"], s["height"]
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._capture_times.append(time.monotonic())
        if packet is not None:
            self._on_native(packet, frame, capture_t, seq)
        if frame.shape[0] != h or frame.shape[1] != w:
            frame = cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
            with self._lock:
                self._counters["scaled"] += 1
        self.tiers.offer(frame, capture_t, seq)
        if self.keep_raw:
            self.latest_raw = (frame, capture_t)
        listeners = self.frame_listeners
        takers = listeners or self.tiers.wanted()  # with neither (the frame read right after open): JPEG
        if takers and not self._watched() and all(getattr(f, "raw", None) for f in listeners):
            # nobody takes JPEG: vision gets the picture itself (no encode here and decode there)
            for listener in listeners:
                try:
                    listener.raw(frame, capture_t, seq)  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001 - a listener's bug must not stop the camera
                    log.exception("video frame listener failed")
            if listeners:
                with self._lock:
                    self._counters["raw_only"] += 1
            return
        f = encode_frame(frame, s["quality"], seq, capture_t)
        for listener in listeners:  # capture thread: a recorder only enqueues
            try:
                listener(f)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the camera
                log.exception("video frame listener failed")
        with self._lock:
            self._counters["encoded"] += 1
            self._encode_ms = f.encode_ms
            self._jpeg_bytes = len(f.jpeg)
        self._slot.put(f)

    def _on_native(self, packet: Any, frame: np.ndarray, capture_t: float, seq: int) -> None:
        """The camera delivered its own H.264 (``CameraSource.last_packet()``): tier ``native``."""
        data, keyframe = packet
        if not self._native_seen:
            self._declare_native(frame.shape[1], frame.shape[0])
        # pts on the encoded tiers' time line (capture time in RTP ticks): with 0 for all, every packet had one
        # RTP timestamp and a WebRTC receiver never completed a frame
        pts = round(capture_t * CLOCK_HZ)
        self.tiers.offer_native(EncodedPacket("h264", NATIVE, seq, capture_t, pts, bool(keyframe), bytes(data),
                                              frame.shape[1], frame.shape[0], 0.0, time.monotonic()))

    def _declare_native(self, w: int, h: int) -> None:
        self._native_seen = True
        top = self.tiers.tiers[0]
        self.tiers.native = Tier(NATIVE, w, h, int(self._settings["fps"]), top.max_bitrate_bit_s,
                                 max(top.max_bitrate_bit_s, 8_000_000))
        log.info("the camera delivers H.264 (%dx%d): passed through as tier 'native'", w, h)

    # ---------------------------------------------------------------- thread → loop
    def _take_jpeg(self, frame: EncodedFrame) -> None:
        self._loop_seq = frame.seq
        self._replace_latest(frame)
        self._viewers.wake_all()

    def _replace_latest(self, frame: EncodedFrame | None) -> None:
        prev = self.latest
        if prev is not None:
            self._viewers.count_replaced(prev.seq)
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
        if self.status()["state"] != "ok" and not self._slot.pending():
            self._replace_latest(None)  # no stale picture for snapshots or new viewers
        self._viewers.wake_all(status=True)
