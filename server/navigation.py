"""Automatic motions and calibrations over the API: turn to a compass heading, calibrate the
magnetometer, calibrate the UWB ranges.

Behaviors (:class:`server.control_loop.Behavior`) run in the control thread under its
lock; they supply the setpoint while the robot is ``running`` and every safety trigger
still applies. Stop, e-stop, an operator speed command or any stop of the robot cancel
them (the control loop does that). The link rule too stays in force: an automatic
motion still needs the operator's heartbeats.

* :class:`HeadingBehavior` turns in place to a compass heading by a closed loop that
  re-measures every fixed step: pause until the wheels are still and the filter has
  settled, read the heading from the estimator (magnetometer-corrected), turn by the
  error but at most ``step_deg``, measured by the encoders (rate limited by a braking
  curve, released ``coast_s`` early at the measured rate), then measure again; done
  within ``tolerance_deg``, failed after ``timeout_s``.
* :class:`MagCalibrationBehavior` turns in place slowly through ``mag_revolutions``,
  collecting a raw magnetometer sample every half degree of encoder-measured turn,
  then holds the rover still while a worker thread fits hard iron and scale
  (:func:`fit_magnetometer`), applies the result to the estimator at once (control
  thread) and hands it to the event loop, which writes the state file in a worker thread.
* The UWB range calibration is a plain request: ``(raw, true)`` pairs →
  :func:`robotics.estimation.uwb.fit_range_correction` → applied and stored.

The state file (``[server] state_dir`` / ``[calibration] state_file``, JSON) is read at
start-up; a file that cannot be used is named in a warning (log and event log) and
ignored, and the next stored calibration replaces it. It is written atomically
(temporary file + rename), never from the control thread or the event loop.

Routes (docs/sensing.md): ``POST /api/heading``, ``POST /api/calibration/magnetometer``,
``POST /api/calibration/uwb``, ``GET /api/calibration``.
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
from aiohttp import web

from robotics.estimation.magcal import fit_ellipsoid, fit_horizontal_ellipse
from robotics.estimation.uwb import fit_range_correction
from server.control_loop import ControlLoop
from server.errors import ConflictError, MalformedError, ValidationError
from server.estimation import MAG, EstimationStage
from server.safety import Event, Refused
from server.telemetry import dumps
from server.validation import MAX_BODY_BYTES, integer, number, parse_object, reject_unknown

log = logging.getLogger(__name__)

STATE_VERSION = 1
STILL_RAD_S = 0.02  # wheels count as still below this turn rate …
STILL_M_S = 0.01  # … and this speed
MAG_SAMPLE_STEP_RAD = math.radians(0.5)


def _wrap_deg(angle: float) -> float:
    """Angle in (-180, 180]."""
    a = math.fmod(angle, 360.0)
    if a > 180.0:
        a -= 360.0
    elif a <= -180.0:
        a += 360.0
    return a


def _round(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), nd)


def _still(values: dict[str, float]) -> bool:
    w = values.get("angular_rad_s", 0.0)
    v = values.get("linear_m_s", 0.0)
    return abs(w) < STILL_RAD_S and abs(v) < STILL_M_S


def turn_rate(remaining_rad: float, max_rate: float, min_rate: float, brake_rad_s2: float) -> float:
    """Signed turn rate toward a remaining angle: the lower of ``max_rate`` and the braking
    curve ``sqrt(2·a·|remaining|)``, never under ``min_rate`` (so the wheel lag at the end
    is a fraction of a degree).

    >>> turn_rate(1.0, 0.8, 0.1, 1.0), turn_rate(-0.005, 0.8, 0.1, 1.0)
    (0.8, -0.1)
    """
    rate = min(max_rate, math.sqrt(2.0 * brake_rad_s2 * abs(remaining_rad)))
    return math.copysign(max(rate, min_rate), remaining_rad)


# ---------------------------------------------------------------------- turn to a heading
class HeadingBehavior:
    """Turn in place to compass ``target_deg`` (0 = north, 90 = east); see the module doc.

    ``settings`` is the ``[heading]`` table; ``brake_rad_s2`` the turn deceleration the
    behavior plans with, in driver-clock time (the control loop's ramp is in loop time).
    """

    name = "heading"

    def __init__(self, stage: EstimationStage, target_deg: float, settings: dict[str, Any],
                 max_rate_rad_s: float, brake_rad_s2: float) -> None:
        self.stage = stage
        self.target_deg = float(target_deg) % 360.0
        self.tolerance_deg = float(settings["tolerance_deg"])
        self.step_rad = math.radians(settings["step_deg"])
        self.max_rate = min(float(settings["turn_rate_rad_s"]), max_rate_rad_s)
        self.min_rate = min(float(settings["min_turn_rate_rad_s"]), self.max_rate)
        self.settle_s = float(settings["settle_s"])
        self.coast_s = float(settings["coast_s"])
        self.timeout_s = float(settings["timeout_s"])
        self.brake = brake_rad_s2
        self.stop_rad = math.radians(0.25)
        self.phase = "settling"
        self.clock_s = 0.0
        self.still_s = 0.0
        self.steps = 0
        self.goal_odom_rad = 0.0
        self.heading_deg = math.nan
        self.error_deg = math.nan
        self.initial_error_deg = math.nan
        self.outcome: str | None = None

    def status(self) -> dict[str, Any]:
        progress = 0.0
        if math.isfinite(self.initial_error_deg) and math.isfinite(self.error_deg):
            progress = 1.0 - abs(self.error_deg) / max(abs(self.initial_error_deg), 1e-9)
        if self.outcome == "reached":
            progress = 1.0
        return {"name": self.name, "phase": self.phase, "target": {"heading_deg": self.target_deg},
                "target_deg": self.target_deg, "progress": round(min(1.0, max(0.0, progress)), 3), "heading_deg": _round(self.heading_deg, 2),
                "error_deg": _round(self.error_deg, 2), "tolerance_deg": self.tolerance_deg, "steps": self.steps,
                "elapsed_s": round(self.clock_s, 3), "outcome": self.outcome}

    def cancel(self, reason: str) -> None:
        self.phase = "cancelled"
        self.outcome = f"cancelled: {reason}"

    def update(self, values: dict[str, float], dt_s: float, now: float) -> tuple[float, float] | None:
        st = self.stage
        self.clock_s += st.sim_dt(dt_s)
        if self.clock_s > self.timeout_s:
            self.phase = "failed"
            self.outcome = (f"failed: timeout after {self.timeout_s:g} s "
                            f"(heading {self.heading_deg:.1f}°, error {self.error_deg:.1f}°)")
            return None
        if self.phase == "turning":
            remaining = self.goal_odom_rad - st.odom_yaw_rad
            # release early by the coast (wheel lag, ramp, latency) at the measured turn rate
            w = values.get("angular_rad_s", 0.0)
            coast = abs(w) * self.coast_s if w * remaining > 0.0 else 0.0
            if abs(remaining) > max(self.stop_rad, coast):
                return 0.0, turn_rate(remaining, self.max_rate, self.min_rate, self.brake)
            self.phase, self.still_s = "settling", 0.0
            return 0.0, 0.0
        # settling: wait for still wheels and a settled filter, then measure
        self.still_s = self.still_s + st.sim_dt(dt_s) if _still(values) else 0.0
        if self.still_s < self.settle_s:
            return 0.0, 0.0
        heading = st.heading_deg
        if not math.isfinite(heading):
            self.phase = "failed"
            self.outcome = "failed: no heading from the estimator"
            return None
        self.heading_deg = heading
        self.error_deg = _wrap_deg(self.target_deg - heading)
        if not math.isfinite(self.initial_error_deg):
            self.initial_error_deg = self.error_deg
        if abs(self.error_deg) <= self.tolerance_deg:
            self.phase = "done"
            self.outcome = "reached"
            return None
        # compass degrees grow clockwise, ENU yaw counter-clockwise
        step = max(-self.step_rad, min(self.step_rad, math.radians(self.error_deg)))
        self.goal_odom_rad = st.odom_yaw_rad - step
        self.steps += 1
        self.phase = "turning"
        return 0.0, turn_rate(-step, self.max_rate, self.min_rate, self.brake)


# ---------------------------------------------------------------------- magnetometer calibration
def fit_magnetometer(samples_ut) -> dict[str, Any]:
    """Hard-iron offset and per-axis scale from raw (N, 3) readings (µT).

    A rover turning in place on level ground only sweeps a horizontal circle of the
    field: the z reading barely changes, and the 3D ellipsoid fit
    (:func:`robotics.estimation.magcal.fit_ellipsoid`) is then rank-deficient. So when
    z spreads less than a fifth of the horizontal radius the horizontal ellipse is
    fitted (z offset 0, z scale 1: a level turn cannot see them; they hardly matter
    for the heading of a level robot), otherwise the full ellipsoid.

    >>> t = np.linspace(0.0, 4.0 * np.pi, 200)
    >>> raw = np.column_stack([5.0 + 26.0 * np.cos(t), -3.0 + 24.0 * np.sin(t), np.full(t.size, -43.0)])
    >>> cal = fit_magnetometer(raw)
    >>> cal["method"], [round(v, 3) for v in cal["offset_ut"]], round(cal["scale"][0] * 26.0, 3)
    ('horizontal_ellipse', [5.0, -3.0, 0.0], 24.98)
    """
    m = np.asarray(samples_ut, dtype=float).reshape(-1, 3)
    m = m[np.all(np.isfinite(m), axis=1)]
    if len(m) < 8:
        raise ValueError(f"too few magnetometer samples ({len(m)})")
    xy_radius = float(np.sqrt(np.mean(np.sum((m[:, :2] - m[:, :2].mean(axis=0)) ** 2, axis=1))))
    z_spread = float(np.std(m[:, 2]))
    if z_spread < 0.2 * xy_radius:
        centre, semi = fit_horizontal_ellipse(m[:, :2])
        radius = float(np.sqrt(semi[0] * semi[1]))
        offset = np.array([centre[0], centre[1], 0.0])
        scale = np.array([radius / semi[0], radius / semi[1], 1.0])
        calibrated = (m[:, :2] - centre) * scale[:2]
        norms = np.linalg.norm(calibrated, axis=1)
        method = "horizontal_ellipse"
    else:
        offset, scale = fit_ellipsoid(m)
        norms = np.linalg.norm((m - offset) * scale, axis=1)
        radius = float(np.median(norms))
        method = "ellipsoid"
    return {"offset_ut": [float(v) for v in offset], "scale": [float(v) for v in scale], "method": method,
            "samples": int(len(m)), "radius_ut": round(radius, 4),
            "residual_rms_ut": round(float(np.sqrt(np.mean((norms - radius) ** 2))), 4)}


class MagCalibrationBehavior:
    """Turn in place through ``revolutions`` at ``rate_rad_s``, sample, fit, apply, report.

    ``fit_async(samples, deliver)``, when given, fits off the control thread and calls
    ``deliver(result or ValueError)`` from wherever it ran (the behavior holds the rover
    still meanwhile); without it the fit runs inline. ``on_result`` is called in the control
    thread with the stored form of a successful calibration, once it is applied (it must only
    hand it over, e.g. ``call_soon_threadsafe``).
    """

    name = "magnetometer_calibration"

    def __init__(self, stage: EstimationStage, revolutions: float, rate_rad_s: float, timeout_s: float,
                 brake_rad_s2: float, on_result: Callable[[dict[str, Any]], None],
                 fit_async: Callable[[list, Callable[[Any], None]], None] | None = None) -> None:
        self.stage = stage
        self.revolutions = float(revolutions)
        self.goal_rad = 2.0 * math.pi * self.revolutions
        self.rate = float(rate_rad_s)
        self.timeout_s = float(timeout_s)
        self.brake = brake_rad_s2
        self.on_result = on_result
        self.fit_async = fit_async
        self.phase = "settling"
        self.clock_s = 0.0
        self.still_s = 0.0
        self.start_odom = 0.0
        self.last_sample_odom = -math.inf
        self.turned_rad = 0.0
        self.samples: list[tuple[float, float, float]] = []
        self.outcome: str | None = None
        self.result: dict[str, Any] | None = None
        self._fitted: Any = None  # set by deliver() from the fitting thread: one atomic assignment

    def status(self) -> dict[str, Any]:
        out = {"name": self.name, "phase": self.phase, "target": {"revolutions": self.revolutions},
               "progress": round(min(1.0, self.turned_rad / self.goal_rad), 3), "samples": len(self.samples),
               "elapsed_s": round(self.clock_s, 3), "outcome": self.outcome}
        if self.result is not None:
            out["result"] = self.result
        return out

    def cancel(self, reason: str) -> None:
        self.phase = "cancelled"
        self.outcome = f"cancelled: {reason}"

    def deliver(self, fitted: Any) -> None:
        """The fit's result (a dict) or its error (an exception); any thread."""
        self._fitted = fitted

    def update(self, values: dict[str, float], dt_s: float, now: float) -> tuple[float, float] | None:
        st = self.stage
        dt = st.sim_dt(dt_s)
        self.clock_s += dt
        if self.clock_s > self.timeout_s:
            self.phase = "failed"
            self.outcome = f"failed: timeout after {self.timeout_s:g} s ({self.turned_rad / (2 * math.pi):.2f} rev)"
            return None
        if self.phase == "fitting":
            return self._finish() if self._fitted is not None else (0.0, 0.0)
        if self.phase == "settling":
            self.still_s = self.still_s + dt if _still(values) else 0.0
            if self.still_s < 0.2:
                return 0.0, 0.0
            self.phase = "turning"
            self.start_odom = self.last_sample_odom = st.odom_yaw_rad
        self.turned_rad = abs(st.odom_yaw_rad - self.start_odom)
        if abs(st.odom_yaw_rad - self.last_sample_odom) >= MAG_SAMPLE_STEP_RAD:
            m = tuple(values.get(c, math.nan) for c in MAG)
            if all(map(math.isfinite, m)):
                self.samples.append(m)  # type: ignore[arg-type]
                self.last_sample_odom = st.odom_yaw_rad
        remaining = self.goal_rad - self.turned_rad
        if remaining > 0.0:
            return 0.0, min(self.rate, turn_rate(remaining, self.rate, 0.5 * self.rate, self.brake))
        self.phase = "fitting"
        if self.fit_async is None:
            self.deliver(_fit_or_error(self.samples))
            return self._finish()
        # ~0.5–1.5 ms for a few hundred samples: too long for a 1 kHz tick, so elsewhere
        self.fit_async(list(self.samples), self.deliver)
        return 0.0, 0.0

    def _finish(self) -> None:
        """Apply the fit (control thread, under the lock) and hand it over for storage."""
        fitted = self._fitted
        if isinstance(fitted, BaseException):
            self.phase = "failed"
            self.outcome = f"failed: {fitted}"
            return None
        try:
            self.stage.set_mag_calibration(fitted["offset_ut"], fitted["scale"])
        except ValueError as err:
            self.phase = "failed"
            self.outcome = f"failed: {err}"
            return None
        fitted["t"] = time.time()
        self.result = fitted
        self.phase = "done"
        self.outcome = "calibrated"
        self.on_result(fitted)
        return None


def _fit_or_error(samples) -> dict[str, Any] | ValueError:
    try:
        return fit_magnetometer(samples)
    except (ValueError, np.linalg.LinAlgError) as err:
        return ValueError(str(err))


# ---------------------------------------------------------------------- state file
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
class Navigation:
    """Owns the calibrations (event-loop side), the state file and the routes' logic."""

    def __init__(self, loop: ControlLoop, stage: EstimationStage | None, cfg: dict[str, Any]) -> None:
        self.loop = loop
        self.stage = stage
        self.cfg = cfg
        self.path = Path(cfg["server"]["state_dir"]) / cfg["calibration"]["state_file"]
        self.calibrations: dict[str, Any] = {"magnetometer": None, "uwb": None}
        self.ignored_file_reason: str | None = None
        self._aio: asyncio.AbstractEventLoop | None = None
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        lim = cfg["limits"]
        self.max_rate = float(lim["angular_rad_s"])
        time_scale = stage.time_scale if stage is not None else 1.0
        # plan with half the loop's angular ramp, seen on the driver's clock
        self.brake = 0.5 * min(lim["angular_accel_rad_s2"], lim["angular_decel_rad_s2"]) / time_scale

    # ---- start-up and shut-down
    async def ctx(self, app: web.Application):
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
            self._event("calibration_ignored", message, {"path": str(self.path)})
            loaded = None
        if loaded:
            with self.loop.lock:
                self._apply(loaded)
            self.calibrations.update({k: v for k, v in loaded.items() if v is not None})
            log.info("calibrations loaded from %s: %s", self.path,
                     ", ".join(k for k, v in loaded.items() if v is not None) or "none")
        try:
            yield
        finally:
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def _event(self, trigger: str, message: str, values: dict[str, Any]) -> None:
        with self.loop.lock:
            sup = self.loop.supervisor
            sup.events.append(Event(time.monotonic(), trigger, message, sup.state.value, sup.state.value,
                                    kind="info", values=values))

    def _apply(self, calibrations: dict[str, Any]) -> None:
        """Give calibrations to the estimator (caller holds the control loop's lock)."""
        st = self.stage
        if st is None:
            return
        mag = calibrations.get("magnetometer")
        if mag is not None and st.has_mag:
            st.set_mag_calibration(mag["offset_ut"], mag["scale"])
        uwb = calibrations.get("uwb")
        if uwb is not None and st.has_uwb:
            st.set_range_correction(uwb["coefficients"])

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
                self._event("calibration_not_saved", f"could not write {self.path}: {err}", {"path": str(self.path)})
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
        deliver(await asyncio.to_thread(_fit_or_error, samples))

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

    # ---- requests
    def require_stage(self, what: str, need_mag: bool = False, need_uwb: bool = False) -> EstimationStage:
        st = self.stage
        if st is None or need_mag and not st.has_mag or need_uwb and not st.has_uwb:
            sensors = "an IMU" + (" and a magnetometer" if need_mag else "") + (" and UWB anchors" if need_uwb else "")
            raise ConflictError(f"{what} needs {sensors} (see docs/sensing.md)", code="unavailable")
        return st

    def start(self, behavior: Any) -> str:
        try:
            return self.loop.start_behavior(behavior)
        except Refused as r:
            raise ConflictError(r.message, code=r.code) from None

    def state_json(self) -> dict[str, Any]:
        st = self.stage
        return {
            "state_file": str(self.path),
            "ignored_file_reason": self.ignored_file_reason,
            "magnetometer": self.calibrations["magnetometer"],
            "uwb": self.calibrations["uwb"],
            "active": {
                "magnetometer": None if st is None or st.mag_offset_ut is None else
                {"offset_ut": list(st.mag_offset_ut), "scale": list(st.mag_scale or ())},
                "uwb_range_correction": None if st is None else list(st.range_correction),
            },
            "defaults": {"uwb_range_correction": self.cfg["estimation"]["uwb_range_correction"]},
        }


NAV = web.AppKey("navigation", Navigation)


async def _read_body(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedError(f"body of {request.content_length} bytes is over the {MAX_BODY_BYTES}-byte limit",
                             code="too_large", status=413)
    return parse_object(await request.content.read(MAX_BODY_BYTES + 1), allow_empty=True)


def _json(obj: Any) -> web.Response:
    return web.Response(text=dumps(obj), content_type="application/json")


async def post_heading(request: web.Request) -> web.Response:
    nav = request.app[NAV]
    body = await _read_body(request)
    reject_unknown(body, {"heading_deg"})
    target = number(body, "heading_deg", 0.0, 360.0)
    st = nav.require_stage("turning to a heading", need_mag=True)
    behavior = HeadingBehavior(st, target, nav.cfg["heading"], nav.max_rate, nav.brake)
    state = nav.start(behavior)
    reply = {"ok": True, "state": state, "behavior": behavior.status()}
    warning = st.heading_warning()
    if warning:
        reply["warning"] = warning
    return _json(reply)


async def post_mag_calibration(request: web.Request) -> web.Response:
    nav = request.app[NAV]
    body = await _read_body(request)
    reject_unknown(body, {"revolutions", "rate_rad_s"})
    cal = nav.cfg["calibration"]
    revolutions = number(body, "revolutions", 1.0, 10.0, required=False, default=cal["mag_revolutions"])
    rate = number(body, "rate_rad_s", 0.01, nav.max_rate, required=False,
                  default=min(cal["mag_turn_rate_rad_s"], nav.max_rate))
    st = nav.require_stage("the magnetometer calibration", need_mag=True)
    behavior = MagCalibrationBehavior(st, revolutions, rate, cal["mag_timeout_s"], nav.brake,
                                      nav.mag_result_threadsafe, nav.fit_async)
    state = nav.start(behavior)
    return _json({"ok": True, "state": state, "behavior": behavior.status()})


MAX_PAIRS = 2000


def parse_pairs(body: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``pairs`` as (raw (N,), true (N,)) metres; 422 naming the first bad item.

    >>> parse_pairs({"pairs": [[2.0, 1.9], [3, 2.95]]})[1].tolist()
    [1.9, 2.95]
    """
    if "pairs" not in body:
        raise ValidationError("pairs is required: [[raw_m, true_m], ...]", code="missing_field")
    pairs = body["pairs"]
    if not isinstance(pairs, list) or not pairs:
        raise ValidationError("pairs must be a non-empty list of [raw_m, true_m]", code="wrong_type")
    if len(pairs) > MAX_PAIRS:
        raise ValidationError(f"pairs has more than {MAX_PAIRS} items", code="out_of_limits")
    out = np.empty((len(pairs), 2))
    for i, p in enumerate(pairs):
        if not isinstance(p, list) or len(p) != 2 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in p):
            raise ValidationError(f"pairs[{i}] must be [raw_m, true_m] (two numbers)", code="wrong_type")
        if not all(math.isfinite(v) for v in p):
            raise ValidationError(f"pairs[{i}] must be finite", code="not_finite")
        if not all(0.0 <= v <= 1000.0 for v in p):
            raise ValidationError(f"pairs[{i}] ranges must be in [0, 1000] m", code="out_of_limits")
        out[i] = p
    return out[:, 0], out[:, 1]


async def post_uwb_calibration(request: web.Request) -> web.Response:
    nav = request.app[NAV]
    body = await _read_body(request)
    reject_unknown(body, {"pairs", "degree"})
    raw, true = parse_pairs(body)
    degree = integer(body, "degree", 0, 3, required=False, default=2)
    st = nav.require_stage("the UWB range calibration", need_uwb=True)
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
    with nav.loop.lock:
        st.set_range_correction(coefficients)
    nav.calibrations["uwb"] = result
    nav.persist()
    return _json({"ok": True, "uwb": result})


async def get_calibration(request: web.Request) -> web.Response:
    return _json(request.app[NAV].state_json())


def setup_navigation(app: web.Application, loop: ControlLoop, stage: EstimationStage | None,
                     cfg: dict[str, Any]) -> Navigation:
    """Register the routes and the start-up/shut-down of the calibration state (call after
    the robot's own cleanup context, so the control loop runs when the state file is applied)."""
    nav = Navigation(loop, stage, cfg)
    app[NAV] = nav
    app.cleanup_ctx.append(nav.ctx)
    r = app.router
    r.add_post("/api/heading", post_heading)
    r.add_post("/api/calibration/magnetometer", post_mag_calibration)
    r.add_post("/api/calibration/uwb", post_uwb_calibration)
    r.add_get("/api/calibration", get_calibration)
    return nav


__all__ = ["HeadingBehavior", "MagCalibrationBehavior", "NAV", "Navigation", "fit_magnetometer",
           "setup_navigation"]
