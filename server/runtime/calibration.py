"""The rover's calibrations (magnetometer, UWB ranges): the state file, and the runtime's requests.

The state file (``[server] state_dir`` / ``[calibration] state_file``, JSON) is read at
start-up; a file that cannot be used is named in a warning (log and event log) and ignored,
and the next stored calibration replaces it. It is written atomically (temporary file +
rename), never from the control thread or the event loop; temporaries a killed writer left
behind are removed at start.

* The magnetometer calibration is a behaviour (:mod:`server.runtime.behaviours.magcal`): it
  fits in a worker thread and applies the result in the control thread; this module stores it.
* The UWB range calibration is a plain request: ``(raw, true)`` pairs →
  :func:`robotics.estimation.uwb.fit_range_correction` → applied and stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from robotics.estimation.uwb import fit_range_correction
from server.errors import ConflictError, ValidationError
from server.runtime.behaviours.heading import HeadingBehavior
from server.runtime.behaviours.magcal import MagCalibrationBehavior, fit_or_error
from server.runtime.estimation import EstimationStage
from server.runtime.loop import ControlLoop

log = logging.getLogger(__name__)

STATE_VERSION = 1


def _floats(v: Any, n: int | None, what: str) -> list[float]:
    if not isinstance(v, list) or (n is not None and len(v) != n) or not v or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in v):
        raise ValueError(f"{what} must be a list of {n or 'some'} finite numbers")
    return [float(c) for c in v]


def parse_state(obj: Any) -> dict[str, Any]:
    """Validate the state file's content; returns ``{"magnetometer": ... | None, "uwb": ... | None}``.

    >>> parse_state({"version": 1, "uwb": {"coefficients": [0.98, 0.01]}})["uwb"]["coefficients"]
    [0.98, 0.01]
    >>> parse_state({"version": 1, "magnetometer": {"offset_ut": [1, 2]}})
    Traceback (most recent call last):
    ...
    ValueError: magnetometer.offset_ut must be a list of 3 finite numbers
    """
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.get("version") != STATE_VERSION:
        raise ValueError(f"version must be {STATE_VERSION}, got {obj.get('version')!r}")
    out: dict[str, Any] = {"magnetometer": None, "uwb": None}
    mag = obj.get("magnetometer")
    if mag is not None:
        if not isinstance(mag, dict):
            raise ValueError("magnetometer must be an object")
        offset = _floats(mag.get("offset_ut"), 3, "magnetometer.offset_ut")
        scale = _floats(mag.get("scale"), 3, "magnetometer.scale")
        if min(scale) <= 0:
            raise ValueError("magnetometer.scale must be > 0")
        out["magnetometer"] = {**mag, "offset_ut": offset, "scale": scale}
    uwb = obj.get("uwb")
    if uwb is not None:
        if not isinstance(uwb, dict):
            raise ValueError("uwb must be an object")
        out["uwb"] = {**uwb, "coefficients": _floats(uwb.get("coefficients"), None, "uwb.coefficients")}
    return out


def read_state_file(path: Path) -> dict[str, Any] | None:
    """The file's calibrations, None when there is no file; ValueError naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read: {err}") from err
    try:
        obj = json.loads(text)
    except ValueError as err:
        raise ValueError(f"not valid JSON: {err}") from err
    return parse_state(obj)


def clean_orphaned_temporaries(path: Path) -> list[Path]:
    """Remove temporary files a killed writer left next to ``path`` (``<name>.*.tmp``); returns them.

    A ``kill -9`` between ``mkstemp`` and ``os.replace`` leaves one behind; nothing else
    ever removes it."""
    removed = []
    for tmp in path.parent.glob(path.name + ".*.tmp"):
        try:
            tmp.unlink()
            removed.append(tmp)
        except OSError as err:
            log.warning("cannot remove orphaned temporary file %s: %s", tmp, err)
    return removed


def write_state_file(path: Path, calibrations: dict[str, Any]) -> None:
    """Write atomically: a temporary file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"version": STATE_VERSION, **calibrations}, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise



# ---------------------------------------------------------------------- the service
class Calibrations:
    """Owns the calibrations (runtime process), the state file and the navigation requests.

    Runs on the runtime's asyncio thread; the control thread only calls
    :meth:`fit_async` and :meth:`mag_result_threadsafe` (hand-overs)."""

    def __init__(self, loop: ControlLoop, stage: EstimationStage | None, profile: Any) -> None:
        self.loop = loop
        self.stage = stage
        self.profile = profile
        self.path = Path(profile.server.state_dir) / profile.calibration.state_file
        self.calibrations: dict[str, Any] = {"magnetometer": None, "uwb": None}
        self.ignored_file_reason: str | None = None
        self._aio: asyncio.AbstractEventLoop | None = None
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self.max_rate = self.brake = 0.0  # without an estimator there is nothing to calibrate (requests: 409)
        if stage is not None:  # the calibrations turn the robot in place: a rover, with its [limits]
            lim = profile.limits
            self.max_rate = float(lim.angular_rad_s)
            # plan with half the loop's angular ramp, seen on the driver's clock
            self.brake = 0.5 * min(lim.angular_accel_rad_s2, lim.angular_decel_rad_s2) / stage.time_scale

    # ---- start-up and shut-down
    async def start(self) -> None:
        self._aio = asyncio.get_running_loop()
        removed = await asyncio.to_thread(clean_orphaned_temporaries, self.path)
        if removed:
            log.info("removed %d orphaned temporary file(s) of %s: %s", len(removed), self.path,
                     ", ".join(p.name for p in removed))
        try:
            loaded = await asyncio.to_thread(read_state_file, self.path)
        except ValueError as err:
            self.ignored_file_reason = str(err)
            message = f"calibration state file {self.path} is unusable ({err}); ignoring it: running uncalibrated"
            log.warning("%s", message)
            self.loop.emit_now("calibration_ignored", message, values={"path": str(self.path)})
            loaded = None
        if loaded:
            with self.loop.lock:
                self._apply(loaded)
            self.calibrations.update({k: v for k, v in loaded.items() if v is not None})
            log.info("calibrations loaded from %s: %s", self.path,
                     ", ".join(k for k, v in loaded.items() if v is not None) or "none")

    async def stop(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _apply(self, calibrations: dict[str, Any]) -> None:
        """Give calibrations to the estimator (caller holds the control loop's lock)."""
        st = self.stage
        if st is None:
            return
        mag = calibrations.get("magnetometer")
        if mag is not None and st.attitude.has_mag:
            st.set_mag_calibration(mag["offset_ut"], mag["scale"])
        uwb = calibrations.get("uwb")
        if uwb is not None and st.position.has_uwb:
            st.position.set_range_correction(uwb["coefficients"])

    # ---- persistence (event loop → worker thread)
    def persist(self) -> None:
        """Write the current calibrations in a worker thread; writes happen in request order."""
        snapshot = json.loads(json.dumps(self.calibrations))
        self._spawn(self._write(snapshot))

    async def _write(self, snapshot: dict[str, Any]) -> None:
        async with self._write_lock:
            try:
                await asyncio.to_thread(write_state_file, self.path, snapshot)
            except OSError as err:
                log.error("could not write the calibration state file %s: %s", self.path, err)
                self.loop.emit_now("calibration_not_saved", f"could not write {self.path}: {err}",
                                   values={"path": str(self.path)})
                return
            log.info("calibrations saved to %s", self.path)

    def fit_async(self, samples: list, deliver: Callable[[Any], None]) -> None:
        """Called in the control thread: fit in a worker thread, deliver to the behavior."""
        aio = self._aio
        if aio is None:
            deliver(ValueError("no event loop to fit on"))
            return
        try:
            aio.call_soon_threadsafe(self._spawn, self._fit(samples, deliver))
        except RuntimeError:
            deliver(ValueError("event loop closed"))

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _fit(samples: list, deliver: Callable[[Any], None]) -> None:
        deliver(await asyncio.to_thread(fit_or_error, samples))

    def mag_result_threadsafe(self, result: dict[str, Any]) -> None:
        """Called in the control thread by the calibration behavior."""
        aio = self._aio
        if aio is None:
            return
        try:
            aio.call_soon_threadsafe(self._store_mag, result)
        except RuntimeError:
            log.warning("event loop closed: magnetometer calibration applied but not saved")

    def _store_mag(self, result: dict[str, Any]) -> None:
        self.calibrations["magnetometer"] = result
        self.persist()

    # ---- requests (runtime API methods)
    def require_stage(self, what: str, need_mag: bool = False, need_uwb: bool = False) -> EstimationStage:
        st = self.stage
        if st is None or need_mag and not st.attitude.has_mag or need_uwb and not st.position.has_uwb:
            sensors = "an IMU" + (" and a magnetometer" if need_mag else "") + (" and UWB anchors" if need_uwb else "")
            raise ConflictError(f"{what} needs {sensors} (see docs/sensing.md)", code="unavailable")
        return st

    def heading(self, heading_deg: float) -> dict[str, Any]:
        st = self.require_stage("turning to a heading", need_mag=True)
        behavior = HeadingBehavior(st, heading_deg, self.profile.heading, self.max_rate, self.brake)
        reply = {"ok": True, "state": self.loop.start_behavior(behavior), "behavior": behavior.status()}
        warning = st.attitude.heading_warning()
        if warning:
            reply["warning"] = warning
        return reply

    def magnetometer(self, revolutions: float | None, rate_rad_s: float | None) -> dict[str, Any]:
        cal = self.profile.calibration
        revolutions = cal.mag_revolutions if revolutions is None else revolutions
        rate = min(cal.mag_turn_rate_rad_s, self.max_rate) if rate_rad_s is None else rate_rad_s
        if not 0.01 <= rate <= self.max_rate:
            raise ValidationError(f"rate_rad_s={rate:g} is outside the limits [0.01, {self.max_rate:g}]",
                                  code="out_of_limits")
        st = self.require_stage("the magnetometer calibration", need_mag=True)
        behavior = MagCalibrationBehavior(st, revolutions, rate, cal.mag_timeout_s, self.brake,
                                          self.mag_result_threadsafe, self.fit_async)
        return {"ok": True, "state": self.loop.start_behavior(behavior), "behavior": behavior.status()}

    def uwb(self, pairs: list[list[float]], degree: int) -> dict[str, Any]:
        st = self.require_stage("the UWB range calibration", need_uwb=True)
        arr = np.asarray(pairs, dtype=float)
        raw, true = arr[:, 0], arr[:, 1]
        try:
            correction = fit_range_correction(raw, true, degree=degree)
        except ValueError as err:
            raise ValidationError(f"cannot fit: {err}", code="invalid") from None
        coefficients = [float(c) for c in correction.coefficients]
        if not all(map(math.isfinite, coefficients)):
            raise ValidationError("cannot fit: the pairs give a non-finite polynomial", code="invalid")
        result = {
            "coefficients": coefficients, "degree": degree, "pairs": int(len(raw)),
            "rms_before_m": round(float(np.sqrt(np.mean((raw - true) ** 2))), 5),
            "rms_after_m": round(float(np.sqrt(np.mean((correction(raw) - true) ** 2))), 5),
            "t": time.time(),
        }
        with self.loop.lock:
            st.position.set_range_correction(coefficients)
        self.calibrations["uwb"] = result
        self.persist()
        return {"ok": True, "uwb": result}

    def state_json(self) -> dict[str, Any]:
        st = self.stage
        return {
            "state_file": str(self.path),
            "ignored_file_reason": self.ignored_file_reason,
            "magnetometer": self.calibrations["magnetometer"],
            "uwb": self.calibrations["uwb"],
            "active": {
                "magnetometer": None if st is None or st.attitude.mag_offset_ut is None else
                {"offset_ut": list(st.attitude.mag_offset_ut), "scale": list(st.attitude.mag_scale or ())},
                "uwb_range_correction": None if st is None else list(st.position.range_correction),
            },
            "defaults": {"uwb_range_correction": list(self.profile.estimation.uwb_range_correction)},
        }


__all__ = ["Calibrations", "clean_orphaned_temporaries", "parse_state", "read_state_file",
           "write_state_file"]
