"""The simulated Stewart platform as a driver (registry name ``sim-stewart``): :class:`sim.stewart.StewartSim`
behind the :class:`Driver` interface, with the plumbing of :mod:`drivers.sim.arm`.

Actuators: ``leg1_target_m`` … ``leg6_target_m``, the length each linear
actuator tracks, within its stroke ``[leg_min_m, leg_max_m]`` (a target beyond it
is refused by the driver base: the controller saturates with
:meth:`robotics.kinematics.stewart.StewartPlatform.saturate` and reports, or
refuses, before writing). A leg left out keeps its last target.

Channels: ``leg1_m`` … ``leg6_m`` (length sensors), ``leg1_m_s`` … ``leg6_m_s``
(rates), the achieved pose ``x_m``, ``y_m``, ``z_m``, ``roll_rad``, ``pitch_rad``,
``yaw_rad`` (forward kinematics of the achieved lengths, warm-started from the
last pose; platform centre in the base frame, X-Y-Z Euler angles), the
saturation flags ``leg1_saturated`` … ``leg6_saturated`` (1 while the leg sits at
an end of its stroke) and ``pose_valid`` (0 while forward kinematics fails, the
pose channels then holding the last solved pose). ``Frame.truth``: the true
``lengths``, ``position``, ``euler_xyz``, ``at_limit`` (−1/0/+1 per leg) and
``pose_error``.

Settings (the ``[driver]`` table, :class:`drivers.sim.config.StewartSimTable`, every key optional):
``seed``, ``time_scale``,
``rate_hz`` (default the loop rate), ``max_read_dt_s``, ``start_pose``
(``[x_m, y_m, z_m, roll_deg, pitch_deg, yaw_deg]``, default the home pose), the
geometry — ``base_radius_m``, ``platform_radius_m``, ``base_spread_deg``,
``platform_spread_deg`` (the symmetric 6-6 layout of
:meth:`~robotics.kinematics.stewart.StewartPlatform.symmetric`), or
``base_joints_m`` and ``platform_joints_m`` (6 × [x, y, z] each) for any other;
``leg_min_m``, ``leg_max_m`` — and the actuators: ``max_velocity_m_s``,
``max_acceleration_m_s2``, ``length_noise_m`` (:class:`sim.stewart.ActuatorParams`).
Geometry keys missing from ``[driver]`` are taken from ``[robot]`` when it has
them, so the controller's kinematics and the simulated platform agree.

>>> d = StewartSimDriver(time_scale=10.0)
>>> d.open(); d.activate()
>>> d.write({f"leg{i}_target_m": 0.65 for i in range(1, 7)})
True
>>> for _ in range(10):
...     frame = d.read(0.01)                       # 1 s of sim time
>>> round(frame.values["leg1_m"], 6), round(frame.values["z_m"], 4), frame.values["pose_valid"]
(0.65, 0.5589, 1.0)
>>> d.close()
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from drivers.base import ChannelSpec
from drivers.errors import DriverConfigError
from drivers.sim.arm import HOLD, SimArmDriver, build
from drivers.sim.config import STEWART_ACTUATORS, STEWART_GEOMETRY, StewartSimTable
from drivers.tables import convert_table
from robotics.kinematics.stewart import StewartPlatform
from sim.stewart import ActuatorParams, StewartSim

__all__ = ["StewartSimDriver"]

_LEGS = tuple(range(1, 7))
_POSE = ("x_m", "y_m", "z_m", "roll_rad", "pitch_rad", "yaw_rad")


def _platform(geometry: Mapping[str, Any]) -> StewartPlatform:
    """The platform from the geometry keys (symmetric layout unless joints are given; the table checked the
    types and which keys go together)."""
    leg_min, leg_max = geometry.get("leg_min_m", 0.45), geometry.get("leg_max_m", 0.75)
    try:
        if "base_joints_m" in geometry:
            platform = StewartPlatform(geometry["base_joints_m"], geometry["platform_joints_m"], leg_min, leg_max)
        else:
            platform = StewartPlatform.symmetric(
                geometry.get("base_radius_m", 0.5), geometry.get("platform_radius_m", 0.3),
                math.radians(geometry.get("base_spread_deg", 20.0)),
                math.radians(geometry.get("platform_spread_deg", 100.0)), leg_min, leg_max,
            )
        platform.home  # noqa: B018 - raises when no level pose puts the legs at mid-stroke
    except ValueError as err:
        raise DriverConfigError("leg_min_m" if "leg_min" in str(err) else "", str(err)) from err
    return platform


class StewartSimDriver(SimArmDriver):
    """The simulated platform; see the module docstring. Bad arguments raise :class:`ValueError`."""

    name = "sim-stewart"
    axes = tuple(f"leg{i}" for i in _LEGS)

    def __init__(self, platform: StewartPlatform | None = None, actuators: ActuatorParams | None = None, *,
                 start_pose=None, **common: Any) -> None:
        self.platform = platform or StewartPlatform.symmetric()
        self.actuator_params = actuators or ActuatorParams()
        if start_pose is not None:
            position, euler = (np.asarray(v, dtype=float).reshape(3) for v in start_pose)
            report = self.platform.saturate(self.platform.leg_lengths(position, euler))[1]
            if report.saturated:
                raise ValueError(f"start_pose needs legs outside their stroke: {report}")
            start_pose = (position, euler)
        self.start_pose = start_pose
        super().__init__(**common)

    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> StewartSimDriver:
        """The ``[driver]`` table, geometry keys defaulting to ``[robot]``'s (see the module docstring)."""
        t = convert_table(table, StewartSimTable)
        t.check_layout()
        robot = profile.get("robot", {})
        geometry = t.given(STEWART_GEOMETRY)
        if not geometry:  # the driver table describes the platform whole, or [robot] does
            geometry = {k: robot[k] for k in STEWART_GEOMETRY if k in robot}
        platform = _platform(geometry)
        try:
            actuators = ActuatorParams.from_config(t.given(STEWART_ACTUATORS))
        except ValueError as err:
            raise DriverConfigError("", str(err).removeprefix("stewart sim: ")) from err
        start_pose = None
        if t.start_pose is not None:
            start_pose = (t.start_pose[:3], np.radians(t.start_pose[3:]))
        common = t.common(profile.get("loop", {}).get("rate_hz", 100.0))
        return build(cls, platform, actuators, start_pose=start_pose, **common)

    # ---- description ----------------------------------------------------------------------------
    def actuators(self) -> dict[str, tuple[float, float]]:
        lo, hi = self.platform.leg_min, self.platform.leg_max
        return {f"leg{i}_target_m": (float(lo[i - 1]), float(hi[i - 1])) for i in _LEGS}

    def _describe_channels(self) -> list[ChannelSpec]:
        lo, hi = self.platform.leg_min, self.platform.leg_max
        v = self.actuator_params.max_velocity_m_s
        reach = float(np.max(hi))
        specs = [ChannelSpec(f"leg{i}_m", "m", float(lo[i - 1]), float(hi[i - 1]), "bar", f"Leg {i}", plot=True,
                             decimals=4) for i in _LEGS]
        specs += [ChannelSpec(f"leg{i}_m_s", "m/s", -v, v, "digital", f"Leg {i} rate", decimals=4) for i in _LEGS]
        specs += [ChannelSpec(name, "m", -reach, reach, "digital", label, plot=True, decimals=4)
                  for name, label in (("x_m", "Platform x"), ("y_m", "Platform y"), ("z_m", "Platform z"))]
        specs += [ChannelSpec(name, "rad", -math.pi, math.pi, "digital", label, plot=True, decimals=4)
                  for name, label in (("roll_rad", "Roll"), ("pitch_rad", "Pitch"), ("yaw_rad", "Yaw"))]
        specs += [ChannelSpec(f"leg{i}_saturated", "", 0.0, 1.0, "lamp", f"Leg {i} at stroke end", kind="digital",
                              decimals=0) for i in _LEGS]
        specs.append(ChannelSpec("pose_valid", "", 0.0, 1.0, "lamp", "Pose solved", kind="digital", decimals=0))
        return specs

    # ---- simulation -----------------------------------------------------------------------------
    def _build_sim(self) -> StewartSim:
        return StewartSim(self.platform, self.actuator_params, np.random.default_rng(self.seed), pose=self.start_pose)

    def _command_axes(self, command: Mapping[str, float]) -> dict[int, tuple]:
        return {i - 1: ("position", command[f"leg{i}_target_m"]) for i in _LEGS if f"leg{i}_target_m" in command}

    def _apply(self, sim: StewartSim, desired: tuple[tuple, ...]) -> None:
        hold = np.array([entry == HOLD for entry in desired])
        if hold.any():
            sim.freeze(hold)
        if not hold.all():
            targets = np.array([sim.lengths[i] if entry == HOLD else entry[1] for i, entry in enumerate(desired)])
            sim.command_lengths(targets, ~hold)

    def _sample(self, sim: StewartSim) -> dict[str, float]:
        lengths, rates = sim.measured_lengths(), sim.velocities
        position, euler = sim.pose
        at_limit = sim.at_limit
        values = {}
        for i in _LEGS:
            values[f"leg{i}_m"] = float(lengths[i - 1])
            values[f"leg{i}_m_s"] = float(rates[i - 1])
        values.update(zip(_POSE, map(float, np.concatenate([position, euler]))))
        for i in _LEGS:
            values[f"leg{i}_saturated"] = float(at_limit[i - 1] != 0)
        values["pose_valid"] = float(sim.pose_valid)
        return values

    def _truth(self, sim: StewartSim) -> dict[str, Any]:
        position, euler = sim.pose
        return {"lengths": sim.lengths.tolist(), "position": position.tolist(), "euler_xyz": euler.tolist(),
                "at_limit": sim.at_limit.tolist(), "pose_error": sim.pose_error}
