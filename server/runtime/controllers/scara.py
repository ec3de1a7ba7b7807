"""The SCARA arm's controller: joint targets, joint jogs, tool targets and tool jogs → joint position references.

Setpoints (:mod:`server.runtime_api.params`, tagged by ``kind``): ``joints`` (position targets),
``jog`` (joint velocities), ``tool`` (a tool position through inverse kinematics, with the
elbow the operator chose), ``tool_jog`` (a tool velocity through inverse velocity
kinematics, q̇ = J⁻¹·v), ``follow`` (streamed joint positions: trajectory runs) and
``hold``. Each tick the joint reference (:class:`~server.runtime.controllers.ramp.Ramp`)
moves toward the setpoint within the joint speed and acceleration limits and inside the
*soft* limits (the ``[robot]`` limits, narrowed by the driver's actuator ranges, minus
``limit_margin_deg``), and the reference goes to the drives as position targets — so a
command can never drive a joint into its end stop; the supervisor's limit rules
(:meth:`ScaraController.limit_rules`) e-stop the arm if the telemetry still shows one there.

Refused with a 422 before anything moves (:meth:`ScaraController.check`): a joint target
beyond the soft limits (``beyond_limits``), a tool target outside the reachable annulus
(``unreachable``) or one whose inverse kinematics with that elbow needs a joint beyond its
limits (``beyond_limits``, naming the other elbow when it would do), a tool jog while the arm
is within ``singular_margin_deg`` of stretched or folded (``singular``: J is not invertible
there). A tool jog that runs into that band stops there and says so (an event).

Kinematics: :class:`robotics.kinematics.scara.Scara` (q1 at the base, q2 at the elbow, both
about +z; elbow +1 means q2 in [0, π]).

>>> c = ScaraController(Scara(0.3, 0.2, (-3.0, -2.6), (3.0, 2.6)), v_max=(2.0, 3.0), a_max=(10.0, 15.0))
>>> c.check(ScaraTool(x_m=0.6, y_m=0.0))
Traceback (most recent call last):
...
server.errors.ValidationError: tool target (0.6, 0) m is 0.6 m from the base, outside the reach [0.1, 0.5] m
>>> from server.runtime.supervisor import OutputMode
>>> for _ in range(300):
...     cmd = c.update(0.01, OutputMode.TRACK, ScaraJoints(q1_rad=0.5, q2_rad=1.0))
>>> round(cmd["q1_target_rad"], 6), round(cmd["q2_target_rad"], 6)
(0.5, 1.0)
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from robotics.description import to_svg
from robotics.kinematics import Singular, Unreachable
from robotics.kinematics.scara import Scara
from drivers.base import Capability, Driver, JointLimits, ProgramGenerator
from drivers.errors import ProgramGenerationError
from robotics.trajectory import SCARA_AXES, Trajectory, scara_demo
from server.config import ConfigError
from server.errors import ConflictError, ValidationError
from server.runtime.controllers.base import Command
from server.runtime.controllers.ramp import Ramp, ReferenceController
from server.runtime.controllers.tables import ScaraLimits, ScaraRobot, load_description
from server.runtime.supervisor import Rule
from server.runtime_api.params import (Hold, check_waypoints, ScaraFollow, ScaraJog, ScaraJoints, ScaraTool, ScaraToolJog, beyond_limits)

log = logging.getLogger(__name__)

#: the series a SCARA runs by name
SERIES = ("scara_demo",)


def _actuator(actuators: dict[str, tuple[float, float]], joint: int) -> str:
    for name in (f"q{joint}_target_rad", f"q{joint}"):
        if name in actuators:
            return name
    raise ConfigError(f"[robot] profile 'scara' needs a position actuator for joint {joint} "
                      f"(q{joint}_target_rad or q{joint}); the driver has {', '.join(sorted(actuators)) or 'none'}")


class ScaraController(ReferenceController):
    """See the module docstring. ``arm`` carries the hard joint limits; the soft ones are
    ``arm``'s minus ``margin_rad``."""

    profile = "scara"
    robot_type = ScaraRobot
    limits_type = ScaraLimits
    setpoint_type = ScaraJoints | ScaraJog | ScaraTool | ScaraToolJog | ScaraFollow | Hold
    behaviours = frozenset({"trajectory", "program"})
    commands = (Command("joints", ScaraJoints), Command("jog", ScaraJog), Command("tool", ScaraTool),
                Command("tool_jog", ScaraToolJog))
    axes = SCARA_AXES
    rate_channels = ("q1_rad_s", "q2_rad_s")
    target_type = ScaraJoints
    follow_type = ScaraFollow
    velocity_types = (ScaraJog, ScaraToolJog)
    reach_tolerance = (0.005, 0.005)

    def __init__(self, arm: Scara, v_max=(2.0, 3.0), a_max=(10.0, 15.0), *, margin_rad: float = 0.0,
                 tool_speed_m_s: float = 0.25, singular_margin_rad: float = math.radians(5.0),
                 actuators: tuple[str, str] = ("q1_target_rad", "q2_target_rad"), time_scale: float = 1.0,
                 ttl_max_s: float = 10.0, description: Any = None, programs: ProgramGenerator | None = None) -> None:
        self.arm = arm
        lo, hi = arm.q_min + margin_rad, arm.q_max - margin_rad
        self.soft = Scara(arm.l1, arm.l2, lo, hi)
        super().__init__(Ramp(lo, hi, v_max, a_max), time_scale, ttl_max_s)
        self.tool_speed_m_s = float(tool_speed_m_s)
        self.singular_margin_rad = float(singular_margin_rad)
        self.actuator_names = actuators
        self.description = description
        self.programs = programs  # the driver's program generator (Capability.PROGRAMS), or None
        self._target_of: tuple[Any, np.ndarray] | None = None  # (tool setpoint, its joint solution)
        self._stopped_jog: Any = None  # the tool jog already stopped at the singular band
        self._svg = to_svg(description, y_up=True) if description is not None else None
        self._workspace = {str(e): np.round(o, 4).tolist() for e, o in self.soft.workspace(24).outlines.items()}

    @classmethod
    def from_profile(cls, profile: Any, driver: Driver) -> ScaraController:
        """From ``[robot]`` (a :class:`ScaraRobot`) and the driver's actuators (their ranges narrow the limits)."""
        r = profile.robot
        acts = driver.actuators()
        names = (_actuator(acts, 1), _actuator(acts, 2))
        lo = np.radians(r.q_min_deg)
        hi = np.radians(r.q_max_deg)
        v_max = np.array(r.max_velocity_rad_s, dtype=float)
        for j, name in enumerate(names):
            a_lo, a_hi = acts[name]
            lo[j], hi[j] = max(lo[j], a_lo), min(hi[j], a_hi)
            vel = acts.get(f"q{j + 1}_velocity_rad_s")
            if vel is not None:
                v_max[j] = min(v_max[j], vel[1])
        margin = math.radians(r.limit_margin_deg)
        if np.any(hi - lo <= 2 * margin):
            raise ConfigError(f"{profile.source}: the joint limits of [robot] and the driver leave no room to move")
        return cls(Scara(r.l1_m, r.l2_m, lo, hi), v_max, r.max_acceleration_rad_s2, margin_rad=margin,
                   tool_speed_m_s=r.max_tool_speed_m_s, singular_margin_rad=math.radians(r.singular_margin_deg),
                   actuators=names, time_scale=driver.time_scale,
                   ttl_max_s=profile.limits.ttl_max_s, description=load_description(r.description),
                   programs=driver.program_generator() if driver.has(Capability.PROGRAMS) else None)

    # ------------------------------------------------------------------ checks (any thread)
    def check(self, sp: Any) -> None:
        """422 for a setpoint the arm must not or cannot follow (see the module docstring)."""
        if not isinstance(sp, Hold):
            sp.check(self.limits())
        if isinstance(sp, ScaraTool):
            self._solve(sp)
        elif isinstance(sp, ScaraToolJog) and (sp.vx_m_s or sp.vy_m_s):
            q2 = float(self.ramp.pos[1])
            if abs(math.sin(q2)) < math.sin(self.singular_margin_rad):
                raise ValidationError(
                    f"the arm is {'stretched' if abs(q2) < math.pi / 2 else 'folded'} (q2 = {math.degrees(q2):.1f}°, "
                    f"within {math.degrees(self.singular_margin_rad):g}° of singular): a tool jog is undefined here; "
                    "bend the elbow first (a joint target or jog)", code="singular")

    def _solve(self, sp: ScaraTool) -> np.ndarray:
        p = (sp.x_m, sp.y_m)
        try:
            return self.soft.inverse(p, sp.elbow)
        except Unreachable as err:
            r, (inner, outer) = math.hypot(*p), self.soft.reach
            if not inner - 1e-9 <= r <= outer + 1e-9:
                raise ValidationError(str(err), code="unreachable") from None
            try:
                self.soft.inverse(p, -sp.elbow)
                hint = f"; elbow={-sp.elbow:+d} reaches it"
            except Unreachable:
                hint = "; neither elbow reaches it within the joint limits"
            raise ValidationError(f"{err}{hint}", code="beyond_limits") from None

    # ------------------------------------------------------------------ the tick
    def _track(self, sp: Any, h: float) -> None:
        ramp = self.ramp
        if isinstance(sp, ScaraJoints):
            ramp.to_position((sp.q1_rad, sp.q2_rad), h)
        elif isinstance(sp, ScaraTool):
            if self._target_of is None or self._target_of[0] is not sp:
                self._target_of = (sp, self._solve(sp))
            ramp.to_position(self._target_of[1], h)
        elif isinstance(sp, ScaraJog):
            ramp.at_velocity((sp.q1_rad_s, sp.q2_rad_s), h)
        elif isinstance(sp, ScaraToolJog):
            self._tool_jog(sp, h)
        elif isinstance(sp, ScaraFollow):
            ramp.follow((sp.q1_rad, sp.q2_rad), h)
        else:
            ramp.brake(h)

    def _tool_jog(self, sp: ScaraToolJog, h: float) -> None:
        """q̇ = J⁻¹·v, scaled into the speed limits; q2 kept out of the singular band (it brakes at its edge,
        and the jog stops there: past it the tool could not keep its direction)."""
        ramp, m = self.ramp, self.singular_margin_rad
        q2 = float(ramp.pos[1])
        if (sp.vx_m_s == 0 and sp.vy_m_s == 0) or sp is self._stopped_jog:
            ramp.brake(h)
            return
        band = (m, math.pi - m) if q2 >= 0 else (-math.pi + m, -m)
        try:
            qd = self.arm.inverse_velocity(ramp.pos, (sp.vx_m_s, sp.vy_m_s))
        except Singular:
            qd = np.zeros(2)
        scale = float(np.max(np.abs(qd) / ramp.v_max))  # (at_velocity applies the governor's cap to all of qd)
        if scale > 1.0:
            qd = qd / scale
        at_edge = q2 <= band[0] + 1e-6 and qd[1] < 0 or q2 >= band[1] - 1e-6 and qd[1] > 0
        if at_edge or not np.all(np.isfinite(qd)):
            self._stopped_jog = sp
            self._note("tool_jog_stopped", f"tool jog stopped: q2 = {math.degrees(q2):.1f}° is at the edge of the "
                       f"singular band ({math.degrees(m):g}° from stretched or folded)", "warning",
                       {"q1_rad": float(ramp.pos[0]), "q2_rad": q2})
            ramp.brake(h)
            return
        ramp.at_velocity(qd, h, lower=(-np.inf, band[0]), upper=(np.inf, band[1]))

    def _command(self) -> dict[str, float]:
        q = self.ramp.pos
        return {self.actuator_names[0]: float(q[0]), self.actuator_names[1]: float(q[1])}

    def command_json(self) -> dict[str, float]:
        q, qd = self.ramp.pos, self.ramp.vel
        x, y = self.arm.forward(q)
        return {"q1_rad": float(q[0]), "q2_rad": float(q[1]), "q1_rad_s": float(qd[0]), "q2_rad_s": float(qd[1]),
                "tool_x_m": x, "tool_y_m": y}

    # ------------------------------------------------------------------ description and safety
    def limits(self) -> dict[str, Any]:
        lo, hi, v = self.ramp.lower, self.ramp.upper, self.ramp.v_max
        return {"q1_rad": [float(lo[0]), float(hi[0])], "q2_rad": [float(lo[1]), float(hi[1])],
                "q1_rad_s": [-float(v[0]), float(v[0])], "q2_rad_s": [-float(v[1]), float(v[1])],
                "reach_m": list(self.soft.reach), "tool_speed_m_s": [0.0, self.tool_speed_m_s],
                "hard_q1_rad": [float(self.arm.q_min[0]), float(self.arm.q_max[0])],
                "hard_q2_rad": [float(self.arm.q_min[1]), float(self.arm.q_max[1])],
                "ttl_max_s": self.ttl_max_s}

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "limits": self.limits(),
            "geometry": {"l1_m": self.arm.l1, "l2_m": self.arm.l2,
                         "singular_margin_rad": self.singular_margin_rad},
            "workspace": self._workspace,
            "trajectory": {"series": list(SERIES), "axes": list(self.axes)},
        }
        if self.description is not None:
            tree = self.description
            out["scheme"] = {"kind": "bodies", "svg": self._svg, "dialect": tree.dialect,
                             "bodies": tree.to_json()["bodies"], "channels": {"1": "q1_rad", "2": "q2_rad"},
                             "warnings": list(tree.warnings)}
        return out

    def limit_rules(self, channels: set[str]) -> list[Rule]:
        """Supervisor rules for the joint limits: a joint on its end stop, or read beyond its hard limit, e-stops."""
        rules = []
        for j in (1, 2):
            lo, hi = float(self.arm.q_min[j - 1]), float(self.arm.q_max[j - 1])
            if f"q{j}_at_limit" in channels:
                rules.append(Rule(name=f"q{j}_at_limit", channel=f"q{j}_at_limit", above=0.5,
                                  message=f"joint {j} on its end stop"))
            if f"q{j}_rad" in channels:
                rules.append(Rule(name=f"q{j}_below_limit", channel=f"q{j}_rad", below=lo,
                                  message=f"joint {j} below its limit {math.degrees(lo):.1f}°"))
                rules.append(Rule(name=f"q{j}_above_limit", channel=f"q{j}_rad", above=hi,
                                  message=f"joint {j} above its limit {math.degrees(hi):.1f}°"))
        return rules

    # ------------------------------------------------------------------ trajectories and programs
    def series(self, name: str, amplitude: float | None = None) -> Trajectory:
        if name != "scara_demo":
            raise ValidationError(f"unknown series {name!r} for a scara; known: {', '.join(SERIES)}", code="invalid")
        if amplitude is not None:
            raise ValidationError("scara_demo takes no amplitude", code="invalid")
        return scara_demo()

    def prepare(self, tr: Trajectory) -> Trajectory:
        """``tr`` over (q1_rad, q2_rad), every sample within the soft limits and every segment within the joint
        speeds (the first named); 422 otherwise."""
        if sorted(tr.axes) != sorted(self.axes):
            raise ValidationError(f"a scara trajectory has the columns t_s, q1_rad, q2_rad; got {', '.join(tr.axes)}",
                                  code="invalid")
        values = np.column_stack([tr.column(a) for a in self.axes])
        lo, hi = self.ramp.lower, self.ramp.upper
        bad = np.argwhere((values < lo) | (values > hi))
        if bad.size:
            i, j = bad[0]
            beyond_limits(f"{self.axes[j]} at t = {tr.times_s[i]:g} s", float(values[i, j]), float(lo[j]),
                          float(hi[j]))
        check_speeds(tr.times_s, values, self.axes, self.ramp.v_max)
        return Trajectory(tr.times_s, values, self.axes)

    def program(self, tr: Trajectory) -> dict[str, Any]:
        """The program for the joint motion ``tr`` (waypoints) on this arm's drives, from the driver's generator
        (:attr:`drivers.base.Capability.PROGRAMS`): its own drives where it has them, else direct drives within
        this arm's soft limits and speeds (``axes`` in the answer says which). 409 ``unavailable`` for a driver
        that makes no programs."""
        if self.programs is None:
            raise ConflictError("this arm's driver generates no motion programs", code="unavailable")
        tr = self.prepare(tr)
        check_waypoints(len(tr))  # the runtime API's one limit (MAX_PROGRAM_WAYPOINTS), checked at the edge too
        ramp = self.ramp
        joints = [JointLimits(joint, float(ramp.lower[j]), float(ramp.upper[j]), float(ramp.v_max[j]),
                              float(ramp.a_max[j])) for j, joint in enumerate(("q1", "q2"))]
        t0 = float(tr.times_s[0])
        waypoints = [(float(t) - t0, {"q1": float(row[0]), "q2": float(row[1])})
                     for t, row in zip(tr.times_s, tr.values)]
        try:
            program = self.programs.generate(waypoints, joints)
        except ProgramGenerationError as err:
            raise ValidationError(f"no FAULHABER program for this motion: {err}", code="invalid") from None
        return {"text": program.text, "lines": program.lines, "waypoints": len(waypoints),
                "axes": [{"joint": f"{j.name}_rad", **axis} for j, axis in zip(joints, program.axes)]}


def check_speeds(times_s: np.ndarray, values: np.ndarray, axes: tuple[str, ...], v_max: np.ndarray) -> None:
    """422 ``beyond_limits`` naming the first segment of a trajectory faster than ``v_max`` on some axis."""
    if len(times_s) < 2:
        return
    speed = np.abs(np.diff(values, axis=0)) / np.diff(times_s)[:, None]
    bad = np.argwhere(speed > v_max * (1 + 1e-9))
    if bad.size:
        i, j = bad[0]
        raise ValidationError(f"{axes[j]} moves at {speed[i, j]:.4g}/s between t = {times_s[i]:g} s and "
                              f"{times_s[i + 1]:g} s, beyond its speed limit {v_max[j]:.4g}/s", code="beyond_limits")
