"""The simulated SCARA arm as a driver (registry name ``sim-scara``): :class:`sim.scara.ScaraSim`
behind the :class:`Driver` interface, with the plumbing of :mod:`drivers.sim_arm`.

Actuators (each joint takes a position *or* a velocity target; one command may
not give both for a joint, and a joint left out keeps its last target):

======================  ===================================================
``q1_target_rad``       joint 1 position target, within its limits
``q2_target_rad``       joint 2 position target
``q1_velocity_rad_s``   joint 1 velocity (jog), within ± its speed limit
``q2_velocity_rad_s``   joint 2 velocity
======================  ===================================================

Channels: ``q1_rad``, ``q2_rad`` (encoders), ``q1_rad_s``, ``q2_rad_s``,
``tool_x_m``, ``tool_y_m`` (forward kinematics of the encoder readings, base
frame), ``q1_at_limit``, ``q2_at_limit`` (1 while the joint sits on a limit).
``Frame.truth``: the true ``q``, ``qd``, ``tool_xy``, ``at_limit`` (−1/0/+1 per
joint) and ``target_clipped``.

Settings (the ``[driver]`` table, every key optional): ``seed``, ``time_scale``,
``rate_hz`` (default the loop rate), ``max_read_dt_s``, ``start_q_deg`` ([q1, q2]),
and the arm — ``l1_m``, ``l2_m``, ``q_min_deg``, ``q_max_deg`` (or ``_rad``),
``max_velocity_rad_s``, ``max_acceleration_rad_s2`` (pairs), ``encoder_noise_rad``
— see :class:`sim.scara.ScaraParams`. Arm keys missing from ``[driver]`` are taken
from ``[robot]`` when it has them, so the controller's kinematics and the
simulated arm share one geometry.

>>> d = ScaraSimDriver(time_scale=10.0)
>>> d.open(); d.activate()
>>> d.write({"q1_target_rad": 0.5, "q2_velocity_rad_s": 1.0})
True
>>> for _ in range(10):
...     frame = d.read(0.01)                       # 1 s of sim time
>>> round(frame.values["q1_rad"], 6), round(frame.values["q2_rad_s"], 6)
(0.5, 1.0)
>>> d.close()
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from drivers.base import ChannelSpec
from drivers.errors import DriverConfigError
from drivers.sim_arm import COMMON_KEYS, HOLD, SimArmDriver, build, common_settings, exclusive, refuse_unknown
from robotics.kinematics.scara import Scara
from sim.scara import ScaraParams, ScaraSim

__all__ = ["ScaraSimDriver"]

_ARM_KEYS = tuple(f.name for f in fields(ScaraParams)) + ("q_min_deg", "q_max_deg")
_PAIRS = {"q1": ("q1_target_rad", "q1_velocity_rad_s"), "q2": ("q2_target_rad", "q2_velocity_rad_s")}


class ScaraSimDriver(SimArmDriver):
    """The simulated SCARA arm; see the module docstring. Bad arguments raise :class:`ValueError`."""

    name = "sim-scara"
    axes = ("q1", "q2")

    def __init__(self, params: ScaraParams | None = None, *, start_q=(0.0, 0.0), **common: Any) -> None:
        self.params = params or ScaraParams()
        start = np.asarray(start_q, dtype=float).reshape(2)
        lo, hi = np.asarray(self.params.q_min_rad), np.asarray(self.params.q_max_rad)
        if not (np.all(np.isfinite(start)) and np.all(lo <= start) and np.all(start <= hi)):
            raise ValueError(f"start_q {start.tolist()} rad lies outside the joint limits")
        self.start_q = start
        super().__init__(**common)

    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> ScaraSimDriver:
        """The ``[driver]`` table, arm keys defaulting to ``[robot]``'s (see the module docstring)."""
        refuse_unknown(table, COMMON_KEYS + _ARM_KEYS + ("start_q_deg",))
        common = common_settings(table, profile)
        robot = profile.get("robot", {})
        arm = {k: table[k] for k in _ARM_KEYS if k in table}
        for key in _ARM_KEYS:
            twin = key.replace("_deg", "_rad") if key.endswith("_deg") else key.replace("_rad", "_deg")
            if key in robot and key not in arm and twin not in arm:
                arm[key] = robot[key]
        try:
            params = ScaraParams.from_config(arm)
        except ValueError as err:
            raise DriverConfigError("", str(err).removeprefix("scara sim: ")) from err
        start = table.get("start_q_deg", [0.0, 0.0])
        if not (isinstance(start, (list, tuple)) and len(start) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in start)):
            raise DriverConfigError("start_q_deg", "must be [q1, q2] in degrees")
        if not Scara(params.l1_m, params.l2_m, params.q_min_rad, params.q_max_rad).within_limits(np.radians(start)):
            raise DriverConfigError("start_q_deg", f"{list(start)} lies outside the joint limits")
        return build(cls, params, start_q=np.radians(start), **common)

    # ---- description ----------------------------------------------------------------------------
    def actuators(self) -> dict[str, tuple[float, float]]:
        p = self.params
        return {
            "q1_target_rad": (p.q_min_rad[0], p.q_max_rad[0]),
            "q2_target_rad": (p.q_min_rad[1], p.q_max_rad[1]),
            "q1_velocity_rad_s": (-p.max_velocity_rad_s[0], p.max_velocity_rad_s[0]),
            "q2_velocity_rad_s": (-p.max_velocity_rad_s[1], p.max_velocity_rad_s[1]),
        }

    def _describe_channels(self) -> list[ChannelSpec]:
        p = self.params
        reach = p.l1_m + p.l2_m
        specs = []
        for j in (0, 1):
            n = j + 1
            lo, hi, v = p.q_min_rad[j], p.q_max_rad[j], p.max_velocity_rad_s[j]
            specs.append(ChannelSpec(f"q{n}_rad", "rad", lo, hi, "dial", f"Joint {n}", plot=True, decimals=3))
            specs.append(ChannelSpec(f"q{n}_rad_s", "rad/s", -v, v, "dial", f"Joint {n} rate", plot=True,
                                     decimals=3))
        specs += [
            ChannelSpec("tool_x_m", "m", -reach, reach, "digital", "Tool x", plot=True, decimals=4),
            ChannelSpec("tool_y_m", "m", -reach, reach, "digital", "Tool y", plot=True, decimals=4),
            ChannelSpec("q1_at_limit", "", 0.0, 1.0, "lamp", "Joint 1 at limit", kind="digital", decimals=0),
            ChannelSpec("q2_at_limit", "", 0.0, 1.0, "lamp", "Joint 2 at limit", kind="digital", decimals=0),
        ]
        return specs

    # ---- simulation -----------------------------------------------------------------------------
    def _build_sim(self) -> ScaraSim:
        return ScaraSim(self.params, np.random.default_rng(self.seed), q0=self.start_q)

    def _command_axes(self, command: Mapping[str, float]) -> dict[int, tuple]:
        exclusive(command, _PAIRS)
        changes = {}
        for axis, (position, velocity) in enumerate(_PAIRS.values()):
            if position in command:
                changes[axis] = ("position", command[position])
            elif velocity in command:
                changes[axis] = ("velocity", command[velocity])
        return changes

    def _apply(self, sim: ScaraSim, desired: tuple[tuple, ...]) -> None:
        for axis, entry in enumerate(desired):
            mask = [axis == 0, axis == 1]
            if entry == HOLD:
                sim.freeze(mask)
            elif entry[0] == "position":
                sim.command_positions([entry[1]] * 2, mask)
            else:
                sim.command_velocities([entry[1]] * 2, mask)

    def _sample(self, sim: ScaraSim) -> dict[str, float]:
        q = sim.measured_q()
        qd = sim.qd
        x, y = sim.arm.forward(q)
        at_limit = sim.at_limit
        return {
            "q1_rad": float(q[0]), "q1_rad_s": float(qd[0]), "q2_rad": float(q[1]), "q2_rad_s": float(qd[1]),
            "tool_x_m": float(x), "tool_y_m": float(y),
            "q1_at_limit": float(at_limit[0] != 0), "q2_at_limit": float(at_limit[1] != 0),
        }

    def _truth(self, sim: ScaraSim) -> dict[str, Any]:
        return {"q": sim.q.tolist(), "qd": sim.qd.tolist(), "tool_xy": list(sim.tool_xy),
                "at_limit": sim.at_limit.tolist(), "target_clipped": sim.target_clipped.tolist()}
