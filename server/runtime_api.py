"""The runtime API's parameter structs (docs/runtime-api.md), shared by the runtime, which converts
every request's ``params`` with them, and the gateway, which validates bodies with the same ones
at its edge: one definition, two checks."""

from __future__ import annotations

import math
import typing
from typing import Any, Literal

import msgspec

from server.errors import ValidationError


class Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


class EventsParams(msgspec.Struct, forbid_unknown_fields=True):
    limit: int = 100


class EstopParams(msgspec.Struct):
    reason: str = ""


class SetpointParams(msgspec.Struct, forbid_unknown_fields=True):
    setpoint: dict[str, Any]
    ttl_s: float | None = None
    source: str = "http"


class AcquisitionParams(msgspec.Struct, forbid_unknown_fields=True):
    rate_hz: float
    channels: list[str]


class HeadingParams(msgspec.Struct, forbid_unknown_fields=True):
    heading_deg: float


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
    ``standoff_m`` from it (horizontal range from the body origin), at most ``speed_m_s``."""

    marker_id: int | None = None
    standoff_m: float = 0.6
    speed_m_s: float | None = None


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
#: the motion commands of each profile (start, stop, estop, reset, heartbeat are everyone's)
PROFILE_COMMANDS: dict[str, tuple[str, ...]] = {"rover": ("speed",), "scara": ("joints", "jog", "tool", "tool_jog"),
                                                 "stewart": ("pose",)}


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
