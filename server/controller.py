"""The rover's command computation: operator setpoint → ramped body twist → wheel speeds.

Acceleration limits shape every change; the controlled stop uses the configured
deceleration. Runs in the control-loop thread, once per tick.

>>> c = RoverController(Limits(), wheel_radius_m=0.05, track_m=0.3)
>>> c.update(0.01, "track", 0.5, 0.0)["wheel_left"]  # 0.8 m/s² × 10 ms = 0.008 m/s
0.16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from robotics.kinematics.diffdrive import wheel_speeds


@dataclass(frozen=True)
class Limits:
    linear_m_s: float = 0.5
    angular_rad_s: float = 2.0
    linear_accel_m_s2: float = 0.8
    angular_accel_rad_s2: float = 4.0
    linear_decel_m_s2: float = 1.5
    angular_decel_rad_s2: float = 6.0
    ttl_max_s: float = 10.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "Limits":
        return cls(**cfg["limits"])


def _approach(current: float, target: float, step: float) -> float:
    if target > current:
        return min(target, current + step)
    return max(target, current - step)


class RoverController:
    """Ramps (linear, angular) toward the setpoint and converts to wheel speeds."""

    def __init__(self, limits: Limits, wheel_radius_m: float, track_m: float,
                 max_wheel_rad_s: float = float("inf")) -> None:
        self.limits = limits
        self.max_wheel_rad_s = max_wheel_rad_s
        self.wheel_radius_m = wheel_radius_m
        self.track_m = track_m
        self.linear = 0.0
        self.angular = 0.0

    def reset(self) -> None:
        self.linear = 0.0
        self.angular = 0.0

    @property
    def stopped(self) -> bool:
        return self.linear == 0.0 and self.angular == 0.0

    def update(self, dt_s: float, mode: str, linear_sp: float, angular_sp: float) -> dict[str, float]:
        """One tick; ``mode`` from :meth:`server.safety.Supervisor.output_mode`."""
        lim = self.limits
        if mode == "track":
            # accelerate with the accel limit; slowing down may use the (larger) decel limit
            lin_rate = lim.linear_accel_m_s2 if abs(linear_sp) > abs(self.linear) else lim.linear_decel_m_s2
            ang_rate = lim.angular_accel_rad_s2 if abs(angular_sp) > abs(self.angular) else lim.angular_decel_rad_s2
            self.linear = _approach(self.linear, linear_sp, lin_rate * dt_s)
            self.angular = _approach(self.angular, angular_sp, ang_rate * dt_s)
        elif mode == "ramp":
            self.linear = _approach(self.linear, 0.0, lim.linear_decel_m_s2 * dt_s)
            self.angular = _approach(self.angular, 0.0, lim.angular_decel_rad_s2 * dt_s)
        else:  # cut, hold, idle
            self.linear = 0.0
            self.angular = 0.0
        left, right = wheel_speeds(self.linear, self.angular, self.track_m, self.wheel_radius_m)
        peak = max(abs(left), abs(right))
        if peak > self.max_wheel_rad_s:  # desaturate: scale both wheels, keeping the curvature
            k = self.max_wheel_rad_s / peak
            left, right = left * k, right * k
        return {"wheel_left": left, "wheel_right": right}
