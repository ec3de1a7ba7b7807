"""The sim camera's H.264 mode (``[video] format = "h264"``): a stand-in for a camera's hardware encoder.

Cameras with an H.264 encoder of their own (a Raspberry Pi camera through its ISP, UVC cameras with
H.264, RTSP cameras) deliver access units, not pictures; the gateway then sends them on as tier
``native`` without decoding or encoding them (server/gateway/video/tiers.py). There is no such camera
here, so the sim camera makes one: each rendered picture is encoded by :class:`H264Sensor` in a thread
of its own (as the camera's encoder is a chip of its own; libx264 releases the GIL), at a fixed
bitrate (the camera's, which no viewer changes), with a keyframe every ``gop_s`` and on request (the
gateway forwards the viewers' keyframe requests: a PLI, a new viewer).

Not pure, unlike :mod:`sim.camera`: it owns a thread and an encoder.
"""

from __future__ import annotations

import fractions
import threading
import time

import cv2
import numpy as np

#: the camera's bitrate: bits per pixel per frame (640×480@30 → 0.92 Mbit/s, 320×240@15 → 0.12)
BITS_PER_PIXEL = 0.1


class H264Sensor:
    """Encodes the camera's pictures to H.264 (Annex B, baseline, no B-frames) in its own thread."""

    def __init__(self, width: int, height: int, fps: float, *, gop_s: float = 2.0) -> None:
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.bitrate_bit_s = int(BITS_PER_PIXEL * width * height * fps)
        self.gop_s = gop_s
        self._cond = threading.Condition()
        self._job: tuple[np.ndarray, float] | None = None
        self._result: tuple[bytes, bool] | None = None
        self._key_wanted = False
        self._stop = False
        self.counters = {"frames": 0, "keyframes": 0, "keyframe_requests": 0}
        self._thread = threading.Thread(target=self._run, name="sim-camera-h264", daemon=True)
        self._thread.start()

    def request_keyframe(self) -> None:
        with self._cond:
            self._key_wanted = True
            self.counters["keyframe_requests"] += 1

    def encode(self, frame_bgr: np.ndarray, capture_t: float, timeout_s: float = 5.0) -> tuple[bytes, bool] | None:
        """The access unit of ``frame_bgr`` (``(annexb, keyframe)``), or None if the encoder holds it back
        or does not answer within ``timeout_s``. Blocks the caller (the capture thread), not the encoder."""
        with self._cond:
            self._job, self._result = (frame_bgr, capture_t), None
            self._cond.notify_all()
            deadline = time.monotonic() + timeout_s
            while self._result is None and not self._stop:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            result, self._result = self._result, None
        return result if result and result[0] else None

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _open(self):
        import av

        ctx = av.CodecContext.create("libx264", "w")
        ctx.width, ctx.height, ctx.pix_fmt = self.width, self.height, "yuv420p"
        ctx.time_base = fractions.Fraction(1, 90_000)
        ctx.framerate = fractions.Fraction(round(self.fps * 1000), 1000)
        ctx.bit_rate = self.bitrate_bit_s
        ctx.gop_size = max(1, round(self.gop_s * self.fps))
        ctx.max_b_frames = 0
        ctx.options = {"preset": "veryfast", "tune": "zerolatency", "profile": "baseline", "threads": "1",
                       "maxrate": str(self.bitrate_bit_s), "bufsize": str(int(3 * self.bitrate_bit_s / self.fps))}
        ctx.open()
        return ctx

    def _run(self) -> None:
        import av

        ctx = None
        while True:
            with self._cond:
                while self._job is None and not self._stop:
                    self._cond.wait(0.5)
                if self._stop:
                    return
                (frame, capture_t), self._job = self._job, None
                force, self._key_wanted = self._key_wanted, False
            out = b""
            key = False
            try:
                if ctx is None:
                    ctx = self._open()
                if frame.shape[1] != self.width or frame.shape[0] != self.height:
                    frame = cv2.resize(frame, (self.width, self.height), interpolation=cv2.INTER_AREA)
                vf = av.VideoFrame.from_ndarray(cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420), format="yuv420p")
                vf.pts = round(capture_t * 90_000)
                vf.time_base = fractions.Fraction(1, 90_000)
                vf.pict_type = av.video.frame.PictureType.I if force else av.video.frame.PictureType.NONE
                packets = ctx.encode(vf)
                out = b"".join(bytes(p) for p in packets)
                key = any(p.is_keyframe for p in packets)
            except Exception:  # noqa: BLE001 - a broken frame: none this time, a new encoder next time
                ctx = None
            with self._cond:
                if out:
                    self.counters["frames"] += 1
                    self.counters["keyframes"] += int(key)
                self._result = (out, key)
                self._cond.notify_all()
