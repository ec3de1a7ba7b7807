"""The vision worker: frames from the camera in, results out, at its own rate, in its own thread.

::

    capture thread ─ offer(frame) ─▶ one-slot "latest" ─▶ worker thread: decode, VisionPipeline.process
                      (never blocks)                       at most rate_hz ─▶ on_result(result)

- :meth:`VisionWorker.offer` is a video ``frame_listener``: it runs in the capture thread
  and only swaps the frame into a one-slot mailbox under a lock (a frame not taken yet is
  replaced and counted as ``superseded``), so the camera never waits for vision.
- The worker wakes every ``1/rate_hz``, takes the newest frame if there is one it has not
  seen, decodes it (JPEG → grey at full size for the markers, colour at 1/``floor_scale``
  straight from the DCT for the floor cue), runs the pipeline and calls ``on_result`` in
  its own thread (the gateway hands it to the event loop). A slow frame does not make it
  burst afterwards: the next deadline restarts from now.
- It says what rate it holds: :meth:`stats` gives the measured processing rate over the
  last 2 s (``rate_hz_held``), the time busy per second and ``keeping_up`` (held ≥ 90 %
  of the lower of ``rate_hz`` and the camera's frame rate).

A thread, not a process: OpenCV's detector, ``solvePnP``, the JPEG decoder and the colour
conversions release the GIL, so the Python left per frame (the fix, the channels) is
small; bench/bench_vision.py measures the event loop's lag with the worker on and off.
"""

from __future__ import annotations

import collections
import logging
import statistics
import threading
import time
from typing import Any, Callable

import cv2
import numpy as np

from server.gateway.vision.pipeline import VisionPipeline, VisionResult

log = logging.getLogger(__name__)

_REDUCED = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_COLOR_8}
#: a compressed frame larger than this is refused undecoded (a 3840×2160 JPEG is well under it)
MAX_JPEG_BYTES = 32 * 1024 * 1024
#: a JPEG whose header announces more pixels than this is refused before decoding (memory)
MAX_PIXELS = 3840 * 2160


def jpeg_size(data: bytes | memoryview) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame header, or None if there is none.

    >>> ok, buf = cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))
    >>> jpeg_size(buf.tobytes())
    (64, 48)
    >>> jpeg_size(b"not a jpeg") is None
    True
    """
    b = bytes(data[:65536]) if len(data) > 65536 else bytes(data)
    if b[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 <= len(b):
        if b[i] != 0xFF:
            return None
        marker = b[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = int.from_bytes(b[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # SOFn: precision, height, width
            return int.from_bytes(b[i + 7:i + 9], "big"), int.from_bytes(b[i + 5:i + 7], "big")
        if length < 2:
            return None
        i += 2 + length
    return None


class VisionWorker:
    """Runs ``pipeline`` on the newest offered frame, at most ``rate_hz`` times a second."""

    def __init__(self, pipeline: VisionPipeline, rate_hz: float,
                 on_result: Callable[[VisionResult], None] | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rate_hz > 0:
            raise ValueError("rate_hz must be > 0")
        self.pipeline = pipeline
        self.rate_hz = float(rate_hz)
        self.on_result = on_result
        self.clock = clock
        self.latest: VisionResult | None = None
        self._lock = threading.Lock()
        self._slot: tuple[Any, float, int] | None = None  # (jpeg bytes or BGR array, capture_t, seq)
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counters = {"offered": 0, "superseded": 0, "processed": 0, "errors": 0}
        self._offer_times: collections.deque[float] = collections.deque(maxlen=241)
        self._done: collections.deque[tuple[float, float, float, float]] = collections.deque(maxlen=241)
        self._last_error: str | None = None

    # ---------------------------------------------------------------- capture thread
    def offer(self, frame: Any) -> None:
        """A video ``frame_listener``: hand over an :class:`~server.gateway.video.frames.EncodedFrame`."""
        self._put(frame.jpeg, float(frame.capture_t), int(frame.seq))

    def offer_raw(self, frame_bgr: np.ndarray, capture_t: float, seq: int = 0) -> None:
        """Hand over an undecoded (H, W, 3) BGR frame (a camera source read directly, tests, the bench)."""
        self._put(frame_bgr, float(capture_t), int(seq))

    def _put(self, data: Any, capture_t: float, seq: int) -> None:
        with self._lock:
            if self._slot is not None:
                self._counters["superseded"] += 1
            self._slot = (data, capture_t, seq)
            self._counters["offered"] += 1
            self._offer_times.append(self.clock())
        self._ready.set()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vision", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop and join the thread (blocking: from async code, call it in a worker thread)."""
        self._stop.set()
        self._ready.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout_s)
            if t.is_alive():
                log.warning("vision thread did not stop within %.1f s", timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---------------------------------------------------------------- the worker thread
    def _run(self) -> None:
        period = 1.0 / self.rate_hz
        deadline = self.clock()
        while not self._stop.is_set():
            delay = deadline - self.clock()
            if delay > 0 and self._stop.wait(delay):
                break
            if not self._ready.wait(0.5):
                deadline = self.clock()
                continue
            with self._lock:
                slot, self._slot = self._slot, None
                self._ready.clear()
            if slot is None:
                continue
            started = self.clock()
            self.run_once(*slot)
            deadline = max(deadline + period, started)  # never burst to catch up

    def run_once(self, data: Any, capture_t: float, seq: int = 0) -> VisionResult | None:
        """Decode and process one frame now, in the caller's thread; publish and return the result
        (None when the frame could not be decoded or the pipeline failed; counted as an error)."""
        t0 = self.clock()
        try:
            gray, small = self._decode(data)
            t1 = self.clock()
            result = self.pipeline.process(gray, small, capture_t, seq)
        except Exception as err:  # noqa: BLE001 - a bad frame must not end the worker
            with self._lock:
                self._counters["errors"] += 1
                first = self._last_error is None
                self._last_error = f"{type(err).__name__}: {err}"
            (log.warning if first else log.debug)("vision: frame %d failed: %s", seq, err)
            return None
        t2 = self.clock()
        with self._lock:
            self._counters["processed"] += 1
            self._done.append((t2, t1 - t0, t2 - t1, result.latency_s))
            self._last_error = None
        self.latest = result
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:  # noqa: BLE001 - a consumer's bug must not stop vision
                log.exception("vision result consumer failed")
        return result

    def _decode(self, data: Any) -> tuple[np.ndarray, np.ndarray | None]:
        floor = self.pipeline.floor
        scale = floor.scale if floor is not None else 0
        if isinstance(data, np.ndarray):
            if data.ndim != 3 or data.shape[2] != 3 or data.dtype != np.uint8:
                raise ValueError("a raw frame must be (H, W, 3) uint8 BGR")
            gray = cv2.cvtColor(data, cv2.COLOR_BGR2GRAY)
            small = None
            if scale:
                small = cv2.resize(data, (data.shape[1] // scale, data.shape[0] // scale), interpolation=cv2.INTER_AREA)
            return gray, small
        buf = np.frombuffer(data, dtype=np.uint8)
        if len(buf) > MAX_JPEG_BYTES:
            raise ValueError(f"compressed frame of {len(buf)} bytes is over the {MAX_JPEG_BYTES}-byte limit")
        size = jpeg_size(data)
        if size is None:
            raise ValueError("the frame is not a JPEG (no start-of-frame header)")
        if size[0] * size[1] > MAX_PIXELS or min(size) < 8:
            raise ValueError(f"a {size[0]}×{size[1]} frame is refused (8×8 to {MAX_PIXELS} pixels)")
        gray = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
        if gray is None:
            raise ValueError("the frame is not a decodable JPEG")
        small = None
        if scale:
            small = cv2.imdecode(buf, _REDUCED.get(scale, cv2.IMREAD_COLOR))
            want = (gray.shape[1] // scale, gray.shape[0] // scale)
            if small is not None and (small.shape[1], small.shape[0]) != want:
                small = cv2.resize(small, want, interpolation=cv2.INTER_AREA)
        return gray, small

    # ---------------------------------------------------------------- status
    def stats(self, window_s: float = 2.0) -> dict[str, Any]:
        """Counters and what rate the worker holds over the last ``window_s``."""
        now = self.clock()
        with self._lock:
            c = dict(self._counters)
            done = [d for d in self._done if d[0] >= now - window_s]
            offers = [t for t in self._offer_times if t >= now - window_s]
            last_error = self._last_error
        held = _rate([d[0] for d in done])
        offered = _rate(offers)
        target = min(self.rate_hz, offered) if offered else self.rate_hz
        out: dict[str, Any] = {
            **c, "rate_hz": self.rate_hz, "rate_hz_held": round(held, 2), "camera_fps": round(offered, 2),
            "keeping_up": bool(done) and held >= 0.9 * target, "last_error": last_error,
            "busy_fraction": round(sum(d[1] + d[2] for d in done) / window_s, 3) if done else 0.0,
        }
        if done:
            lat = [d[3] for d in done]
            out.update(decode_ms=round(1e3 * statistics.fmean(d[1] for d in done), 3),
                       process_ms=round(1e3 * statistics.fmean(d[2] for d in done), 3),
                       latency_ms_p50=round(1e3 * statistics.median(lat), 3), latency_ms_max=round(1e3 * max(lat), 3))
        return out


def _rate(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0
