"""MAVLink 2 as a sans-IO codec (pymavlink's ``ardupilotmega`` dialect), and the words the driver says in it.

Frame (MAVLink 2, https://mavlink.io/en/guide/serialization.html)::

    FD len incompat compat seq sysid compid msgid(3, LE) payload(len, trailing zeros cut) crc(2, LE) [signature(13)]

The CRC is X.25 over everything after ``FD`` plus the message's CRC_EXTRA byte, so a frame of a message
this dialect does not know cannot be checked and comes out as :class:`~drivers.serial.codec.Invalid`
(pymavlink's ``robust_parsing``: garbage, a bad CRC or an unknown id never raise; they are counted by the
link and the parser resynchronises on the next ``FD``). pymavlink does the framing and the CRC; this module
keeps the pieces the driver needs as plain functions, tested with byte literals
(``tests/drivers/test_mavlink_codec.py``):

* :class:`MavlinkCodec`: bytes in → messages out (the :class:`~drivers.serial.codec.Decoder` protocol),
  a message → bytes (the sequence number advances under a lock: several threads send);
* :func:`velocity_setpoint`: SET_POSITION_TARGET_LOCAL_NED in ``MAV_FRAME_BODY_NED`` with type mask
  ``0x05E7`` (position, vz, accelerations and yaw ignored: forward speed and yaw rate used), the one
  ArduPilot Rover documents for "velocity and yaw rate" in GUIDED; PX4 takes the same in OFFBOARD;
* :class:`Flavour`: the autopilot's mode numbers (ArduPilot Rover ``custom_mode``; PX4's main/sub modes
  packed in ``custom_mode`` as ``main << 16 | sub << 24``) and how to ask for them (MAV_CMD_DO_SET_MODE);
* frames: MAVLink is NED (x north, y east, z down; FRD body, yaw clockwise from north), the project is
  ENU / REP-103 (x east, y north; yaw counter-clockwise from east; pitch positive nose-down):
  :func:`enu_from_ned`, :func:`yaw_enu_from_ned`, and the signs in :func:`attitude_rep103`.

>>> c = MavlinkCodec(255, 190)
>>> frame = c.encode(velocity_setpoint(c, 1, 1, 0.5, 0.0))
>>> frame[0], frame[7:10]                     # MAVLink 2 start byte, msgid 84 little-endian
(253, b'T\\x00\\x00')
>>> [m.get_type() for m in MavlinkCodec(1, 1).feed(frame)]
['SET_POSITION_TARGET_LOCAL_NED']
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from pymavlink.dialects.v20 import ardupilotmega as mavlink

from drivers.serial.codec import Invalid
from robotics.angles import wrap_pi

#: SET_POSITION_TARGET_LOCAL_NED type mask: ignore x, y, z, vz, ax, ay, az and yaw → use vx, vy and yaw rate
#: (ArduPilot Rover, "Rover Commands in Guided Mode": "Use Vel+Yaw Rate: 0b010111100111 / 0x05E7 / 1511")
VELOCITY_YAW_RATE_MASK = 0x05E7
FRAMES = {"body_ned": mavlink.MAV_FRAME_BODY_NED, "body_offset_ned": mavlink.MAV_FRAME_BODY_OFFSET_NED}
#: COMMAND_ACK results that mean "done" / "will not"
ACCEPTED = mavlink.MAV_RESULT_ACCEPTED
RESULT_NAMES_BY_VALUE = {k: v.name.removeprefix("MAV_RESULT_") for k, v in mavlink.enums["MAV_RESULT"].items()}
#: MAV_PARAM_TYPE_REAL32: ArduPilot sends every parameter as a float
PARAM_REAL32 = mavlink.MAV_PARAM_TYPE_REAL32
#: the STATUSTEXT severities (0 emergency … 7 debug) that are warnings or worse
WARNING = mavlink.MAV_SEVERITY_WARNING
ARMED_FLAG = mavlink.MAV_MODE_FLAG_SAFETY_ARMED
CUSTOM_MODE_FLAG = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
#: a heartbeat from one of these is not a vehicle (ground stations, our own echo, an onboard computer)
NOT_A_VEHICLE = {mavlink.MAV_TYPE_GCS, mavlink.MAV_TYPE_ONBOARD_CONTROLLER, mavlink.MAV_TYPE_ADSB,
                 mavlink.MAV_TYPE_GIMBAL, mavlink.MAV_TYPE_CAMERA}


class MavlinkCodec:
    """Our side of the link: ``system_id``/``component_id`` on what we send; any sender's frames decoded.

    A parser (``feed``, the reader thread) and a packer (``encode``, any thread, under a lock) of their own:
    pymavlink's object keeps both the receive buffer and the send sequence number.
    """

    def __init__(self, system_id: int, component_id: int) -> None:
        self.system_id = system_id
        self.component_id = component_id
        self.mav = mavlink.MAVLink(None, srcSystem=system_id, srcComponent=component_id)
        self._rx = mavlink.MAVLink(None, srcSystem=system_id, srcComponent=component_id)
        self._rx.robust_parsing = True
        self._lock = threading.Lock()

    def feed(self, data: bytes) -> list[object]:
        """Bytes from the link → messages, with :class:`Invalid` for what did not decode (never raises)."""
        out: list[object] = []
        try:
            msgs = self._rx.parse_buffer(data) or ()
        except Exception as err:  # noqa: BLE001 - robust_parsing should cover it; a parser bug is bad data too
            self._rx = mavlink.MAVLink(None, srcSystem=self.system_id, srcComponent=self.component_id)
            self._rx.robust_parsing = True
            return [Invalid(f"parser error: {err}", bytes(data[:32]))]
        for msg in msgs:
            if isinstance(msg, mavlink.MAVLink_bad_data):
                reason = str(getattr(msg, "reason", "bad data"))
                out.append(Invalid(reason, bytes(getattr(msg, "data", b""))[:32], crc="CRC" in reason))
            else:
                out.append(msg)
        return out

    def encode(self, msg: Any) -> bytes:
        """One message as a MAVLink 2 frame (the next sequence number)."""
        with self._lock:
            data = msg.pack(self.mav)
            self.mav.seq = (self.mav.seq + 1) % 256  # pack() does not advance it (MAVLink.send() would, and write)
            return data


# ---------------------------------------------------------------------- what the driver sends
def gcs_heartbeat(c: MavlinkCodec) -> Any:
    """We are a ground station (MAV_TYPE_GCS, no autopilot): what the vehicle's GCS failsafe listens for."""
    return c.mav.heartbeat_encode(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0,
                                  mavlink.MAV_STATE_ACTIVE)


def velocity_setpoint(c: MavlinkCodec, target_system: int, target_component: int, forward_m_s: float,
                      yaw_rate_ned_rad_s: float, frame: str = "body_ned", time_boot_ms: int = 0) -> Any:
    """Forward speed (body x) and yaw rate (NED: positive turns right) as SET_POSITION_TARGET_LOCAL_NED.

    >>> m = velocity_setpoint(MavlinkCodec(255, 190), 1, 1, -0.25, 0.5)
    >>> m.type_mask == VELOCITY_YAW_RATE_MASK, m.coordinate_frame, m.vx, m.vy, m.yaw_rate
    (True, 8, -0.25, 0.0, 0.5)
    """
    return c.mav.set_position_target_local_ned_encode(
        time_boot_ms & 0xFFFFFFFF, target_system, target_component, FRAMES[frame], VELOCITY_YAW_RATE_MASK,
        0.0, 0.0, 0.0, forward_m_s, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, yaw_rate_ned_rad_s)


def command_long(c: MavlinkCodec, target_system: int, target_component: int, command: int,
                 *params: float) -> Any:
    p = [float(x) for x in params] + [0.0] * (7 - len(params))
    return c.mav.command_long_encode(target_system, target_component, command, 0, *p)


def arm_command(c: MavlinkCodec, target_system: int, target_component: int, arm: bool) -> Any:
    """MAV_CMD_COMPONENT_ARM_DISARM (never forced: the autopilot's checks stand)."""
    return command_long(c, target_system, target_component, mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1.0 if arm else 0.0)


def message_interval_command(c: MavlinkCodec, target_system: int, target_component: int, msg_id: int,
                             rate_hz: float) -> Any:
    """MAV_CMD_SET_MESSAGE_INTERVAL: ``rate_hz`` ≤ 0 stops the stream (interval −1)."""
    interval_us = -1.0 if rate_hz <= 0 else 1e6 / rate_hz
    return command_long(c, target_system, target_component, mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, msg_id, interval_us)


def param_read(c: MavlinkCodec, target_system: int, target_component: int, name: str) -> Any:
    return c.mav.param_request_read_encode(target_system, target_component, name.encode(), -1)


def param_set(c: MavlinkCodec, target_system: int, target_component: int, name: str, value: float) -> Any:
    return c.mav.param_set_encode(target_system, target_component, name.encode(), float(value), PARAM_REAL32)


def param_name(msg: Any) -> str:
    """A PARAM_VALUE's id as text (pymavlink gives str or bytes, NUL-padded)."""
    pid = msg.param_id
    if isinstance(pid, bytes):
        pid = pid.decode("ascii", "replace")
    return pid.rstrip("\x00")


def status_text(msg: Any) -> str:
    text = msg.text
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text.rstrip("\x00").strip()


# ---------------------------------------------------------------------- the autopilots' modes
@dataclass(frozen=True)
class Flavour:
    """An autopilot family: which ``custom_mode`` is the one we drive in and the one we hold in."""

    name: str
    drive_mode: int  # GUIDED (ArduPilot) / OFFBOARD (PX4)
    hold_mode: int  # HOLD (ArduPilot) / AUTO.LOITER (PX4's Hold)
    drive_name: str
    #: PX4 leaves OFFBOARD unless setpoints already stream when it is asked; s of zero setpoints first
    prestream_s: float = 0.0

    def mode_params(self, custom_mode: int) -> tuple[float, ...]:
        """MAV_CMD_DO_SET_MODE's params for ``custom_mode``."""
        if self.name == "px4":
            return (float(CUSTOM_MODE_FLAG), float((custom_mode >> 16) & 0xFF), float((custom_mode >> 24) & 0xFF))
        return (float(CUSTOM_MODE_FLAG), float(custom_mode))

    def mode_name(self, custom_mode: int) -> str:
        """``GUIDED``, ``HOLD`` … (``mode 42`` when unknown)."""
        names = PX4_MODE_NAMES if self.name == "px4" else ARDUPILOT_ROVER_MODES
        return names.get(custom_mode, f"mode {custom_mode}")


ARDUPILOT_ROVER_MODES = {v: k.removeprefix("ROVER_MODE_") for k, v in vars(mavlink).items()
                         if k.startswith("ROVER_MODE_") and k != "ROVER_MODE_ENUM_END"}
ARDUPILOT_ROVER_MODES[mavlink.ROVER_MODE_INITIALIZING] = "INITIALISING"


def px4_mode(main: int, sub: int = 0) -> int:
    """PX4's ``custom_mode``: main mode in byte 2, sub mode in byte 3 (px4_custom_mode.h).

    >>> px4_mode(6), px4_mode(4, 3)              # OFFBOARD, AUTO.LOITER (Hold)
    (393216, 50593792)
    """
    return (main << 16) | (sub << 24)


PX4_MODE_NAMES = {px4_mode(1): "MANUAL", px4_mode(2): "ALTCTL", px4_mode(3): "POSCTL", px4_mode(4, 3): "HOLD",
                  px4_mode(4, 4): "MISSION", px4_mode(4, 5): "RTL", px4_mode(5): "ACRO", px4_mode(6): "OFFBOARD",
                  px4_mode(7): "STABILIZED"}
ARDUPILOT = Flavour("ardupilot", mavlink.ROVER_MODE_GUIDED, mavlink.ROVER_MODE_HOLD, "GUIDED")
PX4 = Flavour("px4", px4_mode(6), px4_mode(4, 3), "OFFBOARD", prestream_s=0.5)
FLAVOURS = {"ardupilot": ARDUPILOT, "px4": PX4}


def flavour_of(autopilot: int) -> Flavour | None:
    """The flavour a HEARTBEAT's ``autopilot`` field names (None: neither ArduPilot nor PX4)."""
    if autopilot == mavlink.MAV_AUTOPILOT_ARDUPILOTMEGA:
        return ARDUPILOT
    if autopilot == mavlink.MAV_AUTOPILOT_PX4:
        return PX4
    return None


# ---------------------------------------------------------------------- NED ↔ ENU (REP-103)
def enu_from_ned(north_m: float, east_m: float) -> tuple[float, float]:
    """(x east, y north) from (x north, y east).

    >>> enu_from_ned(3.0, 1.0)
    (1.0, 3.0)
    """
    return east_m, north_m


def yaw_enu_from_ned(yaw_ned_rad: float) -> float:
    """ENU yaw of body x (0 = east, counter-clockwise) from the NED one (0 = north, clockwise).

    >>> round(yaw_enu_from_ned(0.0), 6), round(yaw_enu_from_ned(math.pi / 2), 6)   # north, east
    (1.570796, 0.0)
    """
    return wrap_pi(math.pi / 2 - yaw_ned_rad)


def yaw_ned_from_enu(yaw_enu_rad: float) -> float:
    """The inverse of :func:`yaw_enu_from_ned` (the same formula: the map is its own inverse)."""
    return wrap_pi(math.pi / 2 - yaw_enu_rad)


def attitude_rep103(roll_ned: float, pitch_ned: float, yaw_ned: float) -> tuple[float, float, float]:
    """(roll, pitch, yaw) in the project's convention from ATTITUDE's: roll is right side down in both,
    MAVLink's pitch is nose-up positive (ours nose-down), yaw as :func:`yaw_enu_from_ned`.

    >>> attitude_rep103(0.1, 0.2, 0.0) == (0.1, -0.2, math.pi / 2)
    True
    """
    return roll_ned, -pitch_ned, yaw_enu_from_ned(yaw_ned)


def forward_speed(vn_m_s: float, ve_m_s: float, yaw_ned_rad: float) -> float:
    """The ground velocity (north, east) along body x: signed, so reversing reads negative.

    >>> forward_speed(0.0, 2.0, math.pi / 2), forward_speed(1.0, 0.0, math.pi)   # east facing east; north facing south
    (2.0, -1.0)
    """
    return vn_m_s * math.cos(yaw_ned_rad) + ve_m_s * math.sin(yaw_ned_rad)


__all__ = ["ARDUPILOT", "ACCEPTED", "ARMED_FLAG", "FLAVOURS", "FRAMES", "Flavour", "MavlinkCodec", "NOT_A_VEHICLE",
           "PX4", "RESULT_NAMES_BY_VALUE", "VELOCITY_YAW_RATE_MASK", "arm_command", "attitude_rep103", "command_long", "enu_from_ned",
           "flavour_of", "forward_speed", "gcs_heartbeat", "mavlink", "message_interval_command", "param_name",
           "param_read", "param_set", "px4_mode", "status_text", "velocity_setpoint", "yaw_enu_from_ned",
           "yaw_ned_from_enu"]
