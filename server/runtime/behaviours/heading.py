"""Turn in place to a compass heading (``POST /api/heading``), a behaviour of the rover profile.

A closed loop that re-measures every fixed step: pause until the wheels are still and the
filter has settled, read the heading from the estimator (magnetometer-corrected), turn by
the error but at most ``step_deg``, measured by the encoders (rate limited by a braking
curve, released ``coast_s`` early at the measured rate), then measure again; done within
``tolerance_deg``, failed after ``timeout_s``. It runs in the control thread under its
lock and supplies the setpoint while the robot is ``running``; every safety trigger
still applies (the link rule too: keep sending heartbeats).
"""

from __future__ import annotations

import math
from typing import Any


from robotics.angles import wrap_deg
from robotics.control import turn_rate
from server.runtime.behaviours.common import rounded, still
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.estimation import EstimationStage
from server.runtime.settings import HeadingConfig


class HeadingBehavior:
    """Turn in place to compass ``target_deg`` (0 = north, 90 = east); see the module doc.

    ``settings`` is the :class:`HeadingConfig`; ``brake_rad_s2`` the turn deceleration the
    behavior plans with, in driver-clock time (the control loop's ramp is in loop time).
    """

    name = "heading"

    def __init__(self, stage: EstimationStage, target_deg: float, settings: HeadingConfig,
                 max_rate_rad_s: float, brake_rad_s2: float) -> None:
        self.stage = stage
        self.target_deg = float(target_deg) % 360.0
        self.tolerance_deg = settings.tolerance_deg
        self.step_rad = math.radians(settings.step_deg)
        self.max_rate = min(settings.turn_rate_rad_s, max_rate_rad_s)
        self.min_rate = min(settings.min_turn_rate_rad_s, self.max_rate)
        self.settle_s = settings.settle_s
        self.coast_s = settings.coast_s
        self.timeout_s = settings.timeout_s
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
                "target_deg": self.target_deg, "progress": round(min(1.0, max(0.0, progress)), 3), "heading_deg": rounded(self.heading_deg, 2),
                "error_deg": rounded(self.error_deg, 2), "tolerance_deg": self.tolerance_deg, "steps": self.steps,
                "elapsed_s": round(self.clock_s, 3), "outcome": self.outcome}

    def cancel(self, reason: str) -> None:
        self.phase = "cancelled"
        self.outcome = f"cancelled: {reason}"

    def update(self, values: dict[str, float], dt_s: float, now: float) -> RoverSetpoint | None:
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
                return RoverSetpoint(0.0, turn_rate(remaining, self.max_rate, self.min_rate, self.brake))
            self.phase, self.still_s = "settling", 0.0
            return RoverSetpoint()
        # settling: wait for still wheels and a settled filter, then measure
        self.still_s = self.still_s + st.sim_dt(dt_s) if still(values) else 0.0
        if self.still_s < self.settle_s:
            return RoverSetpoint()
        heading = st.heading_deg
        if not math.isfinite(heading):
            self.phase = "failed"
            self.outcome = "failed: no heading from the estimator"
            return None
        self.heading_deg = heading
        self.error_deg = wrap_deg(self.target_deg - heading)
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
        return RoverSetpoint(0.0, turn_rate(-step, self.max_rate, self.min_rate, self.brake))
