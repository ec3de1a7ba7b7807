"""The rover's command computation: operator setpoint → ramped body twist → wheel speeds.

Acceleration limits shape every change; the controlled stop uses the configured
deceleration. Runs in the control-loop thread, once per tick. The rover owns its ``[robot]``
(:class:`RoverRobot`) and ``[limits]`` (:class:`RoverLimits`) tables, offers the ``speed``
command (:class:`server.runtime_api.params.Speed`) and needs the ``estimation`` stage (attitude, heading,
position: :mod:`server.runtime.estimation`).

>>> c = RoverController(RoverLimits(), wheel_radius_m=0.05, track_m=0.3)
>>> c.update(0.01, OutputMode.TRACK, RoverSetpoint(0.5, 0.0))["wheel_left"]  # 0.8 m/s² × 10 ms = 0.008 m/s
0.16
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Mapping

import msgspec
from msgspec import Meta

from robotics.kinematics.diffdrive import wheel_speeds
from server.runtime_api.params import Speed
from server.config import Table
from server.runtime.controllers.base import Command, Controller
from server.runtime.supervisor import Motion, OutputMode
from server.validation import check_range

EPS = 1e-3


def _pos(hi: float) -> type:
    return Annotated[float, Meta(gt=0.0, le=hi)]


class RoverRobot(Table, tag_field="profile", tag="rover"):
    """``[robot]`` of a differential-drive rover."""

    name: str = "Simulated rover"
    wheel_radius_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.05
    track_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.30

    @property
    def profile(self) -> str:
        return "rover"


class RoverLimits(Table):
    """The rover's ``[limits]`` table: its speed and ramp limits."""

    linear_m_s: _pos(20.0) = 0.5
    angular_rad_s: _pos(50.0) = 2.0
    linear_accel_m_s2: _pos(100.0) = 0.8
    angular_accel_rad_s2: _pos(500.0) = 4.0
    linear_decel_m_s2: _pos(100.0) = 1.5
    angular_decel_rad_s2: _pos(500.0) = 6.0
    ttl_max_s: _pos(3600.0) = 10.0


#: the name it had when ``[limits]`` was the rover's alone
Limits = RoverLimits


class RoverSetpoint(msgspec.Struct, frozen=True):
    """Body twist: ``linear`` m/s forward, ``angular`` rad/s counter-clockwise."""

    linear: float = 0.0
    angular: float = 0.0


def _approach(current: float, target: float, step: float) -> float:
    if target > current:
        return min(target, current + step)
    return max(target, current - step)


class RoverController(Controller):
    """Ramps (linear, angular) toward the setpoint and converts to wheel speeds, desaturated to the
    wheel limit (the curvature is kept)."""

    profile = "rover"
    robot_type = RoverRobot
    limits_type = RoverLimits
    setpoint_type = RoverSetpoint
    commands = (Command("speed", Speed),)
    stages = ("estimation",)

    def __init__(self, limits: RoverLimits, wheel_radius_m: float, track_m: float,
                 max_wheel_rad_s: float = math.inf, uwb: dict[str, Any] | None = None) -> None:
        self.limits = limits
        self.wheel_radius_m = wheel_radius_m
        self.track_m = track_m
        self.max_wheel_rad_s = max_wheel_rad_s
        self.uwb = uwb  # the UWB anchors, for the dashboard's map
        self.linear = 0.0
        self.angular = 0.0

    @classmethod
    def from_profile(cls, profile: Any, driver: Any) -> RoverController:
        """From ``[robot]`` (a :class:`RoverRobot`), ``[limits]`` and ``[uwb]``; the wheels' limit is the driver's
        slowest actuator's."""
        wheel_limit = min((hi for lo, hi in driver.actuators().values()), default=math.inf)
        uwb = profile.uwb
        return cls(profile.limits, profile.robot.wheel_radius_m, profile.robot.track_m, wheel_limit,
                   uwb={"anchors": uwb.anchors, "tag_height_m": uwb.tag_height_m})

    def zero(self) -> RoverSetpoint:
        return RoverSetpoint()

    def check(self, sp: RoverSetpoint) -> None:
        check_range("linear", sp.linear, -self.limits.linear_m_s, self.limits.linear_m_s)
        check_range("angular", sp.angular, -self.limits.angular_rad_s, self.limits.angular_rad_s)

    def scaled(self, sp: RoverSetpoint, scale: float) -> RoverSetpoint:
        """The governor's cap: linear and angular speed times ``scale``."""
        return sp if scale >= 1.0 else RoverSetpoint(sp.linear * scale, sp.angular * scale)

    def motion_of(self, sp: RoverSetpoint) -> Motion:
        return Motion(abs(sp.linear) > EPS or abs(sp.angular) > EPS, sp.linear)

    def motion(self, values: Mapping[str, float]) -> Motion:
        measured = values.get("linear_m_s", 0.0)
        if not math.isfinite(measured):
            measured = 0.0
        forward = self.linear if abs(self.linear) >= abs(measured) else measured
        return Motion(abs(forward) > EPS or abs(self.angular) > EPS, forward)

    def reset(self) -> None:
        self.linear = 0.0
        self.angular = 0.0

    @property
    def stopped(self) -> bool:
        return self.linear == 0.0 and self.angular == 0.0

    def update(self, dt_s: float, mode: OutputMode, sp: RoverSetpoint) -> dict[str, float]:
        """One tick; ``mode`` from :meth:`server.runtime.supervisor.Supervisor.output_mode`: the body twist
        ramped (:meth:`ramp`), then the actuators' command (:meth:`actuator_command`)."""
        self.ramp(dt_s, mode, sp)
        return self.actuator_command()

    def ramp(self, dt_s: float, mode: OutputMode, sp: RoverSetpoint) -> None:
        """Move the body twist (``linear``, ``angular``) one tick toward what ``mode`` asks, within the limits."""
        lim = self.limits
        if mode is OutputMode.TRACK:
            # accelerate with the accel limit; slowing down may use the (larger) decel limit
            lin_rate = lim.linear_accel_m_s2 if abs(sp.linear) > abs(self.linear) else lim.linear_decel_m_s2
            ang_rate = lim.angular_accel_rad_s2 if abs(sp.angular) > abs(self.angular) else lim.angular_decel_rad_s2
            self.linear = _approach(self.linear, sp.linear, lin_rate * dt_s)
            self.angular = _approach(self.angular, sp.angular, ang_rate * dt_s)
        elif mode is OutputMode.RAMP:
            self.linear = _approach(self.linear, 0.0, lim.linear_decel_m_s2 * dt_s)
            self.angular = _approach(self.angular, 0.0, lim.angular_decel_rad_s2 * dt_s)
        else:  # cut, hold, idle
            self.linear = 0.0
            self.angular = 0.0

    def actuator_command(self) -> dict[str, float]:
        """The wheels' speeds for the ramped twist (rad/s)."""
        left, right = wheel_speeds(self.linear, self.angular, self.track_m, self.wheel_radius_m)
        peak = max(abs(left), abs(right))
        if peak > self.max_wheel_rad_s:  # desaturate: scale both wheels, keeping the curvature
            k = self.max_wheel_rad_s / peak
            left, right = left * k, right * k
        return {"wheel_left": left, "wheel_right": right}

    def command_json(self) -> dict[str, float]:
        return {"linear": self.linear, "angular": self.angular}

    def setpoint_json(self, sp: RoverSetpoint) -> dict[str, Any]:
        return {"linear": sp.linear, "angular": sp.angular}

    def describe(self) -> dict[str, Any]:
        lim = self.limits
        return {
            "limits": {"linear_m_s": [-lim.linear_m_s, lim.linear_m_s],
                       "angular_rad_s": [-lim.angular_rad_s, lim.angular_rad_s], "ttl_max_s": lim.ttl_max_s},
            "geometry": {"wheel_radius_m": self.wheel_radius_m, "track_m": self.track_m},
            **({"uwb": self.uwb} if self.uwb is not None else {}),
        }
