"""A simulated SCARA arm: two joint servos with velocity, acceleration and joint limits.

Each joint is a :class:`sim.servo.ServoAxes` axis: it tracks a position or a
velocity target, its speed capped at ``max_velocity_rad_s`` and changed by at
most ``max_acceleration_rad_s2``; at a joint limit it stops dead and
:attr:`ScaraSim.at_limit` says so (+1 upper, −1 lower). A position target
beyond a limit is clipped to it (:attr:`ScaraSim.target_clipped`). The tool
position is the forward kinematics of the joints (:class:`robotics.kinematics.scara.Scara`).

The encoders read the joint angles plus Gaussian noise of ``encoder_noise_rad``
(default 0) drawn from the caller's generator, one draw per joint per reading;
nothing reads a clock.

Defaults are the arm of ``config/bodies/scara.xml``: links 0.30 m and 0.20 m,
q1 in ±170°, q2 in ±150°, 2 and 3 rad/s, 10 and 15 rad/s².

>>> arm = ScaraSim(ScaraParams())
>>> arm.command_positions((0.5, 1.0))
>>> for _ in range(300):
...     arm.step(0.01)
>>> np.round(arm.q, 6).tolist(), [round(v, 4) for v in arm.tool_xy]
([0.5, 1.0], [0.2774, 0.3433])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from robotics.kinematics.scara import Scara
from sim.servo import ServoAxes

__all__ = ["ScaraParams", "ScaraSim"]

_PAIRS = ("q_min_rad", "q_max_rad", "max_velocity_rad_s", "max_acceleration_rad_s2")


@dataclass(frozen=True)
class ScaraParams:
    """Geometry and drive limits of the simulated arm (SI; pairs are (joint 1, joint 2))."""

    l1_m: float = 0.30
    l2_m: float = 0.20
    q_min_rad: tuple[float, float] = (math.radians(-170.0), math.radians(-150.0))
    q_max_rad: tuple[float, float] = (math.radians(170.0), math.radians(150.0))
    max_velocity_rad_s: tuple[float, float] = (2.0, 3.0)
    max_acceleration_rad_s2: tuple[float, float] = (10.0, 15.0)
    encoder_noise_rad: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if len(values) != (2 if f.name in _PAIRS else 1) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values
            ):
                raise ValueError(f"scara sim: {f.name} must be {'a pair of ' if f.name in _PAIRS else 'a '}"
                                 f"finite number{'s' if f.name in _PAIRS else ''}, got {value!r}")
        Scara(self.l1_m, self.l2_m, self.q_min_rad, self.q_max_rad)  # checks the lengths and limits
        if min(self.max_velocity_rad_s) <= 0 or min(self.max_acceleration_rad_s2) <= 0:
            raise ValueError("scara sim: max_velocity_rad_s and max_acceleration_rad_s2 must be > 0")
        if self.encoder_noise_rad < 0:
            raise ValueError("scara sim: encoder_noise_rad must be >= 0")

    @classmethod
    def from_config(cls, table: Mapping[str, Any]) -> ScaraParams:
        """From a config table of the same keys, limits optionally in degrees (``q_min_deg``, ``q_max_deg``).

        Unknown keys are refused by name.

        >>> ScaraParams.from_config({"l1_m": 0.4, "q_max_deg": [90, 120]}).q_max_rad[0] == math.radians(90)
        True
        """
        known = {f.name for f in fields(cls)} | {"q_min_deg", "q_max_deg"}
        unknown = sorted(str(k) for k in table if k not in known)
        if unknown:
            raise ValueError(f"scara sim: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        kwargs: dict[str, Any] = {}
        for key, value in table.items():
            if key.endswith("_deg"):
                target = key.replace("_deg", "_rad")
                if target in table:
                    raise ValueError(f"scara sim: give {key} or {target}, not both")
                kwargs[target] = tuple(math.radians(_number(key, v)) for v in _pair(key, value))
            elif isinstance(value, (list, tuple)):
                kwargs[key] = tuple(_number(key, v) for v in _pair(key, value))
            else:
                kwargs[key] = _number(key, value)
        return cls(**kwargs)


def _pair(key: str, value: Any) -> tuple:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"scara sim: {key} must be a pair [joint 1, joint 2], got {value!r}")
    return tuple(value)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"scara sim: {key} must hold finite numbers, got {value!r}")
    return float(value)


class ScaraSim:
    """The arm's two joints; ``rng`` feeds the encoder noise (unused when it is 0).

    ``q0`` (rad) is the start configuration, inside the limits.
    """

    def __init__(self, params: ScaraParams, rng: np.random.Generator | None = None, q0=(0.0, 0.0)) -> None:
        self.params = params
        self.arm = Scara(params.l1_m, params.l2_m, params.q_min_rad, params.q_max_rad)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.joints = ServoAxes(params.q_min_rad, params.q_max_rad, params.max_velocity_rad_s,
                                params.max_acceleration_rad_s2, position=q0)
        self.t = 0.0

    @property
    def q(self) -> np.ndarray:
        """True joint angles (2,) rad."""
        return self.joints.position.copy()

    @property
    def qd(self) -> np.ndarray:
        """True joint rates (2,) rad/s."""
        return self.joints.velocity.copy()

    @property
    def tool_xy(self) -> tuple[float, float]:
        """True tool position (x, y), m, base frame."""
        return self.arm.forward(self.joints.position)

    @property
    def at_limit(self) -> np.ndarray:
        """(2,) int: +1 on the upper joint limit, −1 on the lower, 0 between."""
        return self.joints.at_limit

    @property
    def target_clipped(self) -> np.ndarray:
        """(2,) bool: the last position target of that joint lay beyond its limits and was clipped."""
        return self.joints.target_clipped.copy()

    def measured_q(self) -> np.ndarray:
        """Encoder readings (2,) rad: the angles plus noise (one draw per joint)."""
        sigma = self.params.encoder_noise_rad
        return self.q + (self.rng.normal(0.0, sigma, 2) if sigma > 0 else 0.0)

    def command_positions(self, q_target, mask=(True, True)) -> None:
        """Track joint angles ``q_target`` (2,) rad on the joints where ``mask`` is true."""
        self.joints.command_position(q_target, mask)

    def command_velocities(self, qd_target, mask=(True, True)) -> None:
        """Track joint rates ``qd_target`` (2,) rad/s on the joints where ``mask`` is true."""
        self.joints.command_velocity(qd_target, mask)

    def freeze(self, mask=(True, True)) -> None:
        """Stop the joints where ``mask`` is true where they are, and hold them."""
        self.joints.freeze(mask)

    def step(self, dt_s: float) -> None:
        """Advance the simulation by ``dt_s`` seconds."""
        self.joints.step(dt_s)
        self.t += dt_s
