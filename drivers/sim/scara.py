"""The simulated SCARA arm as a driver (registry name ``sim-scara``): :class:`sim.scara.ScaraSim`
behind the :class:`Driver` interface, with the plumbing of :mod:`drivers.sim.arm`.

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
frame), ``q1_at_limit``, ``q2_at_limit`` (1 while the joint sits on a limit); with an
``[driver.imu]`` table, ``imu_acc_{x,y,z}_m_s2`` and ``imu_gyro_{x,y,z}_rad_s``: a virtual IMU
(:class:`sim.imu.VirtualImu`, seeds/000) fixed to link ``link`` (2: the forearm) at ``lever_arm_m``
in that link's frame (x along the link from its joint, z up, the arm in the horizontal plane),
sampled from the true joint angles; its error keys are the rover's IMU's
(:class:`drivers.sim.config.ScaraImuTable`).
``Frame.truth``: the true ``q``, ``qd``, ``tool_xy``, ``at_limit`` (−1/0/+1 per
joint) and ``target_clipped``. Capability: motion programs
(:meth:`ScaraSimDriver.program_generator`), FAULHABER ASCII for direct drives, as the
arm's drives would run them.

Settings (the ``[driver]`` table, :class:`drivers.sim.config.ScaraSimTable`, every key optional): ``seed``, ``time_scale``,
``rate_hz`` (default the loop rate), ``max_read_dt_s``, ``start_q_deg`` ([q1, q2]), ``imu`` (a table),
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
from typing import Any, Mapping

import numpy as np

from drivers.base import Capability, ChannelSpec, ProgramGenerator
from drivers.errors import DriverConfigError
from drivers.sim.arm import HOLD, SimArmDriver, build, exclusive
from drivers.sim.config import SCARA_ARM, ScaraImuTable, ScaraSimTable
from drivers.tables import convert_table
from robotics.estimation.attitude import rotation_zyx
from robotics.kinematics.scara import Scara
from sim.imu import VirtualImu
from sim.scara import ScaraParams, ScaraSim

__all__ = ["ScaraSimDriver"]

_PAIRS = {"q1": ("q1_target_rad", "q1_velocity_rad_s"), "q2": ("q2_target_rad", "q2_velocity_rad_s")}


class ScaraSimDriver(SimArmDriver):
    """The simulated SCARA arm; see the module docstring. Bad arguments raise :class:`ValueError`."""

    name = "sim-scara"
    axes = ("q1", "q2")
    # the simulated arm stands for direct FAULHABER drives (node 1 and 2, 2048 increments per turn, no gear)
    capabilities = frozenset({Capability.PROGRAMS})

    def __init__(self, params: ScaraParams | None = None, *, start_q=(0.0, 0.0), imu: ScaraImuTable | None = None,
                 **common: Any) -> None:
        self.params = params or ScaraParams()
        self.imu_table = imu if imu is not None and imu.enabled else None
        self._imu: VirtualImu | None = None
        self._imu_t = -math.inf
        self._imu_out = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        start = np.asarray(start_q, dtype=float).reshape(2)
        lo, hi = np.asarray(self.params.q_min_rad), np.asarray(self.params.q_max_rad)
        if not (np.all(np.isfinite(start)) and np.all(lo <= start) and np.all(start <= hi)):
            raise ValueError(f"start_q {start.tolist()} rad lies outside the joint limits")
        self.start_q = start
        super().__init__(**common)

    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> ScaraSimDriver:
        """The ``[driver]`` table, arm keys defaulting to ``[robot]``'s (see the module docstring)."""
        t = convert_table(table, ScaraSimTable)
        robot = profile.get("robot", {})
        arm = t.given(SCARA_ARM)
        for key in SCARA_ARM:
            twin = key.replace("_deg", "_rad") if key.endswith("_deg") else key.replace("_rad", "_deg")
            if key in robot and key not in arm and twin not in arm:
                arm[key] = robot[key]
        try:
            params = ScaraParams.from_config(arm)
        except ValueError as err:
            raise DriverConfigError("", str(err).removeprefix("scara sim: ")) from err
        start = list(t.start_q_deg)
        if not Scara(params.l1_m, params.l2_m, params.q_min_rad, params.q_max_rad).within_limits(np.radians(start)):
            raise DriverConfigError("start_q_deg", f"{start} lies outside the joint limits")
        common = t.common(profile.get("loop", {}).get("rate_hz", 100.0))
        return build(cls, params, start_q=np.radians(start), imu=t.imu, **common)

    def program_generator(self) -> ProgramGenerator:
        """FAULHABER programs for direct drives within the joints' limits (the simulated arm has no drives of
        its own to describe)."""
        from drivers.faulhaber.programmer import FaulhaberProgramGenerator

        return FaulhaberProgramGenerator()

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
        if self.imu_table is not None:
            specs += [ChannelSpec(f"imu_acc_{a}_m_s2", "m/s²", -40.0, 40.0, "digital", f"Link {self.imu_table.link} "
                                  f"accel {a}", decimals=4) for a in "xyz"]
            specs += [ChannelSpec(f"imu_gyro_{a}_rad_s", "rad/s", -35.0, 35.0, "digital", f"Link {self.imu_table.link} "
                                  f"gyro {a}", decimals=4) for a in "xyz"]
        return specs

    # ---- simulation -----------------------------------------------------------------------------
    def _build_sim(self) -> ScaraSim:
        if self.imu_table is not None:  # a fresh sensor (its own seeded stream) every open
            kw = self.imu_table.imu(True)
            rng = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(2)[1])
            self._imu = VirtualImu(kw["gravity"], lever_arm_m=kw["lever_arm_m"], noise=kw["noise"], rng=rng)
            self._imu_t = -math.inf
            self._imu_out = (0.0, 0.0, kw["gravity"], 0.0, 0.0, 0.0)
        return ScaraSim(self.params, np.random.default_rng(self.seed), q0=self.start_q)

    def link_pose(self, q) -> tuple[np.ndarray, np.ndarray]:
        """(origin (3,) m, R_world_link (3, 3)) of the IMU's link at joint angles ``q``: link 1 turns about the
        base (the world origin), link 2 about the elbow; both in the horizontal plane (z up)."""
        q1, q2 = float(q[0]), float(q[1])
        if self.imu_table is None or self.imu_table.link == 1:
            return np.zeros(3), rotation_zyx(0.0, 0.0, q1)
        l1 = self.params.l1_m
        return np.array([l1 * math.cos(q1), l1 * math.sin(q1), 0.0]), rotation_zyx(0.0, 0.0, q1 + q2)

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
        values = {
            "q1_rad": float(q[0]), "q1_rad_s": float(qd[0]), "q2_rad": float(q[1]), "q2_rad_s": float(qd[1]),
            "tool_x_m": float(x), "tool_y_m": float(y),
            "q1_at_limit": float(at_limit[0] != 0), "q2_at_limit": float(at_limit[1] != 0),
        }
        if self._imu is not None:
            if sim.t > self._imu_t:  # a second sample at the same instant repeats the last one
                origin, rot = self.link_pose(sim.q)
                acc, gyro = self._imu.update(sim.t, origin, rot)
                self._imu_out = (*acc.tolist(), *gyro.tolist())
                self._imu_t = sim.t
            for name, v in zip(("imu_acc_x_m_s2", "imu_acc_y_m_s2", "imu_acc_z_m_s2", "imu_gyro_x_rad_s",
                                "imu_gyro_y_rad_s", "imu_gyro_z_rad_s"), self._imu_out):
                values[name] = float(v)
        return values

    def _truth(self, sim: ScaraSim) -> dict[str, Any]:
        return {"q": sim.q.tolist(), "qd": sim.qd.tolist(), "tool_xy": list(sim.tool_xy),
                "at_limit": sim.at_limit.tolist(), "target_clipped": sim.target_clipped.tolist()}
