"""The runtime API's parameter structs (docs/runtime-api.md), shared by the runtime, which converts
every request's ``params`` with them, and the gateway, which validates bodies with the same ones
at its edge: one definition, two checks."""

from __future__ import annotations

import math
import typing
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from server.errors import ValidationError
from server.validation import check_range


class Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


class EventsParams(msgspec.Struct, forbid_unknown_fields=True):
    limit: int = 100


class EstopParams(msgspec.Struct):
    reason: str = ""


#: where an operator's setpoint may come from (the gateway's transports, the console)
SOURCES = ("http", "websocket", "datachannel", "fleet", "console")


class Stamped(msgspec.Struct, forbid_unknown_fields=True):
    """A stamped command's fields (issue 20, :mod:`server.runtime.freshness`): ``sent_t`` on the runtime's monotonic
    clock (the gateway converted the client's stamp), ``seq`` and ``stream`` (one per socket), ``rtt_s`` (the
    socket's measured round trip, for the latency governor)."""

    sent_t: float | None = None
    seq: Annotated[int, Meta(ge=0, lt=2 ** 53)] | None = None
    stream: Annotated[str, Meta(max_length=64)] | None = None
    rtt_s: Annotated[float, Meta(ge=0.0, le=3600.0)] | None = None

    def stamp(self) -> "Stamped | None":
        """Itself (what :class:`server.runtime.freshness.Freshness` reads), or None for an unstamped command."""
        if self.sent_t is not None and not math.isfinite(self.sent_t):
            raise ValidationError("sent_t must be finite", code="out_of_limits")
        return None if self.sent_t is None and self.seq is None else self


class SetpointParams(Stamped, forbid_unknown_fields=True, kw_only=True):
    setpoint: dict[str, Any]
    ttl_s: float | None = None
    source: str = "http"


class HeartbeatParams(Stamped, forbid_unknown_fields=True):
    pass


class AcquisitionParams(msgspec.Struct, forbid_unknown_fields=True):
    rate_hz: float
    channels: list[str]


#: longest e-stop reason, characters (the gateway replaces a longer one and says so)
MAX_REASON = 200


class Speed(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/speed`` and the websocket's ``speed``: a rover setpoint and its time-to-live (the rover
    controller's setpoint body)."""

    linear: float
    angular: float
    ttl_s: float | None = None

    def check(self, limits: dict[str, Any]) -> "Speed":
        """Against the robot's limits as ``GET /api/robot`` describes them."""
        lo, hi = limits["linear_m_s"]
        check_range("linear", self.linear, lo, hi)
        lo, hi = limits["angular_rad_s"]
        check_range("angular", self.angular, lo, hi)
        if self.ttl_s is not None:
            check_range("ttl_s", self.ttl_s, 0.001, limits["ttl_max_s"])
        return self



class HeadingParams(msgspec.Struct, forbid_unknown_fields=True):
    heading_deg: Annotated[float, Meta(ge=0.0, le=360.0)]  # compass: 0 north, 90 east


class MagParams(msgspec.Struct, forbid_unknown_fields=True):
    revolutions: float | None = None
    rate_rad_s: float | None = None


class UwbParams(msgspec.Struct, forbid_unknown_fields=True):
    pairs: list[list[float]]
    degree: int = 2


class SubscribeParams(msgspec.Struct, forbid_unknown_fields=True):
    topics: list[str]


class DebugParams(msgspec.Struct, forbid_unknown_fields=True):
    command: dict[str, Any]


class DropLinkParams(msgspec.Struct, forbid_unknown_fields=True):
    """``debug_drop_link`` (tests): close every other client's connection ``now``, or the connection of the
    next request another client sends (of ``method``, if given), that request unhandled (an e-stop lost in
    flight)."""

    when: Literal["now", "next_request"] = "next_request"
    method: str | None = None


class PingParams(msgspec.Struct, forbid_unknown_fields=True):
    t: float | None = None


# ---------------------------------------------------------------------- external channels (docs/vision.md)
# The gateway's vision pipeline declares its channels once per connection and sends one measurement per
# processed camera frame (a ``notify``: no reply); :mod:`server.runtime.external` holds them.

#: the sources of external channels and the name prefixes each may publish (a safety rule may name such a
#: channel before any measurement arrived: it is stale, fail safe, until one does)
EXTERNAL_SOURCES: dict[str, tuple[str, ...]] = {"vision": ("vision_", "marker_")}


class ChannelSpecParams(msgspec.Struct, forbid_unknown_fields=True):
    """A channel as ``GET /api/robot`` describes it (``drivers.base.ChannelSpec``), plus ``gauge``: listed with
    the robot's channels (the dashboard shows a widget), else only under ``external``."""

    name: str
    unit: str = ""
    min: float = 0.0
    max: float = 1.0
    widget: str = "digital"
    label: str = ""
    kind: Literal["analog", "digital"] = "analog"
    warn_low: float | None = None
    warn_high: float | None = None
    crit_low: float | None = None
    crit_high: float | None = None
    plot: bool = False
    decimals: int = 2
    gauge: bool = True


class MarkerParams(msgspec.Struct, forbid_unknown_fields=True):
    """One marker of the map: its centre (world, m) and the direction its face looks (ENU, rad)."""

    id: int
    x_m: float
    y_m: float
    yaw_rad: float


class DeclareParams(msgspec.Struct, forbid_unknown_fields=True):
    source: Literal["vision"]
    channels: list[ChannelSpecParams]
    markers: list[MarkerParams] = []


class ObservationParams(msgspec.Struct, forbid_unknown_fields=True):
    """A marker seen in the frame: range (m) and bearing (rad, left positive) from the body origin, with
    their standard deviations."""

    id: int
    range_m: float
    bearing_rad: float
    range_sigma_m: float
    bearing_sigma_rad: float


class MeasurementsParams(msgspec.Struct, forbid_unknown_fields=True):
    """One processed frame: ``sample_t`` its capture time (CLOCK_MONOTONIC s, the runtime's clock), the values
    of the declared channels (null: nothing to say) and the markers of the map it saw."""

    source: Literal["vision"]
    sample_t: float
    channels: dict[str, float | None]
    observations: list[ObservationParams] = []


class GoToMarkerParams(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/go_to_marker``: drive to marker ``marker_id`` (default: the nearest of the map in view) and stop
    ``standoff_m`` from it (horizontal range from the body origin), at most ``speed_m_s``; it fails once the marker
    has been out of view for ``lost_s`` (a slow camera or a busy computer needs longer)."""

    marker_id: Annotated[int, Meta(ge=0, le=100_000)] | None = None
    standoff_m: Annotated[float, Meta(ge=0.2, le=10.0)] = 0.6
    speed_m_s: float | None = None  # within the robot's speed limit, which the struct cannot know
    lost_s: Annotated[float, Meta(ge=0.2, le=10.0)] = 1.5


# ---------------------------------------------------------------------- arms and platforms (docs/arms.md)
# The setpoints of the SCARA and Stewart controllers, tagged by ``kind``: the runtime's ``setpoint`` method
# converts ``params.setpoint`` to the controller's union of them; the gateway validates a command body with
# the one struct its route names (the tag is then optional) and the same ``check`` against ``GET /api/robot``'s
# limits, and the controller checks again (limits, reach, singularity, stroke).

_ARC = 180.0 / math.pi


def beyond_limits(name: str, value: float, lo: float, hi: float) -> None:
    """422 ``beyond_limits`` unless ``lo <= value <= hi`` (a robot's joint, speed or pose limit; angles also in °).

    >>> beyond_limits("q1_rad", 3.1, -2.9, 2.9)
    Traceback (most recent call last):
    ...
    server.errors.ValidationError: q1_rad=3.1 (177.6°) is beyond the limits [-2.9, 2.9] ([-166.2, 166.2]°)
    """
    if not math.isfinite(value):
        raise ValidationError(f"{name} must be a finite number", code="not_finite")
    if lo <= value <= hi:
        return
    text = f"{name}={value:.4g} is beyond the limits [{lo:.4g}, {hi:.4g}]"
    if name.endswith(("_rad", "_rad_s")):
        text = (f"{name}={value:.4g} ({value * _ARC:.1f}°) is beyond the limits [{lo:.4g}, {hi:.4g}] "
                f"([{lo * _ARC:.1f}, {hi * _ARC:.1f}]°)")
    raise ValidationError(text, code="beyond_limits")


def _check_fields(sp: msgspec.Struct, limits: dict[str, Any]) -> None:
    for f in msgspec.structs.fields(sp):
        if f.name in limits:
            lo, hi = limits[f.name]
            beyond_limits(f.name, getattr(sp, f.name), lo, hi)


class _Setpoint(msgspec.Struct, tag_field="kind", forbid_unknown_fields=True, frozen=True):
    def check(self, limits: dict[str, Any]) -> None:
        """Every field against the range of the same name in ``limits`` (as ``GET /api/robot`` gives them)."""
        _check_fields(self, limits)


class Hold(_Setpoint, tag="hold"):
    """Stand still where the reference is (the arms' and the platform's zero setpoint)."""


class ScaraJoints(_Setpoint, tag="joints"):
    """Joint position targets, rad: the controller moves there within its speed and acceleration limits."""

    q1_rad: float
    q2_rad: float


class ScaraJog(_Setpoint, tag="jog"):
    """Joint velocities, rad/s (the arm brakes before its limits)."""

    q1_rad_s: float = 0.0
    q2_rad_s: float = 0.0


class ScaraTool(_Setpoint, tag="tool"):
    """A tool position, m (base frame), reached through inverse kinematics with the given elbow."""

    x_m: float
    y_m: float
    elbow: Literal[1, -1] = 1

    def check(self, limits: dict[str, Any]) -> None:
        inner, outer = limits["reach_m"]
        r = math.hypot(self.x_m, self.y_m)
        if not inner - 1e-9 <= r <= outer + 1e-9:
            raise ValidationError(f"tool target ({self.x_m:g}, {self.y_m:g}) m is {r:.4g} m from the base, outside "
                                  f"the reach [{inner:.4g}, {outer:.4g}] m", code="unreachable")


class ScaraToolJog(_Setpoint, tag="tool_jog"):
    """A tool velocity, m/s (base frame), through inverse velocity kinematics."""

    vx_m_s: float = 0.0
    vy_m_s: float = 0.0

    def check(self, limits: dict[str, Any]) -> None:
        beyond_limits("tool speed (m/s)", math.hypot(self.vx_m_s, self.vy_m_s), 0.0, limits["tool_speed_m_s"][1])


class ScaraFollow(_Setpoint, tag="follow"):
    """Joint positions streamed tick by tick (trajectory runs): followed as given, limited only by speed."""

    q1_rad: float
    q2_rad: float


class StewartPose(_Setpoint, tag="pose"):
    """A platform pose: centre in the base frame (m), X-Y-Z Euler angles (rad); ``z_m`` is required."""

    z_m: float
    x_m: float = 0.0
    y_m: float = 0.0
    roll_rad: float = 0.0
    pitch_rad: float = 0.0
    yaw_rad: float = 0.0


class StewartFollow(StewartPose, tag="follow"):
    """Poses streamed tick by tick (trajectory runs): followed as given, limited only by speed."""


#: gateway command name → the setpoint struct its body is (HTTP route and websocket message type)
ARM_COMMANDS: dict[str, type] = {"joints": ScaraJoints, "jog": ScaraJog, "tool": ScaraTool,
                                 "tool_jog": ScaraToolJog, "pose": StewartPose}
#: longest trajectory or programmed motion, s from its first sample to its last (a day: a run records at most
#: ``MAX_RECORD`` ticks whatever it lasts, and the tick count it sizes its record with stays an integer)
MAX_TRAJECTORY_S = 86_400.0
#: largest |t_s| of a sample, s (unix seconds fit: a CSV exported with wall-clock times still loads)
MAX_SAMPLE_TIME_S = 1e10
#: most waypoints a FAULHABER program takes (one ``SP``/``LA``/``M`` group per joint and segment)
MAX_PROGRAM_WAYPOINTS = 200


def check_trajectory_times(times_s: Any) -> None:
    """422 ``out_of_limits`` naming ``t_s`` unless every sample time is within ±:data:`MAX_SAMPLE_TIME_S` and the
    whole lasts at most :data:`MAX_TRAJECTORY_S` (issue 18: ``t_s = [0, 1e308]`` made a run's tick count
    infinite, and its ``OverflowError`` closed the runtime API connection). ``times_s``: finite, increasing
    (a :class:`robotics.trajectory.Trajectory`'s), checked at the gateway's edge and again in the runtime.

    >>> check_trajectory_times([0.0, 1e308])
    Traceback (most recent call last):
    ...
    server.errors.ValidationError: t_s[1] = 1e+308 s is beyond ±1e+10 s
    >>> check_trajectory_times([0.0, 1e6])
    Traceback (most recent call last):
    ...
    server.errors.ValidationError: t_s spans 1e+06 s (0 to 1e+06 s), more than the 86400 s a trajectory may last
    """
    if len(times_s) == 0:
        return
    first, last = float(times_s[0]), float(times_s[-1])
    for i, t in ((0, first), (len(times_s) - 1, last)):  # increasing: the ends are the extremes
        if not abs(t) <= MAX_SAMPLE_TIME_S:
            raise ValidationError(f"t_s[{i}] = {t:g} s is beyond ±{MAX_SAMPLE_TIME_S:g} s", code="out_of_limits")
    if last - first > MAX_TRAJECTORY_S:
        raise ValidationError(f"t_s spans {last - first:g} s ({first:g} to {last:g} s), more than the "
                              f"{MAX_TRAJECTORY_S:g} s a trajectory may last", code="out_of_limits")


def trajectory_from_columns(columns: Any) -> Any:
    """A :class:`robotics.trajectory.Trajectory` from a body's columns, or 422 naming what is wrong (its
    :class:`ValueError`; an integer too large for a float, naming the column; :func:`check_trajectory_times`).
    The gateway's edge and the runtime build trajectories with this one function."""
    from robotics.trajectory import Trajectory

    try:
        tr = Trajectory.from_columns(columns)
    except ValueError as err:
        raise ValidationError(f"trajectory: {err}", code="invalid") from None
    except OverflowError:  # an integer of hundreds of digits: JSON allows it, a float cannot hold it
        bad = [k for k, col in columns.items() if any(isinstance(x, int) and abs(x) > 2 ** 1023 for x in col)]
        raise ValidationError(f"trajectory: column {', '.join(map(repr, bad)) or '?'} holds an integer beyond a "
                              "float's range", code="out_of_limits") from None
    check_trajectory_times(tr.times_s)
    return tr


def check_waypoints(n: int) -> None:
    """422 ``out_of_limits`` for a program of more than :data:`MAX_PROGRAM_WAYPOINTS` waypoints (the gateway checks
    before it sends them: a program request of thousands of waypoints used to overflow a frame header)."""
    if n > MAX_PROGRAM_WAYPOINTS:
        raise ValidationError(f"a program takes at most {MAX_PROGRAM_WAYPOINTS} waypoints, got {n}: sample the "
                              "motion coarser (step_s)", code="out_of_limits")


class TrajectoryUploadParams(msgspec.Struct, forbid_unknown_fields=True):
    """One part of an uploaded trajectory: columns ``{"t_s": [...], axis: [...]}`` (a request frame holds 64 KiB,
    so the gateway sends a long trajectory in parts; ``part`` counts from 0, a new ``upload`` id starts over)."""

    upload: str
    part: int
    columns: dict[str, list[float]]


class TrajectoryRunParams(msgspec.Struct, forbid_unknown_fields=True):
    """Run a named series (``series``) or the trajectory uploaded as ``upload``."""

    series: str | None = None
    upload: str | None = None
    amplitude: float | None = None


class ReportParams(msgspec.Struct, forbid_unknown_fields=True):
    max_points: int = 400


class ProgramParams(msgspec.Struct, forbid_unknown_fields=True):
    """A programmed joint motion: waypoint ``columns`` (``t_s``, ``q1_rad``, ``q2_rad``), or a named ``series``
    sampled every ``step_s``."""

    columns: dict[str, list[float]] | None = None
    series: str | None = None
    step_s: float = 0.5


# ---------------------------------------------------------------------- missions and experiments (docs/missions.md)
#: most waypoints in one mission
MAX_MISSION_WAYPOINTS = 500
#: the longest hold at a waypoint, s
MAX_HOLD_S = 3600.0
#: waypoints further than this from the origin are refused (a typo in metres, not a place); a robot with a
#: ``[mission] field`` refuses any outside it (the runtime checks)
MAX_COORDINATE_M = 10_000.0


class Waypoint(msgspec.Struct, forbid_unknown_fields=True):
    """A waypoint: a place (world frame, m), optionally a compass heading to turn to there and a hold."""

    x_m: float
    y_m: float
    heading_deg: float | None = None  # 0 north, 90 east
    hold_s: float = 0.0


class MissionParams(msgspec.Struct, forbid_unknown_fields=True):
    """A mission: waypoints in order, the cruise speed (default ``[mission] speed_m_s``), the mode."""

    waypoints: list[Waypoint]
    speed_m_s: float | None = None
    mode: Literal["drive", "step"] = "drive"
    label: str = ""

    def check(self) -> "MissionParams":
        """What needs no robot to check (422 naming the field): the count, finite coordinates within
        :data:`MAX_COORDINATE_M`, holds, headings, the label; the runtime adds its speed limit and its field.

        >>> MissionParams([Waypoint(1.0, float("nan"))]).check()
        Traceback (most recent call last):
        ...
        server.errors.ValidationError: waypoints[0].y_m must be a finite number
        """
        if not 1 <= len(self.waypoints) <= MAX_MISSION_WAYPOINTS:
            raise ValidationError(f"waypoints must hold 1 to {MAX_MISSION_WAYPOINTS} waypoints, got "
                                  f"{len(self.waypoints)}", code="out_of_limits")
        for i, w in enumerate(self.waypoints):
            check_range(f"waypoints[{i}].x_m", w.x_m, -MAX_COORDINATE_M, MAX_COORDINATE_M)
            check_range(f"waypoints[{i}].y_m", w.y_m, -MAX_COORDINATE_M, MAX_COORDINATE_M)
            check_range(f"waypoints[{i}].hold_s", w.hold_s, 0.0, MAX_HOLD_S)
            if w.heading_deg is not None:
                check_range(f"waypoints[{i}].heading_deg", w.heading_deg, 0.0, 360.0)
        if self.speed_m_s is not None:
            check_range("speed_m_s", self.speed_m_s, 0.02, 10.0)
        if len(self.label) > 128:
            raise ValidationError("label must be at most 128 characters", code="out_of_limits")
        return self


class ExperimentParams(msgspec.Struct, forbid_unknown_fields=True):
    """``experiment_run``: the experiment's name and its parameters (its own struct; ``{}``: the paper's)."""

    name: str
    params: dict[str, Any] = {}


def setpoint_from(obj: dict[str, Any], setpoint_type: Any) -> Any:
    """``obj`` as one of the structs of ``setpoint_type`` (a struct, or a union of structs tagged by ``kind``).

    >>> setpoint_from({"kind": "jog", "q1_rad_s": 0.1}, ScaraJog | Hold)
    ScaraJog(q1_rad_s=0.1, q2_rad_s=0.0)
    >>> setpoint_from({"kind": "pose", "z_m": 0.5}, ScaraJog | Hold)
    Traceback (most recent call last):
    ...
    server.errors.ValidationError: setpoint kind must be one of hold, jog; got 'pose'
    """
    from server.validation import convert

    types = typing.get_args(setpoint_type) or (setpoint_type,)
    if len(types) == 1:
        return convert(obj, types[0])
    by_kind = {t.__struct_config__.tag: t for t in types}
    kind = obj.get("kind")
    if kind not in by_kind:
        raise ValidationError(f"setpoint kind must be one of {', '.join(sorted(by_kind))}; got {kind!r}",
                              code="invalid")
    return convert({k: v for k, v in obj.items() if k != "kind"}, by_kind[kind])
