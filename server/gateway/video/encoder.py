"""One H.264 (libx264) or VP8 (libvpx) encoder for one quality tier, in a thread of its own.

Why like this (issue 21, notes/networks.md's aiortc section):

- **Once per tier, not per viewer.** aiortc makes one encoder per peer connection (aiortc#1155);
  here every viewer of a tier, WebRTC or H.264 over the websocket, gets the same packets, so an
  extra viewer costs a send, not an encode (CPU per viewer in ``bench/bench_webrtc.py``).
- **libx264 for latency**: ``tune=zerolatency`` (no lookahead, no frame threads), no B-frames,
  baseline profile (every browser decoder, WebCodecs ``avc1.42E0xx``), a short GOP (``gop_s``) and
  IDR frames on request; ``tune=ssim`` too (adaptive quantisation by variance, psy off: +0.005 SSIM).
  Measured offline (the sim camera's 640×480@30 with texture and σ 3 sensor noise, 120 frames,
  ``bench/bench_webrtc.py``): 4.4–4.5 ms a frame at ``veryfast`` on one thread; at the top tier's
  1.5 Mbit/s SSIM 0.892 against the noisy source (0.911 against the noise-free picture), where
  uncapped CRF 23 needs 2.6 Mbit/s for 0.934: the noise is most of what is left, and 0.95 is out
  of reach at ≤ 1.5 Mbit/s with baseline H.264 (``faster``: +0.005 for 1.7× the CPU, not taken).
- **Bitrate changes without a keyframe.** aiortc rebuilds the libx264 context (an IDR, tens of
  kB) on every change over 10 %; FFmpeg's libx264 wrapper reconfigures the running encoder when
  ``bit_rate`` changes (``x264_encoder_reconfig``), so the rate controller can step every
  fraction of a second for free. The VBV buffer (``bufsize``, :data:`VBV_FRAMES` frames at the
  tier's top rate, so the biggest frame is on the link for at most 100 ms) caps how big any frame,
  a keyframe too, can be: a keyframe of 640×480 is 86 KB without it, 16 KB with it. At 1.5 frames
  the encoder undershot to 1.07 Mbit/s (SSIM 0.868, p5 0.756); at 3 it spends 1.34 (0.892, p5 0.818).
- **Keyframe storms avoided.** A keyframe is what a lost packet costs most; every viewer's PLI
  (and every new viewer) asks for one. Requests within ``keyframe_min_interval_s`` of the last
  forced keyframe are merged into one, made when the interval ends (``keyframes_merged``).
- **Off the event loop**: the encode runs in this thread (PyAV releases the GIL inside
  libavcodec), fed by :meth:`offer` from the capture thread (latest wins: a frame that waited while
  the encoder was busy is replaced, ``dropped_busy``), and hands each packet to the loop with
  ``call_soon_threadsafe`` (packets are a chain: none is replaced).
- **A frame older than the budget is not encoded** (``max_frame_age_s``) when it got old waiting
  for this thread (half the budget in the slot): it is dropped here (``dropped_stale``), never
  queued. One offered already old (a starved capture) is still the newest picture and is encoded
  (tiers.py's docstring has the measurement).

Hardware H.264 (a camera that delivers it, ``CameraSource.last_packet()``) skips this class: the
tier ``native`` publishes the camera's access units as they are (:class:`PassthroughTier` in
:mod:`server.gateway.video.tiers`).
"""

from __future__ import annotations

import fractions
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import cv2
import numpy as np

log = logging.getLogger(__name__)

#: RTP's video clock: pts in 90 kHz ticks of capture time
CLOCK_HZ = 90_000
#: the VBV buffer in frames at the tier's top rate (the docstring's measurements: 1.5 undershot, 3 fills the budget)
VBV_FRAMES = 3.0


@dataclass(frozen=True, eq=False)
class EncodedPacket:
    """One encoded picture (an access unit): Annex B for H.264, one frame for VP8."""

    codec: str  # "h264" | "vp8"
    tier: str
    seq: int  # the capture's frame number
    capture_t: float  # time.monotonic() at capture, s (frames.unix_time for people and files)
    pts: int  # capture time in CLOCK_HZ ticks (of time.monotonic(): every tier on one time line)
    keyframe: bool
    data: bytes
    width: int
    height: int
    encode_ms: float
    encoded_t: float  # time.monotonic() when the encoder finished it


@dataclass(frozen=True)
class EncoderSettings:
    """How a tier's encoder runs (from the ``[video]`` table)."""

    preset: str = "veryfast"
    threads: int = 1
    gop_s: float = 2.0
    keyframe_min_interval_s: float = 1.0
    max_frame_age_s: float = 0.25


class TierEncoder:
    """Encodes the newest offered frame at the tier's size and rate; delivers packets to ``deliver``.

    ``deliver(packet)`` is called **in the encoder thread**; the tier set hands it to the loop.
    """

    def __init__(self, name: str, codec: str, width: int, height: int, fps: float, bitrate_bit_s: int,
                 max_bitrate_bit_s: int, settings: EncoderSettings, deliver: Callable[[EncodedPacket], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        if codec not in ("h264", "vp8"):
            raise ValueError(f"codec must be h264 or vp8, not {codec!r}")
        self.name, self.codec, self.width, self.height, self.fps = name, codec, width, height, float(fps)
        self.settings = settings
        self._deliver = deliver
        self._clock = clock
        self._max_bitrate = int(max_bitrate_bit_s)
        self._bitrate = int(bitrate_bit_s)
        self._cond = threading.Condition()
        self._frame: tuple[np.ndarray, float, int, float] | None = None
        self._stop = False
        self._keyframe_wanted = False
        self._keyframe_due_at = 0.0  # no forced keyframe before this (monotonic)
        self._last_forced = -1e9
        self._next_t = 0.0  # capture time of the next frame to take (the tier's rate)
        self._thread: threading.Thread | None = None
        self.counters = {"encoded": 0, "keyframes": 0, "keyframes_forced": 0, "keyframe_requests": 0,
                         "keyframes_merged": 0, "dropped_busy": 0, "dropped_rate": 0, "dropped_stale": 0,
                         "bytes": 0, "bitrate_changes": 0, "errors": 0}
        self.encode_ms = 0.0
        self.last_packet_bytes = 0

    # ---------------------------------------------------------------- control (any thread)
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"video-enc-{self.name}-{self.codec}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)

    @property
    def bitrate_bit_s(self) -> int:
        return self._bitrate

    def set_bitrate(self, bit_s: int) -> None:
        """The target from the rate controller, within the tier's top rate; applied before the next frame."""
        bit_s = int(max(50_000, min(bit_s, self._max_bitrate)))
        with self._cond:
            if bit_s != self._bitrate:
                self._bitrate = bit_s

    def request_keyframe(self) -> None:
        """A viewer needs a keyframe (a PLI, a new viewer, a stream it had to drop). Merged into one
        per ``keyframe_min_interval_s``."""
        with self._cond:
            self.counters["keyframe_requests"] += 1
            if self._keyframe_wanted:
                self.counters["keyframes_merged"] += 1
            self._keyframe_wanted = True
            self._cond.notify_all()

    def offer(self, frame_bgr: np.ndarray, capture_t: float, seq: int) -> None:
        """The capture thread's newest frame (never blocks; a frame still waiting is replaced)."""
        with self._cond:
            if self._frame is not None:
                self.counters["dropped_busy"] += 1
            self._frame = (frame_bgr, capture_t, seq, self._clock())
            self._cond.notify_all()

    def to_json(self) -> dict[str, Any]:
        with self._cond:
            c = dict(self.counters)
        return {"name": self.name, "codec": self.codec, "width": self.width, "height": self.height,
                "fps": self.fps, "bitrate_bit_s": self._bitrate, "encode_ms": round(self.encode_ms, 3), **c}

    # ---------------------------------------------------------------- the thread
    def _open(self, bitrate: int):
        import av  # here, not at import: the gateway loads without PyAV when video is off

        if self.codec == "h264":
            ctx = av.CodecContext.create("libx264", "w")
        else:
            ctx = av.CodecContext.create("libvpx", "w")
        ctx.width, ctx.height = self.width, self.height
        ctx.pix_fmt = "yuv420p"
        ctx.time_base = fractions.Fraction(1, CLOCK_HZ)
        ctx.framerate = fractions.Fraction(round(self.fps * 1000), 1000)
        ctx.bit_rate = bitrate
        ctx.gop_size = max(1, round(self.settings.gop_s * self.fps))
        ctx.max_b_frames = 0
        bufsize = int(VBV_FRAMES * self._max_bitrate / self.fps)
        if self.codec == "h264":
            ctx.options = {"preset": self.settings.preset, "tune": "zerolatency,ssim", "profile": "baseline",
                           "threads": str(self.settings.threads), "maxrate": str(self._max_bitrate),
                           "bufsize": str(bufsize)}
        else:
            ctx.options = {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "0",
                           "threads": str(self.settings.threads), "maxrate": str(self._max_bitrate),
                           "bufsize": str(bufsize), "undershoot-pct": "95", "static-thresh": "1"}
            ctx.qmin, ctx.qmax = 4, 56
        ctx.open()
        return ctx

    def _next(self) -> tuple[np.ndarray, float, int, bool, int] | None:
        """Wait for the next frame to encode; None when stopping."""
        with self._cond:
            while True:
                if self._stop:
                    return None
                if self._frame is not None:
                    frame, capture_t, seq, offered_t = self._frame
                    self._frame = None
                    if capture_t < self._next_t - 0.25 / self.fps:  # faster than the tier's rate
                        self.counters["dropped_rate"] += 1
                        continue
                    self._next_t = max(self._next_t + 1.0 / self.fps, capture_t)
                    now_t = self._clock()
                    if (now_t - capture_t > self.settings.max_frame_age_s
                            and now_t - offered_t > self.settings.max_frame_age_s / 2):
                        self.counters["dropped_stale"] += 1  # it waited here: this thread is behind
                        continue
                    force = False
                    now = time.monotonic()
                    if self._keyframe_wanted and now - self._last_forced >= self.settings.keyframe_min_interval_s:
                        force, self._keyframe_wanted, self._last_forced = True, False, now
                    return frame, capture_t, seq, force, self._bitrate
                self._cond.wait(0.5)

    def _run(self) -> None:
        import av

        ctx = None
        applied = 0
        try:
            while True:
                job = self._next()
                if job is None:
                    return
                frame, capture_t, seq, force, bitrate = job
                t0 = time.perf_counter()
                try:
                    if ctx is None:
                        ctx = self._open(bitrate)
                        applied = bitrate
                    elif bitrate != applied:
                        ctx.bit_rate = bitrate  # reconfigured in place by libx264: no keyframe
                        applied = bitrate
                        self.counters["bitrate_changes"] += 1
                    if frame.shape[1] != self.width or frame.shape[0] != self.height:
                        frame = cv2.resize(frame, (self.width, self.height), interpolation=cv2.INTER_AREA)
                    yuv = cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420)
                    vf = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
                    # every tier on one time line: a viewer's RTP timestamps run on across a tier change
                    vf.pts = round(capture_t * CLOCK_HZ)
                    vf.time_base = fractions.Fraction(1, CLOCK_HZ)
                    vf.pict_type = av.video.frame.PictureType.I if force else av.video.frame.PictureType.NONE
                    packets = ctx.encode(vf)
                except Exception:  # noqa: BLE001 - a broken frame must not end the tier
                    log.exception("video encoder %s/%s failed; reopening", self.name, self.codec)
                    self.counters["errors"] += 1
                    ctx = None
                    continue
                ms = (time.perf_counter() - t0) * 1e3
                for p in packets:
                    data = bytes(p)
                    key = bool(p.is_keyframe)
                    pkt = EncodedPacket(self.codec, self.name, seq, capture_t, int(p.pts if p.pts is not None else vf.pts),
                                        key, data, self.width, self.height, ms, self._clock())
                    with self._cond:
                        self.counters["encoded"] += 1
                        self.counters["bytes"] += len(data)
                        if key:
                            self.counters["keyframes"] += 1
                            if force:
                                self.counters["keyframes_forced"] += 1
                            elif self._keyframe_wanted:  # a GOP's keyframe answers the waiting request
                                self._keyframe_wanted = False
                                self._last_forced = time.monotonic()
                                self.counters["keyframes_merged"] += 1
                    self.encode_ms = ms
                    self.last_packet_bytes = len(data)
                    self._deliver(pkt)
        except Exception:  # noqa: BLE001 - last resort: never die silently
            log.exception("video encoder %s/%s crashed", self.name, self.codec)
