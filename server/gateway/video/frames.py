"""One encoded frame: JPEG once, wrapped for the websocket and the MJPEG stream.

Wire format of ``/ws/video`` (server → client): binary, 4-byte big-endian header length
``n``, ``n`` bytes of UTF-8 JSON header ``{"type": "frame", "seq", "capture_t", "width",
"height", "encode_ms", "bytes"}`` (``capture_t``: Unix time in s at capture), then the JPEG.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass

import cv2
import numpy as np

from drivers.camera.base import CameraError


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
