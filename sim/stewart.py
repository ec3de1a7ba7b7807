"""A simulated 6-6 Stewart platform: six linear actuators, the pose they give, saturation.

Each leg is a :class:`sim.servo.ServoAxes` axis: it tracks a length target,
its speed capped at ``max_velocity_m_s`` and changed by at most
``max_acceleration_m_s2``, and it stops dead at the ends of its stroke
``[leg_min, leg_max]`` (from the :class:`robotics.kinematics.stewart.StewartPlatform`).
A target beyond the stroke is clamped to it, as the paper's Saturation block
does (seeds/003), and :attr:`StewartSim.saturation` reports which legs and by
how much. The achieved pose is the forward kinematics of the achieved lengths,
Newton warm-started from the last pose, so it follows the assembly the machine
is on; should it fail (:class:`robotics.kinematics.NoConvergence`: a singular
configuration), the last pose is kept,
:attr:`StewartSim.pose_valid` turns false and :attr:`StewartSim.pose_error`
says why, until a later step solves again.

The length sensors read the lengths plus Gaussian noise of ``length_noise_m``
(default 0) from the caller's generator, one draw per leg per reading; nothing
reads a clock.

>>> from robotics.kinematics.stewart import StewartPlatform
>>> sim = StewartSim(StewartPlatform.symmetric())
>>> report = sim.command_pose((0.0, 0.0, 0.55), (0.1, 0.0, 0.0))
>>> for _ in range(100):
...     sim.step(0.01)
>>> position, euler = sim.pose
>>> (np.round(position, 6) + 0.0).tolist(), (np.round(euler, 6) + 0.0).tolist(), report.saturated
([0.0, 0.0, 0.55], [0.1, 0.0, 0.0], False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from robotics.kinematics.stewart import SaturationReport, StewartPlatform
from sim.servo import ServoAxes

__all__ = ["ActuatorParams", "StewartSim"]


@dataclass(frozen=True)
class ActuatorParams:
    """The six linear actuators (the same for each): speed and acceleration limits, sensor noise."""

    max_velocity_m_s: float = 0.25
    max_acceleration_m_s2: float = 2.0
    length_noise_m: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"stewart sim: {f.name} must be a finite number, got {value!r}")
        if self.max_velocity_m_s <= 0 or self.max_acceleration_m_s2 <= 0 or self.length_noise_m < 0:
            raise ValueError("stewart sim: max_velocity_m_s and max_acceleration_m_s2 must be > 0, "
                             "length_noise_m >= 0")

    @classmethod
    def from_config(cls, table: Mapping[str, Any]) -> ActuatorParams:
        """From a config table of the same keys; unknown keys are refused by name."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in table if k not in known)
        if unknown:
            raise ValueError(f"stewart sim: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
        return cls(**dict(table))


class StewartSim:
    """The platform's six actuators. ``pose`` (position, euler_xyz) is the start, default the platform's home."""

    def __init__(self, platform: StewartPlatform, params: ActuatorParams | None = None,
                 rng: np.random.Generator | None = None, pose=None) -> None:
        self.platform = platform
        self.params = params or ActuatorParams()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        position, euler = platform.home if pose is None else (np.asarray(pose[0], float), np.asarray(pose[1], float))
        lengths = platform.leg_lengths(position, euler)
        report = platform.saturate(lengths)[1]
        if report.saturated:
            raise ValueError(f"stewart sim: the start pose needs legs outside their stroke: {report}")
        self.legs = ServoAxes(platform.leg_min, platform.leg_max, self.params.max_velocity_m_s,
                              self.params.max_acceleration_m_s2, position=lengths)
        self._pose = (position.copy(), euler.copy())
        self._pose_lengths = lengths.copy()
        self.pose_valid = True
        self.pose_error: str | None = None
        self.saturation = SaturationReport()
        self.t = 0.0

    @property
    def lengths(self) -> np.ndarray:
        """True leg lengths (6,) m."""
        return self.legs.position.copy()

    @property
    def velocities(self) -> np.ndarray:
        """True leg rates (6,) m/s."""
        return self.legs.velocity.copy()

    @property
    def at_limit(self) -> np.ndarray:
        """(6,) int: +1 at the long end of the stroke, −1 at the short end, 0 between."""
        return self.legs.at_limit

    @property
    def pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Achieved pose ``(position (3,), euler_xyz (3,))`` from the achieved lengths (the last solved one)."""
        return self._pose[0].copy(), self._pose[1].copy()

    def measured_lengths(self) -> np.ndarray:
        """Length sensor readings (6,) m: the lengths plus noise (one draw per leg)."""
        sigma = self.params.length_noise_m
        return self.lengths + (self.rng.normal(0.0, sigma, 6) if sigma > 0 else 0.0)

    def command_lengths(self, targets, mask=None) -> SaturationReport:
        """Track leg lengths ``targets`` (6,) m, clamped to the strokes, on the legs where ``mask`` is true
        (default: all); returns (and keeps) the saturation report of the commanded legs."""
        mask = np.ones(6, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(6)
        clamped, report = self.platform.saturate(targets)
        self.legs.command_position(clamped, mask)
        report = SaturationReport(tuple(s for s in report.legs if mask[s.leg - 1]))
        self.saturation = report
        return report

    def command_pose(self, position, euler_xyz) -> SaturationReport:
        """Track a pose through inverse kinematics; the legs it would push past their stroke are clamped."""
        return self.command_lengths(self.platform.leg_lengths(position, euler_xyz))

    def freeze(self, mask=None) -> None:
        """Stop the legs where ``mask`` (6,) is true (default: all) where they are, and hold them."""
        self.legs.freeze(mask)

    def step(self, dt_s: float) -> None:
        """Advance by ``dt_s`` seconds: move the legs, then solve the pose they give."""
        self.legs.step(dt_s)
        self.t += dt_s
        lengths = self.legs.position
        if self.pose_valid and np.array_equal(lengths, self._pose_lengths):
            return  # at rest: the pose is the one already solved
        try:
            self._pose = self.platform.forward(lengths, guess=self._pose)
        except ValueError as err:  # NoConvergence, or a leg of zero length when the stroke allows it
            self.pose_valid, self.pose_error = False, str(err)
            return
        self._pose_lengths = lengths.copy()
        self.pose_valid, self.pose_error = True, None
