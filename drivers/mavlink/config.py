"""The ``mavlink`` driver's ``[driver]`` table as msgspec Structs (docs/hardware.md, "MAVLink vehicles").

:class:`MavlinkTable` holds the link, identity, limits and timing keys; ``[driver.rangers.<name>]``
(:class:`RangerTable`, one DISTANCE_SENSOR each) and ``[driver.failsafe]`` (:class:`FailsafeTable`, the
vehicle's own GCS failsafe) are structs of their own, so an error names its key:
``rangers.front.orientation: must be <= 39``.

>>> from drivers.tables import convert_table
>>> t = convert_table({"port": "udpin:0.0.0.0:14550", "failsafe": {"set": True}}, MavlinkTable)
>>> t.system_id, t.target_component, t.failsafe.timeout_s, t.failsafe.set
(255, 1, 1.5, True)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from drivers.serial.support import SerialTable, SubTable

_Id = Annotated[int, Meta(ge=1, le=255)]
_Pos = Annotated[float, Meta(gt=0.0, le=10000.0)]


class FailsafeTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The vehicle's GCS failsafe, the second layer under the server's own stops (docs/safety.md).

    ``check``: read its parameters at open and warn when the vehicle would keep driving if the server died;
    ``set``: write them (GCS failsafe on, action Hold, ``timeout_s``); ``require``: refuse to open a vehicle
    whose failsafe is off (after ``set``, if asked)."""

    check: bool = True
    set: bool = False
    require: bool = False
    timeout_s: Annotated[float, Meta(ge=1.0, le=120.0)] = 1.5  # our heartbeat is 2 Hz  # ArduPilot Rover's FS_TIMEOUT default


class RangerTable(SubTable):
    """A rangefinder the autopilot reports as DISTANCE_SENSOR: picked by its ``orientation``
    (MAV_SENSOR_ORIENTATION: 0 forward, 4 back, 2 right, 6 left, 25 down) and, with several of one
    orientation, its ``id``; channel ``range_<name>_m``."""

    orientation: Annotated[int, Meta(ge=0, le=100)] = 0
    id: Annotated[int, Meta(ge=0, le=255)] | None = None
    max_range_m: _Pos = 10.0  # the gauge's scale; the reading beyond the sensor's own max is its max
    label: str = ""


class MavlinkTable(SerialTable):
    """One vehicle on one link. ``port`` is a URL as pymavlink takes it (``udpin:0.0.0.0:14550``,
    ``udpout:192.168.4.1:14550``, ``tcp:127.0.0.1:5760``), a serial device (``/dev/ttyACM0``, with
    ``baudrate``) or a pyserial URL (``socket://``, ``spy://``)."""

    system_id: _Id = 255  # ours: a ground station's
    component_id: _Id = 190  # MAV_COMP_ID_MISSIONPLANNER
    target_system: _Id | None = None  # None: the first vehicle heard
    target_component: _Id = 1  # MAV_COMP_ID_AUTOPILOT1
    autopilot: Literal["auto", "ardupilot", "px4"] = "auto"
    frame: Literal["body_ned", "body_offset_ned"] = "body_ned"
    max_linear_m_s: Annotated[float, Meta(gt=0.0, le=50.0)] = 1.0
    max_angular_rad_s: Annotated[float, Meta(gt=0.0, le=20.0)] = 1.5
    setpoint_rate_hz: Annotated[float, Meta(ge=10.0, le=100.0)] = 20.0  # resend period while active
    max_setpoint_rate_hz: Annotated[float, Meta(ge=10.0, le=200.0)] = 50.0  # a radio's bytes are few
    heartbeat_timeout_s: Annotated[float, Meta(ge=0.2, le=60.0)] = 3.0
    connect_timeout_s: Annotated[float, Meta(ge=0.1, le=120.0)] = 10.0
    command_timeout_s: Annotated[float, Meta(ge=0.1, le=60.0)] = 3.0
    first_sample_timeout_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 1.0
    disarm_on_halt: bool = True
    rc_channels: Annotated[int, Meta(ge=0, le=18)] = 0
    map_size_m: tuple[_Pos, _Pos] = (20.0, 20.0)  # the dashboard's map: its size …
    map_origin_m: tuple[float, float] = (0.0, 0.0)  # … and where on it the EKF origin lies
    failsafe: FailsafeTable = msgspec.field(default_factory=FailsafeTable)
    rangers: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if self.max_setpoint_rate_hz < self.setpoint_rate_hz:
            raise ValueError("max_setpoint_rate_hz must be >= setpoint_rate_hz")


__all__ = ["FailsafeTable", "MavlinkTable", "RangerTable"]
