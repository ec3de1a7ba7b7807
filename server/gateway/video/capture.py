"""The capture thread: opens the camera, reads it at the rate somebody needs, retries when it fails.

Why a thread of its own: a camera read blocks (a live device paces itself; a stream may hang for
seconds before FFmpeg's timeout), and neither the event loop nor the control loop may wait on it.
One thread reads the one camera; everything downstream (JPEG once, one H.264/VP8 encoder per
quality tier, vision, the recorder) is fed from here, so the camera is never opened twice.

- **Pacing**: a source that returns at once (a file, the simulator) is read every ``1 / rate``;
  a live device paces itself, and frames that come faster than the rate are dropped here, before
  anybody pays for an encode (``skipped_rate``). Falling more than a frame behind resynchronises
  (``late``) rather than bursting.
- **Idle**: while nothing wants frames the source stays open and nothing is read or rendered (the
  idle CPU of the whole server, ``bench/bench_server.py``); a new viewer wakes the thread at once.
- **Failures** never leave this module: the thread reports ``retrying`` and reopens with
  exponential backoff (``retry_initial_s`` doubling up to ``retry_max_s``); after ``retry_limit``
  consecutive failures (0 = never) or on a configuration error the source cannot recover from, the
  state is ``failed`` until the settings change.

The owner (:class:`~server.gateway.video.service.VideoService`) gives three callbacks, all called
in this thread: ``wanted()`` (capture at all?), ``rate(fps)`` (frames per second now) and
``on_frame(frame_bgr, capture_t, packet)`` (``packet``: the camera's own H.264 access unit when it
delivers one, else None), and ``on_status()`` when the state changes.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

import numpy as np

from drivers.camera.base import CameraError, CameraSource

log = logging.getLogger(__name__)


class Capture:
    """Owns the capture thread, the camera's state and the capture counters."""

    def __init__(self, factory: Callable[[dict], CameraSource], settings: dict[str, Any], *,
                 wanted: Callable[[], bool], rate: Callable[[float], float],
                 on_frame: Callable[[np.ndarray, float, Any], None], on_status: Callable[[], None]) -> None:
        self._factory = factory
        self._settings = settings  # the service's dict, shared under ``lock``
        self.lock = threading.Lock()
        self._settings_dirty = False
        self._stop = threading.Event()
        self._kick = threading.Event()  # settings changed or stopping: end a backoff wait now
        self.demand = threading.Event()  # somebody wants frames (a viewer, a snapshot, an encoder)
        self._thread: threading.Thread | None = None
        self._wanted, self._rate, self._on_frame, self._on_status = wanted, rate, on_frame, on_status
        self._state = "stopped"
        self._error: str | None = "not started"
        self._retries = 0
        self._next_retry_at: float | None = None
        self.source_info: dict[str, Any] = {}
        self.counters = {"captured": 0, "skipped_rate": 0, "late": 0, "read_errors": 0, "open_errors": 0,
                         "source_keyframe_requests": 0}
        self._keyframe_wanted = False  # a viewer of the camera's own H.264 needs a keyframe (any thread)

    # ---------------------------------------------------------------- lifecycle
    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._kick.clear()
        # "retrying" with 0 retries: the first attempt is in progress (a stream may take seconds)
        self.set_status("retrying", None, 0, None)
        self._thread = threading.Thread(target=self._run, name="video-capture", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._kick.set()
        self.demand.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout_s)
            if t.is_alive():
                log.warning("video capture thread did not stop within %.1f s (blocked in the camera?)", timeout_s)
        self.set_status("stopped", None)

    def request_keyframe(self) -> None:
        """Ask the camera for a keyframe of its own H.264 before its next frame (``request_keyframe()`` of
        a source that encodes; merged: one request per frame)."""
        self._keyframe_wanted = True

    def settings_changed(self) -> None:
        """Call after changing the shared settings (under ``lock``): applied before the next frame."""
        with self.lock:
            self._settings_dirty = True
        self._kick.set()

    # ---------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        with self.lock:
            nxt = self._next_retry_at
            return {
                "state": self._state,
                "error": self._error,
                "retries": self._retries,
                "next_retry_s": None if nxt is None else round(max(0.0, nxt - time.monotonic()), 3),
            }

    def set_status(self, state: str, error: str | None, retries: int = 0, next_retry_at: float | None = None) -> None:
        with self.lock:
            changed = (state, error, retries) != (self._state, self._error, self._retries)
            self._state, self._error, self._retries, self._next_retry_at = state, error, retries, next_retry_at
        if changed:
            self._on_status()

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counters[key] = self.counters.get(key, 0) + n

    # ---------------------------------------------------------------- the thread
    def _run(self) -> None:
        source: CameraSource | None = None
        failures = 0
        deadline = time.monotonic()
        try:
            while not self._stop.is_set():
                with self.lock:
                    s = dict(self._settings)
                    dirty, self._settings_dirty = self._settings_dirty, False
                if source is not None and not self._wanted():
                    self.demand.wait(0.5)
                    self.demand.clear()
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
                period = 1.0 / self._rate(s["fps"])
                self_paced = source.self_paced
                if not self_paced:
                    delay = deadline - time.monotonic()
                    if delay > 0 and self._wait_for_frame(delay):
                        break
                    if time.monotonic() < deadline - 1e-3:  # a viewer came: its rate from now on
                        deadline = time.monotonic()
                        continue
                if self._keyframe_wanted and hasattr(source, "request_keyframe"):
                    self._keyframe_wanted = False
                    self.count("source_keyframe_requests")
                    source.request_keyframe()
                try:
                    frame, capture_t = source.read()
                    packet = source.last_packet() if s.get("passthrough", True) else None
                except Exception as err:  # noqa: BLE001 - any read failure: close, report, retry
                    self.count("read_errors")
                    source.close()
                    source = None
                    failures += 1
                    if self._backoff(err, failures, s):
                        failures = 0
                    continue
                now = time.monotonic()
                self.count("captured")
                if self_paced and now < deadline - 0.25 * period:
                    # a device faster than the requested fps: drop here, before paying for the encode
                    self.count("skipped_rate")
                    continue
                deadline += period
                if deadline < now - period:  # fell more than a frame behind: resync, don't burst
                    deadline = now + period
                    self.count("late")
                if failures:
                    log.warning("camera recovered after %d failed attempt(s)", failures)
                    failures = 0
                self.set_status("ok", None)
                self._on_frame(frame, capture_t, packet)
        except Exception:  # noqa: BLE001 - last resort: never let the thread die silently
            log.exception("video capture thread crashed")
            self.set_status("failed", "capture thread crashed (see the server log)")
        finally:
            if source is not None:
                source.close()

    def _wait_for_frame(self, delay: float) -> bool:
        """Wait until the next frame is due; cut short when a viewer arrives (the rate may have gone up
        from the listeners' cap). True when stopping."""
        self.demand.clear()
        self.demand.wait(delay)  # stop() sets it too
        return self._stop.is_set()

    def _open(self, s: dict) -> tuple[CameraSource | None, BaseException | None]:
        source = None
        try:
            source = self._factory(dict(s))
            source.open()
            with self.lock:
                self.source_info = source.describe()
            return source, None
        except Exception as err:  # noqa: BLE001 - reported in the status and retried
            if source is not None:
                source.close()
            self.count("open_errors")
            return None, err

    def _backoff(self, err: BaseException | None, failures: int, s: Mapping[str, Any]) -> bool:
        """Report a failure and wait before the next attempt; True if it gave up (``failed``)
        and waited for a settings change, so the count starts again."""
        msg = f"{type(err).__name__}: {err}" if err is not None and str(err) else type(err).__name__
        permanent = not isinstance(err, CameraError)
        limit = s["retry_limit"]
        if permanent or (limit and failures > limit):
            why = "configuration error" if permanent else f"gave up after {failures} attempts"
            log.error("camera failed (%s): %s", why, msg)
            self.set_status("failed", msg, failures, None)
            self._kick.wait()  # until the settings change or the service stops
            self._kick.clear()
            return True
        delay = min(s["retry_initial_s"] * 2.0 ** (failures - 1), s["retry_max_s"])
        if failures == 1:
            log.warning("camera unavailable: %s; retrying in %.2f s", msg, delay)
        else:
            log.debug("camera still unavailable (%d): %s", failures, msg)
        self.set_status("retrying", msg, failures, time.monotonic() + delay)
        if self._kick.wait(delay):
            self._kick.clear()
        return False
