"""One encoded frame: JPEG once, wrapped for the websocket and the MJPEG stream.

Wire format of ``/ws/video`` (server → client): binary, 4-byte big-endian header length
``n``, ``n`` bytes of UTF-8 JSON header ``{"type": "frame", "seq", "capture_t", "mono_t", "width",
"height", "encode_ms", "bytes"}``, then the JPEG. ``mono_t``: the capture on the robot computer's
monotonic clock (s; the clock of the snapshot's ``mono_t``, whose offset a client has from its
websocket's ``pong``): ages are computed on it. ``capture_t``: the same instant as Unix time (for
people and files).

Inside the gateway every capture time is monotonic (the camera's ``read()``, :class:`EncodedFrame`,
the encoders' packets); :func:`unix_time` turns one into Unix time where it leaves for people or files.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass

import cv2
import numpy as np

from drivers.camera.base import CameraError


def unix_time(mono_t: float) -> float:
    """A ``time.monotonic()`` stamp as Unix time, by the clocks' offset now (a wall-clock step moves
    the result, never an age computed on ``mono_t``).

    >>> abs(unix_time(time.monotonic()) - time.time()) < 1.0
    True
    """
    return mono_t + (time.time() - time.monotonic())


@dataclass(eq=False)
class EncodedFrame:
    """One frame, encoded once; ``message`` is the ready-made websocket payload. ``capture_t``:
    ``time.monotonic()`` at capture."""

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
            f"X-Frame-Seq: {self.seq}\r\n{capture_headers(self.capture_t)}\r\n"
        ).encode()
        return head + jpeg + b"\r\n"


def capture_headers(capture_t: float) -> str:
    """The HTTP header lines of a picture's capture time: ``X-Capture-Time`` (Unix s) and
    ``X-Capture-Mono`` (the robot's monotonic s, as the websocket header's ``mono_t``)."""
    return f"X-Capture-Time: {unix_time(capture_t):.6f}\r\nX-Capture-Mono: {capture_t:.6f}\r\n"


def encode_frame(frame_bgr: np.ndarray, quality: int, seq: int, capture_t: float) -> EncodedFrame:
    """JPEG-encode and wrap in the ``/ws/video`` binary format (see the module docstring); ``capture_t``
    is ``time.monotonic()`` at capture."""
    t0 = time.perf_counter()
    ok, buf = cv2.imencode(".jpg", frame_bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise CameraError("JPEG encoding failed")
    encode_ms = (time.perf_counter() - t0) * 1e3
    h, w = frame_bgr.shape[:2]
    header = json.dumps(
        {"type": "frame", "seq": seq, "capture_t": round(unix_time(capture_t), 6), "mono_t": capture_t,
         "width": w, "height": h,
         "encode_ms": round(encode_ms, 3), "bytes": int(buf.size)},
        separators=(",", ":"),
    ).encode()
    message = b"".join((len(header).to_bytes(4, "big"), header, buf.tobytes()))
    return EncodedFrame(seq, capture_t, w, h, encode_ms, message, 4 + len(header))
