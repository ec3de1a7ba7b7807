"""Magnetometer calibration run (``POST /api/calibration/magnetometer``), a rover behaviour.

The rover turns in place slowly through ``revolutions``, collecting a raw magnetometer
sample every half degree of encoder-measured turn, then holds still while a worker thread
fits hard iron and scale (:func:`robotics.estimation.magcal.fit_magnetometer`), applies
the result to the estimator at once (control thread) and hands it over to be stored.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from robotics.control import turn_rate
from robotics.estimation.magcal import fit_magnetometer
from server.runtime.behaviours.common import still
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.estimation import MAG, EstimationStage

MAG_SAMPLE_STEP_RAD = math.radians(0.5)


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

    def update(self, values: dict[str, float], dt_s: float, now: float) -> RoverSetpoint | None:
        st = self.stage
        dt = st.sim_dt(dt_s)
        self.clock_s += dt
        if self.clock_s > self.timeout_s:
            self.phase = "failed"
            self.outcome = f"failed: timeout after {self.timeout_s:g} s ({self.turned_rad / (2 * math.pi):.2f} rev)"
            return None
        if self.phase == "fitting":
            return self._finish() if self._fitted is not None else RoverSetpoint()
        if self.phase == "settling":
            self.still_s = self.still_s + dt if still(values) else 0.0
            if self.still_s < 0.2:
                return RoverSetpoint()
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
            return RoverSetpoint(0.0, min(self.rate, turn_rate(remaining, self.rate, 0.5 * self.rate, self.brake)))
        self.phase = "fitting"
        if self.fit_async is None:
            self.deliver(fit_or_error(self.samples))
            return self._finish()
        # ~0.5–1.5 ms for a few hundred samples: too long for a 1 kHz tick, so elsewhere
        self.fit_async(list(self.samples), self.deliver)
        return RoverSetpoint()

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


def fit_or_error(samples) -> dict[str, Any] | ValueError:
    try:
        return fit_magnetometer(samples)
    except (ValueError, np.linalg.LinAlgError) as err:
        return ValueError(str(err))
