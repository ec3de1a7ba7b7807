"""The rover profile's controller for a vehicle that takes the body twist itself: an autopilot's (MAVLink).

A MAVLink rover's autopilot mixes its own wheels (ArduPilot's skid-steering or Ackermann output, PX4's
differential rover module) and runs its own estimator (an EKF fusing GPS, IMU, compass, wheel encoders).
Mixing wheel speeds here, as :class:`~server.runtime.controllers.rover.RoverController` does, would mean
driving its motors behind its back, and a second estimator would contradict its EKF. So for a driver that
declares :attr:`drivers.base.Capability.BODY_TWIST` the registry gives the rover profile this controller
(:data:`server.runtime.controllers.registry.BY_CAPABILITY`), which keeps the rover's half that still holds —
the operator's ``speed`` setpoint, its limits, the acceleration ramps and the stop ramp (inherited, not
copied) — and writes the ramped twist as it is (``linear_m_s``, ``angular_rad_s``), with

* no estimation stage (``stages = ()``): the autopilot's EKF is the estimate, and its position and attitude
  reach the map as the driver's channels (``est_x_m``, ``est_y_m``, ``yaw_rad``);
* the limits narrowed to what the driver takes (its actuator ranges), so the dashboard's sliders, the 422s
  for a speed beyond them and the vehicle agree;
* motion for rules gated on motion as the rover's: the larger of the ramped command and the measured
  ``linear_m_s`` (the vehicle's forward speed).

>>> from server.runtime.controllers.rover import RoverSetpoint
>>> from server.runtime.supervisor import OutputMode
>>> c = TwistController(RoverLimits(linear_m_s=1.0))
>>> c.update(0.01, OutputMode.TRACK, RoverSetpoint(0.5, 0.2))     # 0.8 m/s² and 4 rad/s² for 10 ms
{'linear_m_s': 0.008, 'angular_rad_s': 0.04}
"""

from __future__ import annotations

from typing import Any

import msgspec

from drivers.base import TWIST_ACTUATORS, Capability
from server.config import ConfigError
from server.runtime.controllers.rover import RoverController, RoverLimits


class TwistController(RoverController):
    """The rover's ramped body twist, written to a :attr:`~drivers.base.Capability.BODY_TWIST` driver as it is."""

    stages = ()

    def __init__(self, limits: RoverLimits) -> None:  # no wheel geometry: the vehicle mixes its own wheels
        self.limits = limits
        self.uwb = None
        self.linear = 0.0
        self.angular = 0.0

    @classmethod
    def from_profile(cls, profile: Any, driver: Any) -> "TwistController":
        """``[limits]`` narrowed to the driver's ``linear_m_s``/``angular_rad_s`` ranges; a driver without the
        body twist is a :class:`ConfigError` (the registry does not pick this controller for one)."""
        acts = driver.actuators()
        if not driver.has(Capability.BODY_TWIST) or any(a not in acts for a in TWIST_ACTUATORS):
            raise ConfigError(f"{profile.source}: driver {driver.name!r} does not take a body twist "
                              f"({', '.join(TWIST_ACTUATORS)})")
        lin, ang = (acts[a] for a in TWIST_ACTUATORS)
        limits = profile.limits
        return cls(msgspec.structs.replace(limits, linear_m_s=min(limits.linear_m_s, lin[1], -lin[0]),
                                           angular_rad_s=min(limits.angular_rad_s, ang[1], -ang[0])))

    def actuator_command(self) -> dict[str, float]:
        lin, ang = TWIST_ACTUATORS
        return {lin: self.linear, ang: self.angular}

    def describe(self) -> dict[str, Any]:
        lim = self.limits
        return {"limits": {"linear_m_s": [-lim.linear_m_s, lim.linear_m_s],
                           "angular_rad_s": [-lim.angular_rad_s, lim.angular_rad_s], "ttl_max_s": lim.ttl_max_s},
                "drive": "body twist (the vehicle mixes its wheels and estimates its pose)"}


__all__ = ["TwistController"]
