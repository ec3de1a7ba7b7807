"""An OpenCV ``VideoCapture`` camera: a device index or path, a video file, or a stream URL.

``device`` picks the kind:

- an ``int`` (or a string of digits) is a device index (``/dev/video<N>`` on Linux);
- a string starting with ``/dev/`` is a device path;
- a string with ``://`` is a stream URL (``rtsp://``, ``http://``, …), opened with
  FFmpeg and open/read timeouts so an unreachable host fails instead of hanging;
- anything else is a video file; with ``loop_file`` (default true) it rewinds at
  the end, otherwise the end of the file is a :class:`CameraError`.

Width, height and fps are *requested* with ``CAP_PROP_*``; a device may deliver
another size (the video service scales it) and files and streams deliver what
they contain. The capture time is taken when ``grab()`` returns, before the
(slower) decode in ``retrieve()``. Credentials in a URL never appear in errors
or in :meth:`describe`.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

import cv2
import numpy as np

from drivers.camera.base import CameraError, CameraSettings, CameraSource

log = logging.getLogger(__name__)


def redact(device: int | str) -> str:
    """``device`` as text with any ``user:password@`` removed.

    >>> redact("rtsp://admin:secret@10.0.0.5:554/stream1")
    'rtsp://***@10.0.0.5:554/stream1'
    >>> redact(0)
    '0'
    """
    text = str(device)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<invalid URL>"
    if "@" not in parts.netloc:
        return text
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def source_kind(device: int | str) -> str:
    """``"device"``, ``"stream"`` or ``"file"``.

    >>> [source_kind(d) for d in (0, "2", "/dev/video0", "rtsp://cam/1", "clip.avi")]
    ['device', 'device', 'device', 'stream', 'file']
    """
    if isinstance(device, int) and not isinstance(device, bool):
        return "device"
    if not isinstance(device, str) or not device:
        raise CameraError(f"device must be an index or a non-empty string, not {device!r}")
    if device.isdigit() or device.startswith("/dev/"):
        return "device"
    if "://" in device:
        return "stream"
    return "file"


class OpenCvCamera(CameraSource):
    """``cv2.VideoCapture`` behind :class:`CameraSource`.

    ``settings`` is the ``[video]`` table (``device``, ``width``, ``height``,
    ``fps``, ``loop_file``); keyword arguments override it.
    """

    name = "opencv"

    def __init__(
        self,
        settings: Mapping[str, Any] | CameraSettings | None = None,
        *,
        device: int | str | None = None,
        loop_file: bool | None = None,
        open_timeout_s: float = 5.0,
        read_timeout_s: float = 5.0,
    ) -> None:
        super().__init__(settings)
        table = settings if isinstance(settings, Mapping) else {}
        dev = device if device is not None else table.get("device", 0)
        self.kind = source_kind(dev)
        self.self_paced = self.kind != "file"
        self.device: int | str = int(dev) if self.kind == "device" and isinstance(dev, str) and dev.isdigit() else dev
        self.loop_file = bool(table.get("loop_file", True) if loop_file is None else loop_file)
        self.open_timeout_s = open_timeout_s
        self.read_timeout_s = read_timeout_s
        self._cap: cv2.VideoCapture | None = None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "device": redact(self.device)}
        cap = self._cap
        if cap is not None:
            d["delivered"] = {
                "width": int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
                "height": int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
                "fps": round(float(cap.get(cv2.CAP_PROP_FPS)), 2),
            }
        return d

    # CameraSource ---------------------------------------------------------
    def _open(self) -> None:
        where = f"{self.kind} {redact(self.device)}"
        if self.kind == "file" and not os.path.isfile(self.device):
            raise CameraError(f"no such video file: {self.device}")
        if self.kind == "device" and isinstance(self.device, str) and not os.path.exists(self.device):
            raise CameraError(f"no such camera device: {self.device}")
        params: list[int] = []
        api = cv2.CAP_ANY
        if self.kind == "stream":
            api = cv2.CAP_FFMPEG
            params = [
                cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(self.open_timeout_s * 1000),
                cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(self.read_timeout_s * 1000),
            ]
        try:
            cap = cv2.VideoCapture(self.device, api, params)
        except cv2.error as err:
            raise CameraError(f"cannot open {where}: {err}") from err
        if not cap.isOpened():
            cap.release()
            raise CameraError(f"cannot open {where}")
        self._cap = cap
        if self.kind == "device":
            # keep the driver's queue short: a deep V4L2 queue is latency, not throughput
            cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)
            self._request(self._settings)
        log.info("opened %s (%s)", where, self.describe().get("delivered"))

    def _request(self, s: CameraSettings) -> None:
        cap = self._cap
        if cap is None or self.kind != "device":
            return
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, s.width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, s.height)
        cap.set(cv2.CAP_PROP_FPS, s.fps)

    def _apply(self, settings: CameraSettings) -> None:
        self._request(settings)

    def _read(self) -> tuple[np.ndarray, float]:
        cap = self._cap
        if cap is None:
            raise CameraError("camera is not open")
        ok = cap.grab()
        t = time.monotonic()
        if not ok and self.kind == "file" and self.loop_file:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok = cap.grab()
            t = time.monotonic()
        if not ok:
            if self.kind == "file":
                raise CameraError(f"end of video file {self.device}")
            raise CameraError(f"no frame from {self.kind} {redact(self.device)} (unplugged or stream ended?)")
        ok, frame = cap.retrieve()
        if not ok or frame is None:
            raise CameraError(f"could not decode a frame from {self.kind} {redact(self.device)}")
        if frame.ndim == 2:
            frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
        elif frame.shape[2] == 4:
            frame = cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR)
        return frame, t

    def _close(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()
