"""Drive to a fiducial marker in view and stop short of it (``POST /api/go_to_marker``), a rover behaviour.

The vision pipeline measures the marker's range and bearing from the body origin
(``marker_{id}_range_m``, ``marker_{id}_bearing_rad``: :mod:`server.runtime.external`) about
ten times a second, each ~0.05–0.2 s old when it arrives. Between measurements, and for the
age of each one, the behaviour dead-reckons the marker's place in the body frame from the
measured twist (``linear_m_s``, ``angular_rad_s``): the marker stands still in the world, so
it moves back by the distance driven and turns against the robot's turn. On that estimate it
steers the bearing to zero (proportional, turning first when it is off by a lot) and drives
forward at a speed that can still stop at ``standoff_m`` (:func:`robotics.control.brake_speed`, the one
braking law, discrete over the tick: the continuous ``sqrt(2·a·d)`` overshoots by a tick's travel; at
most ``speed_m_s``); within ``TOLERANCE_M`` it stops, waits for still wheels and finishes
("reached", with the range measured then).

It fails when the marker has not been seen for ``lost_s`` (out of view, the pipeline stopped:
stale vision is NaN) or after ``timeout_s``. Like every behaviour it runs in the control thread
while the robot is ``running``; stop, e-stop, an operator's speed command or
``cancel_behavior`` end it, and every safety rule still applies (keep sending heartbeats).
"""

from __future__ import annotations

import math
from typing import Any

from robotics.control import brake_speed
from server.runtime.behaviours.common import rounded, still
from server.runtime.controllers.rover import RoverSetpoint

SOURCE = "vision"
TOLERANCE_M = 0.03  # stop this close to the standoff
K_BEARING = 1.5  # rad/s per rad of bearing error
K_RANGE = 1.0  # m/s per m of range error (before the braking curve and the speed cap)
MIN_SPEED_M_S = 0.03  # never creep slower than this while short of the standoff and aligned
TURN_FIRST_RAD = 0.6  # at this bearing error the forward speed is zero: turn first
SETTLE_S = 0.3  # still wheels for this long before the final range is read


def range_channel(marker_id: int) -> str:
    return f"marker_{marker_id}_range_m"


def bearing_channel(marker_id: int) -> str:
    return f"marker_{marker_id}_bearing_rad"


def propagate(range_m: float, bearing_rad: float, v_m_s: float, w_rad_s: float, dt_s: float) -> tuple[float, float]:
    """Where a still point seen at (range, bearing) is after the body moved ``v·dt`` forward and turned ``w·dt``.

    >>> r, b = propagate(2.0, 0.0, 0.5, 0.0, 1.0)       # 0.5 m closer, dead ahead
    >>> round(r, 6), round(b, 6)
    (1.5, 0.0)
    >>> round(propagate(2.0, 0.0, 0.0, 0.1, 1.0)[1], 6)  # turned left: the point is now to the right
    -0.1
    """
    x = range_m * math.cos(bearing_rad) - v_m_s * dt_s
    y = range_m * math.sin(bearing_rad)
    a = -w_rad_s * dt_s
    c, s = math.cos(a), math.sin(a)
    xr, yr = c * x - s * y, s * x + c * y
    return math.hypot(xr, yr), math.atan2(yr, xr)


class GoToMarkerBehavior:
    """Drive to marker ``marker_id`` and stop ``standoff_m`` from it (range from the body origin).

    ``external`` is the :class:`~server.runtime.external.ExternalChannels` stage, ``time_scale`` the
    driver clock's rate (the simulator may run faster), ``brake_m_s2`` the deceleration it plans
    with, ``max_rate_rad_s`` the turn-rate limit.
    """

    name = "go_to_marker"

    def __init__(self, external: Any, marker_id: int, standoff_m: float, speed_m_s: float, *,
                 max_rate_rad_s: float, brake_m_s2: float, time_scale: float = 1.0, timeout_s: float = 120.0,
                 lost_s: float = 1.5) -> None:
        self.external = external
        self.marker_id = int(marker_id)
        self.standoff_m = float(standoff_m)
        self.speed_m_s = float(speed_m_s)
        self.max_rate = float(max_rate_rad_s)
        self.brake = float(brake_m_s2)
        self.time_scale = float(time_scale)
        self.timeout_s = float(timeout_s)
        self.lost_s = float(lost_s)
        self._r_name, self._b_name = range_channel(self.marker_id), bearing_channel(self.marker_id)
        self.phase = "approaching"
        self.range_m = math.nan  # the dead-reckoned estimate
        self.bearing_rad = math.nan
        self.initial_error_m = math.nan
        self.last_seen_t = -math.inf  # capture time of the newest measurement that saw it
        self.measurements = 0
        self.clock_s = 0.0
        self.still_s = 0.0
        self.outcome: str | None = None
        self._seq = -1
        self._age = 0.0  # age of the measurement taken this tick (0: none taken)
        self._start_t: float | None = None

    def seen(self, now: float) -> bool:
        """Take the newest measurement if it is new and sees the marker; True when the estimate is set."""
        m = self.external.latest(SOURCE)
        if m is None or m.seq == self._seq:
            return math.isfinite(self.range_m)
        self._seq = m.seq
        r, b = m.values.get(self._r_name, math.nan), m.values.get(self._b_name, math.nan)
        if not (math.isfinite(r) and math.isfinite(b)) or now - m.sample_t > self.external.max_age_s:
            return math.isfinite(self.range_m)
        self.measurements += 1
        self.last_seen_t = m.sample_t
        self.range_m, self.bearing_rad = r, b
        self._age = max(0.0, now - m.sample_t)  # propagated by the twist over the frame's age in update()
        return True

    def status(self) -> dict[str, Any]:
        err = self.range_m - self.standoff_m
        progress = 0.0
        if math.isfinite(err) and math.isfinite(self.initial_error_m) and self.initial_error_m > 0:
            progress = 1.0 - max(0.0, err) / self.initial_error_m
        if self.outcome and self.outcome.startswith("reached"):
            progress = 1.0
        return {"name": self.name, "phase": self.phase,
                "target": {"marker_id": self.marker_id, "standoff_m": self.standoff_m, "lost_s": self.lost_s},
                "marker_id": self.marker_id, "range_m": rounded(self.range_m, 3),
                "bearing_rad": rounded(self.bearing_rad, 4), "progress": round(min(1.0, max(0.0, progress)), 3),
                "measurements": self.measurements, "elapsed_s": round(self.clock_s, 3), "outcome": self.outcome}

    def cancel(self, reason: str) -> None:
        self.phase = "cancelled"
        self.outcome = f"cancelled: {reason}"

    def update(self, values: dict[str, float], dt_s: float, now: float) -> RoverSetpoint | None:
        dt = dt_s * self.time_scale
        self.clock_s += dt
        v = values.get("linear_m_s", 0.0)
        w = values.get("angular_rad_s", 0.0)
        v = v if math.isfinite(v) else 0.0
        w = w if math.isfinite(w) else 0.0
        self._age = 0.0
        had = math.isfinite(self.range_m)
        if self.seen(now) and self._age > 0.0:
            self.range_m, self.bearing_rad = propagate(self.range_m, self.bearing_rad, v, w,
                                                       self._age * self.time_scale)
        elif had:
            self.range_m, self.bearing_rad = propagate(self.range_m, self.bearing_rad, v, w, dt)
        if self._start_t is None:
            self._start_t = now
        if self.clock_s > self.timeout_s:
            return self._fail(f"timeout after {self.timeout_s:g} s (range {self.range_m:.2f} m)")
        if now - max(self.last_seen_t, self._start_t) > self.lost_s:
            if not math.isfinite(self.range_m):
                return self._fail(f"marker {self.marker_id} not in view")
            return self._fail(f"marker {self.marker_id} lost from view for {now - self.last_seen_t:.1f} s "
                              f"(range {self.range_m:.2f} m)")
        if not math.isfinite(self.range_m):
            return RoverSetpoint()
        err = self.range_m - self.standoff_m
        if not math.isfinite(self.initial_error_m):
            self.initial_error_m = err
        if self.phase == "approaching" and err > TOLERANCE_M:
            return self._steer(err, dt)
        # at the standoff: stop, wait for still wheels, report the range measured then
        self.phase = "settling"
        self.still_s = self.still_s + dt if still(values) else 0.0
        if self.still_s >= SETTLE_S:
            self.phase = "done"
            self.outcome = f"reached: {self.range_m:.3f} m from marker {self.marker_id}"
            return None
        return RoverSetpoint()

    def _steer(self, err: float, dt_s: float) -> RoverSetpoint:
        b = self.bearing_rad
        w = max(-self.max_rate, min(self.max_rate, K_BEARING * b))
        speed = min(self.speed_m_s, K_RANGE * err, float(brake_speed(err, self.brake, dt_s)))
        speed = max(speed, min(MIN_SPEED_M_S, self.speed_m_s))
        speed *= max(0.0, 1.0 - abs(b) / TURN_FIRST_RAD)
        return RoverSetpoint(speed, w)

    def _fail(self, why: str) -> None:
        self.phase = "failed"
        self.outcome = f"failed: {why}"
        return None


__all__ = ["GoToMarkerBehavior", "bearing_channel", "propagate", "range_channel"]
