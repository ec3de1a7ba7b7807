"""The Stewart platform's controller: pose targets → a ramped pose reference → six leg lengths.

Setpoints (:mod:`server.runtime_api.params`): ``pose`` (a target pose: centre in the base frame,
X-Y-Z Euler angles), ``follow`` (streamed poses: trajectory runs) and ``hold``. Each tick the
pose reference (:class:`~server.runtime.controllers.ramp.Ramp` over x, y, z, roll, pitch,
yaw) moves toward the target within ``max_speed_m_s`` / ``max_angular_speed_deg_s`` and their
accelerations; inverse kinematics (seeds/003: ``L_i = |t + R·p_i − b_i|``) gives the legs,
which are clamped to the *soft* stroke (the legs' stroke, narrowed by the driver's actuator
ranges, minus ``stroke_margin_m``) before they go to the drives: no command leaves the stroke.

A pose target that needs a leg outside the soft stroke, at the target or anywhere on the
straight way there from the current reference, is refused (422 ``out_of_stroke``, naming the
legs and by how much) — unless ``[robot] saturate = true``: then it is accepted and the
legs are saturated (the paper's Saturation block), which the controller reports as an event
(``saturation`` when legs start or change, ``saturation_end``) and in every snapshot
(``command.saturated_legs``). A target where the Jacobian is singular is refused
(``singular``). The supervisor's limit rules (:meth:`StewartController.limit_rules`) e-stop
on a leg at its end stop or read outside its stroke, and on a pose forward kinematics lost.

>>> from robotics.kinematics.stewart import StewartPlatform
>>> c = StewartController(StewartPlatform.symmetric())
>>> c.check(StewartPose(z_m=0.8))
Traceback (most recent call last):
...
server.errors.ValidationError: pose needs legs outside their stroke: leg 1 at 0.8661 m is 116.1 mm above ...
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from robotics.kinematics import NoConvergence
from robotics.kinematics.stewart import StewartPlatform
from robotics.trajectory import POSE_AXES, STEWART_SERIES, Trajectory, stewart_series
from server.config import ConfigError
from server.errors import ValidationError
from server.runtime.controllers.base import Command
from server.runtime.controllers.ramp import Ramp, ReferenceController
from server.runtime.controllers.scara import check_speeds
from server.runtime.controllers.tables import StewartLimits, StewartRobot
from server.runtime.supervisor import Rule
from server.runtime_api.params import Hold, StewartFollow, StewartPose

#: straight-line samples checked between the reference and a new target
PATH_SAMPLES = 24
#: smallest singular value of the leg Jacobian, relative to the largest, of an acceptable target
SINGULAR_RCOND = 1e-6


class StewartController(ReferenceController):
    """See the module docstring. ``platform`` carries the legs' stroke; the soft stroke is
    ``[leg_min + margin_m, leg_max − margin_m]``."""

    profile = "stewart"
    robot_type = StewartRobot
    limits_type = StewartLimits
    setpoint_type = StewartPose | StewartFollow | Hold
    behaviours = frozenset({"trajectory"})
    commands = (Command("pose", StewartPose),)
    axes = POSE_AXES
    rate_channels = tuple(f"leg{i}_m_s" for i in range(1, 7))
    target_type = StewartPose
    follow_type = StewartFollow
    reach_tolerance = (0.001, 0.001, 0.001, 0.002, 0.002, 0.002)

    def __init__(self, platform: StewartPlatform, *, margin_m: float = 0.0, saturate: bool = False,
                 max_speed_m_s: float = 0.2, max_angular_speed_rad_s: float = math.radians(60.0),
                 max_acceleration_m_s2: float = 1.0, max_angular_acceleration_rad_s2: float = math.radians(300.0),
                 actuators: tuple[str, ...] = tuple(f"leg{i}_target_m" for i in range(1, 7)),
                 time_scale: float = 1.0, ttl_max_s: float = 10.0) -> None:
        self.platform = platform
        home = platform.home
        self.soft = StewartPlatform(platform.base_joints, platform.platform_joints, platform.leg_min + margin_m,
                                    platform.leg_max - margin_m, home=home)
        self.saturate = bool(saturate)
        v = [max_speed_m_s] * 3 + [max_angular_speed_rad_s] * 3
        a = [max_acceleration_m_s2] * 3 + [max_angular_acceleration_rad_s2] * 3
        super().__init__(Ramp([-np.inf] * 6, [np.inf] * 6, v, a, np.concatenate(home)), time_scale, ttl_max_s)
        self.actuator_names = actuators
        self.lengths = self.soft.leg_lengths(*home)
        self.saturation = self.soft.saturate(self.lengths)[1]
        self.saturated_ticks = 0
        self._saturated: tuple[int, ...] = ()

    @classmethod
    def from_profile(cls, profile: Any, driver: Any) -> StewartController:
        r = profile.robot
        acts = driver.actuators()
        names = tuple(f"leg{i}_target_m" for i in range(1, 7))
        missing = [n for n in names if n not in acts]
        if missing:
            raise ConfigError(f"[robot] profile 'stewart' needs the actuators leg1_target_m … leg6_target_m; "
                              f"the driver lacks {', '.join(missing)}")
        lo = np.maximum(r.leg_min_m, [acts[n][0] for n in names])
        hi = np.minimum(r.leg_max_m, [acts[n][1] for n in names])
        try:
            platform = StewartPlatform.symmetric(r.base_radius_m, r.platform_radius_m, math.radians(r.base_spread_deg),
                                                 math.radians(r.platform_spread_deg), lo, hi)
            platform.home  # noqa: B018 - raises when no level pose puts the legs at mid-stroke
        except ValueError as err:
            raise ConfigError(f"{profile.source}: [robot] stewart geometry: {err}") from None
        if np.any(hi - lo <= 2 * r.stroke_margin_m):
            raise ConfigError(f"{profile.source}: the leg stroke of [robot] and the driver leaves no room to move")
        return cls(platform, margin_m=r.stroke_margin_m, saturate=r.saturate, max_speed_m_s=r.max_speed_m_s,
                   max_angular_speed_rad_s=math.radians(r.max_angular_speed_deg_s),
                   max_acceleration_m_s2=r.max_acceleration_m_s2,
                   max_angular_acceleration_rad_s2=math.radians(r.max_angular_acceleration_deg_s2),
                   actuators=names, time_scale=driver.time_scale, ttl_max_s=profile.limits.ttl_max_s)

    # ------------------------------------------------------------------ checks (any thread)
    def check(self, sp: Any) -> None:
        if not isinstance(sp, (StewartPose, StewartFollow)):
            return
        sp.check(self.limits())
        target = np.array([getattr(sp, a) for a in self.axes])
        if isinstance(sp, StewartFollow):
            return  # a run's samples were checked when it was loaded (prepare)
        report = self.soft.saturate(self.soft.leg_lengths(target[:3], target[3:]))[1]
        if report.saturated and not self.saturate:
            raise ValidationError(f"pose needs legs outside their stroke: {report}", code="out_of_stroke")
        j = self.soft.jacobian(target[:3], target[3:])
        s = np.linalg.svd(j, compute_uv=False)
        if not s[-1] > SINGULAR_RCOND * s[0]:
            raise ValidationError(f"pose is singular (leg Jacobian singular values {s[-1]:.3g}/{s[0]:.3g}): the "
                                  "platform could not hold it", code="singular")
        if not self.saturate:
            start = self.ramp.pos.copy()
            for k in range(1, PATH_SAMPLES):
                p = start + (target - start) * (k / PATH_SAMPLES)
                report = self.soft.saturate(self.soft.leg_lengths(p[:3], p[3:]))[1]
                if report.saturated:
                    raise ValidationError(f"the straight way from the current pose to the target leaves the stroke "
                                          f"{100 * k / PATH_SAMPLES:.0f} % of the way: {report}; go through a pose in "
                                          "between", code="out_of_stroke")

    # ------------------------------------------------------------------ the tick
    def _track(self, sp: Any, h: float) -> None:
        target = [getattr(sp, a) for a in self.axes] if isinstance(sp, StewartPose) else None
        if isinstance(sp, StewartFollow):
            self.ramp.follow(target, h)
        elif target is not None:
            self.ramp.to_position(target, h)
        else:
            self.ramp.brake(h)

    def _command(self) -> dict[str, float]:
        p = self.ramp.pos
        lengths, report = self.soft.saturate(self.soft.leg_lengths(p[:3], p[3:]))
        self.lengths, self.saturation = lengths, report
        legs = tuple(s.leg for s in report.legs)
        if legs:
            self.saturated_ticks += 1
        if legs != self._saturated:
            if legs:
                self._note("saturation", f"legs saturated: {report}", "warning",
                           {"legs": list(legs), "report": report.to_json()})
            else:
                self._note("saturation_end", "no leg saturated any more", "info", {"legs": list(self._saturated)})
            self._saturated = legs
        return {name: float(v) for name, v in zip(self.actuator_names, lengths)}

    def _measure(self, values: dict[str, float]) -> np.ndarray | None:
        if values.get("pose_valid", 1.0) < 0.5:
            return None
        return super()._measure(values)

    def saturated_legs(self) -> tuple[int, ...]:
        return self._saturated

    def saturation_report(self) -> list[dict[str, float]]:
        return self.saturation.to_json()

    def command_json(self) -> dict[str, Any]:
        p, v = self.ramp.pos, self.ramp.vel
        out: dict[str, Any] = {a: float(x) for a, x in zip(self.axes, p)}
        out.update({f"leg{i + 1}_m": float(x) for i, x in enumerate(self.lengths)})
        out["speed_m_s"] = float(np.linalg.norm(v[:3]))
        out["saturated_legs"] = list(self._saturated)
        out["saturated_ticks"] = self.saturated_ticks
        return out

    # ------------------------------------------------------------------ description and safety
    def limits(self) -> dict[str, Any]:
        # a box no reachable pose leaves (the kinematics refuse the rest: out_of_stroke)
        reach = float(np.max(self.platform.leg_max) + np.max(np.linalg.norm(self.platform.base_joints, axis=1))
                      + np.max(np.linalg.norm(self.platform.platform_joints, axis=1)))
        a = math.pi / 2 - 1e-3
        return {"x_m": [-reach, reach], "y_m": [-reach, reach], "z_m": [-reach, reach],
                "roll_rad": [-a, a], "pitch_rad": [-a, a], "yaw_rad": [-math.pi, math.pi],
                "leg_m": [float(np.min(self.soft.leg_min)), float(np.max(self.soft.leg_max))],
                "speed_m_s": [0.0, float(self.ramp.v_max[0])], "angular_speed_rad_s": [0.0, float(self.ramp.v_max[3])],
                "ttl_max_s": self.ttl_max_s}

    def describe(self) -> dict[str, Any]:
        home = np.concatenate(self.platform.home)
        return {
            "limits": self.limits(),
            "geometry": {"base_joints_m": self.platform.base_joints.tolist(),
                         "platform_joints_m": self.platform.platform_joints.tolist(),
                         "leg_min_m": self.platform.leg_min.tolist(), "leg_max_m": self.platform.leg_max.tolist(),
                         "soft_leg_min_m": self.soft.leg_min.tolist(), "soft_leg_max_m": self.soft.leg_max.tolist(),
                         "home": dict(zip(self.axes, home.tolist())), "saturate": self.saturate},
            "trajectory": {"series": list(STEWART_SERIES), "axes": list(self.axes)},
            "scheme": {"kind": "stewart", "channels": list(self.axes)},
        }

    def limit_rules(self, channels: set[str]) -> list[Rule]:
        """Supervisor rules: a leg at its end stop or read outside its stroke, or the pose lost, e-stops."""
        rules = []
        for i in range(1, 7):
            if f"leg{i}_saturated" in channels:
                rules.append(Rule(name=f"leg{i}_at_stroke_end", channel=f"leg{i}_saturated", above=0.5,
                                  message=f"leg {i} at an end of its stroke"))
            if f"leg{i}_m" in channels:
                lo, hi = float(self.platform.leg_min[i - 1]), float(self.platform.leg_max[i - 1])
                rules.append(Rule(name=f"leg{i}_below_stroke", channel=f"leg{i}_m", below=lo,
                                  message=f"leg {i} shorter than its stroke {lo:.4g} m"))
                rules.append(Rule(name=f"leg{i}_above_stroke", channel=f"leg{i}_m", above=hi,
                                  message=f"leg {i} longer than its stroke {hi:.4g} m"))
        if "pose_valid" in channels:
            rules.append(Rule(name="pose_lost", channel="pose_valid", below=0.5,
                              message="platform pose lost (forward kinematics failed)"))
        return rules

    # ------------------------------------------------------------------ trajectories
    def series(self, name: str, amplitude: float | None = None) -> Trajectory:
        if name not in STEWART_SERIES:
            raise ValidationError(f"unknown series {name!r}; known: {', '.join(STEWART_SERIES)}", code="invalid")
        position, euler = self.platform.home
        try:
            return stewart_series(name, position, euler, amplitude=amplitude)
        except ValueError as err:
            raise ValidationError(str(err), code="invalid") from None

    def prepare(self, tr: Trajectory) -> Trajectory:
        """``tr`` over the six pose axes (a missing one held at home), each segment within the speeds and, unless
        the profile saturates, every sample within the soft stroke (the first outside named); 422 otherwise."""
        unknown = [a for a in tr.axes if a not in self.axes]
        if unknown:
            raise ValidationError(f"a stewart trajectory has the columns t_s and some of {', '.join(self.axes)}; "
                                  f"unknown: {', '.join(unknown)}", code="invalid")
        home = np.concatenate(self.platform.home)
        values = np.column_stack([tr.column(a) if a in tr.axes else np.full(len(tr), home[j])
                                  for j, a in enumerate(self.axes)])
        check_speeds(tr.times_s, values, self.axes, self.ramp.v_max)
        for i, row in enumerate(values):
            try:
                lengths = self.soft.leg_lengths(row[:3], row[3:])
            except (ValueError, NoConvergence) as err:  # pragma: no cover - leg_lengths takes any finite pose
                raise ValidationError(f"sample at t = {tr.times_s[i]:g} s: {err}", code="invalid") from None
            report = self.soft.saturate(lengths)[1]
            if report.saturated and not self.saturate:
                raise ValidationError(f"the sample at t = {tr.times_s[i]:g} s needs legs outside their stroke: "
                                      f"{report}", code="out_of_stroke")
        return Trajectory(tr.times_s, values, self.axes)
