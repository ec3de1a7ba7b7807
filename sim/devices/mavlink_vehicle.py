"""An emulated MAVLink 2 vehicle (ArduPilot Rover by default, or PX4): real frames on a pty, UDP or TCP.

It is what the MAVLink driver is tested against, and what ``make emulate EMULATOR=mavlink`` drives: the
rover physics of :mod:`sim.rover` (wheels, sonars, battery, walls) behind an autopilot's MAVLink face,
with pymavlink's ``ardupilotmega`` dialect for the bytes. MAVSDK-Python (the MAVSDK C++ core, an
independent implementation) reads it and arms it in ``tests/sim/test_mavlink_vehicle_mavsdk.py``, as
pyFirmata2 checks the Firmata emulator.

What it does, as the autopilots do (the ArduPilot Rover source and docs, PX4's docs):

* HEARTBEAT at 1 Hz (MAV_TYPE_GROUND_ROVER; ``custom_mode`` the Rover mode number, or PX4's
  ``main << 16 | sub << 24``), and at once after a mode or arming change (ArduPilot waits for its next
  1 Hz slot: a client that waits for the heartbeat to confirm waits ≤ 1 s more on a real vehicle);
* streams only what it is asked for: MAV_CMD_SET_MESSAGE_INTERVAL per message (−1 off, 0 default) or
  REQUEST_DATA_STREAM per group; MAV_CMD_REQUEST_MESSAGE once; parameters (PARAM_REQUEST_READ/LIST,
  PARAM_SET echoed as PARAM_VALUE); TIMESYNC answered; AUTOPILOT_VERSION on request;
* modes by MAV_CMD_DO_SET_MODE or SET_MODE; arming by MAV_CMD_COMPONENT_ARM_DISARM, refused with a
  ``PreArm: …`` STATUSTEXT (severity CRITICAL) *before* its COMMAND_ACK FAILED, as ArduPilot does, when a
  refusal is injected, the battery is under ``ARMING_VOLT_MIN`` or the mode cannot arm;
* GUIDED: SET_POSITION_TARGET_LOCAL_NED with velocity and yaw rate (accelerations must be ignored, as
  ArduPilot insists), speed ``sign(vx)·|(vx, vy)|``, and the target dropped 3 s after the last one
  ("target not received last 3secs, stopping"); PX4's OFFBOARD needs setpoints streaming before it is
  entered and falls back to HOLD after ``COM_OF_LOSS_T``;
* its own GCS failsafe: armed, with GCS heartbeats seen before and none for ``FS_TIMEOUT`` s
  (``FS_GCS_ENABLE`` on), it switches to HOLD (``FS_ACTION`` 2; PX4: ``NAV_DLL_ACT``/``COM_DL_LOSS_T``)
  and says so (STATUSTEXT) — the second layer under the server's stops;
* telemetry in MAVLink's frames (NED, FRD body), the EKF origin at the world's (0, 0): LOCAL_POSITION_NED
  x is the world's y (north);
* fault injection (:meth:`MavlinkVehicle.inject`): ``heartbeat_drop`` (everything but its heartbeat),
  ``silent``, ``refuse_arm`` (with a reason), ``lag`` (every frame held ``lag_s``), ``garbage`` (random
  bytes), ``crc`` (the next N frames with a wrong checksum), ``clear``.

Deterministic: times are passed in (``receive(data, now_s)``, ``advance(now_s)``), noise comes from its
seeded generator; the runners (:class:`sim.devices.pty.PtyRunner`, :mod:`sim.devices.net`) own the clock.
What it records for tests: every setpoint received with its time (:attr:`MavlinkVehicle.setpoints`),
every mode change with its cause (:attr:`MavlinkVehicle.mode_log`), the failsafe's triggers.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymavlink.dialects.v20 import ardupilotmega as mavlink
from robotics.kinematics.diffdrive import wheel_speeds
from sim.rover import RangerParams, RoverParams, RoverSim
from sim.world import World

logger = logging.getLogger(__name__)

ROVER = {"MANUAL": 0, "ACRO": 1, "STEERING": 3, "HOLD": 4, "LOITER": 5, "AUTO": 10, "RTL": 11, "GUIDED": 15}


def px4_mode(main: int, sub: int = 0) -> int:
    return (main << 16) | (sub << 24)


PX4 = {"MANUAL": px4_mode(1), "POSCTL": px4_mode(3), "HOLD": px4_mode(4, 3), "OFFBOARD": px4_mode(6)}
#: what each flavour calls its modes, its drive and hold modes, and its failsafe parameters
FLAVOURS = {
    "ardupilot": {"autopilot": mavlink.MAV_AUTOPILOT_ARDUPILOTMEGA, "modes": ROVER, "drive": "GUIDED", "hold": "HOLD",
                  "start": "MANUAL", "params": {"FS_GCS_ENABLE": 1.0, "FS_ACTION": 2.0, "FS_TIMEOUT": 1.5,
                                                "ARMING_VOLT_MIN": 0.0, "SYSID_THISMAV": 1.0,
                                                "WP_SPEED": 2.0, "CRUISE_SPEED": 2.0}},
    "px4": {"autopilot": mavlink.MAV_AUTOPILOT_PX4, "modes": PX4, "drive": "OFFBOARD", "hold": "HOLD",
            "start": "MANUAL", "params": {"NAV_DLL_ACT": 1.0, "COM_DL_LOSS_T": 10.0, "COM_OF_LOSS_T": 1.0,
                                          "COM_OBL_RC_ACT": 5.0, "MAV_SYS_ID": 1.0}},
}
#: REQUEST_DATA_STREAM groups (MAV_DATA_STREAM_*) → the messages ArduPilot sends for them
DATA_STREAMS = {
    mavlink.MAV_DATA_STREAM_EXTENDED_STATUS: ("SYS_STATUS", "GPS_RAW_INT", "EKF_STATUS_REPORT"),
    mavlink.MAV_DATA_STREAM_POSITION: ("LOCAL_POSITION_NED", "GLOBAL_POSITION_INT"),
    mavlink.MAV_DATA_STREAM_RC_CHANNELS: ("RC_CHANNELS",),
    mavlink.MAV_DATA_STREAM_EXTRA1: ("ATTITUDE",),
    mavlink.MAV_DATA_STREAM_EXTRA2: ("VFR_HUD",),
    mavlink.MAV_DATA_STREAM_EXTRA3: ("BATTERY_STATUS", "DISTANCE_SENSOR"),
}
DATA_STREAMS[mavlink.MAV_DATA_STREAM_ALL] = tuple(m for group in DATA_STREAMS.values() for m in group)
#: the messages it can stream (and MAV_CMD_REQUEST_MESSAGE can ask for once)
STREAMABLE = ("ATTITUDE", "ATTITUDE_QUATERNION", "LOCAL_POSITION_NED", "GLOBAL_POSITION_INT", "VFR_HUD", "SYS_STATUS",
              "BATTERY_STATUS", "DISTANCE_SENSOR", "RC_CHANNELS", "EKF_STATUS_REPORT", "ESTIMATOR_STATUS", "GPS_RAW_INT",
              "HOME_POSITION", "EXTENDED_SYS_STATE", "SYSTEM_TIME", "AUTOPILOT_VERSION", "SERVO_OUTPUT_RAW")
_ID = {name: getattr(mavlink, f"MAVLINK_MSG_ID_{name}") for name in STREAMABLE}
_NAME = {v: k for k, v in _ID.items()}
#: SET_POSITION_TARGET type-mask bits
_IGNORE_VX, _IGNORE_VY, _IGNORE_ACCEL, _IGNORE_YAW, _IGNORE_YAW_RATE = 8, 16, 64 | 128 | 256, 1024, 2048
#: "target not received last 3secs, stopping" (ArduPilot Rover/mode_guided.cpp)
GUIDED_TIMEOUT_S = 3.0
#: metres per degree of latitude (flat earth around home: the field is small)
_M_PER_DEG = 111_320.0


@dataclass
class VehicleConfig:
    system_id: int = 1
    component_id: int = 1
    autopilot: str = "ardupilot"
    world: dict[str, Any] = field(default_factory=lambda: {"size_m": [20.0, 20.0]})
    start_pose: tuple[float, float, float] = (4.0, 10.0, 0.0)  # x east, y north, ENU yaw (world frame)
    seed: int = 0
    #: 40 rad/s on 5 cm wheels: 2 m/s, a small rover's top speed
    rover: RoverParams = field(default_factory=lambda: RoverParams(
        max_wheel_speed_rad_s=40.0, rangers=(RangerParams("front", max_range_m=8.0, noise_m=0.0),)))
    home_lat_deg: float = 47.397742  # PX4's SITL home, Zürich
    home_lon_deg: float = 8.545594
    params: dict[str, float] = field(default_factory=dict)  # over the flavour's defaults
    #: streams on from the start (message → Hz), as a vehicle's SRx_ parameters make them; off by default
    default_rates_hz: dict[str, float] = field(default_factory=dict)
    guided_timeout_s: float = GUIDED_TIMEOUT_S


class MavlinkVehicle:
    """The emulated vehicle; see the module docstring. Not thread-safe: its runner holds a lock."""

    #: it drives on, and its failsafe counts, with nobody on the line (the pty runner keeps advancing it)
    runs_without_host = True

    def __init__(self, config: VehicleConfig | None = None) -> None:
        self.config = c = config or VehicleConfig()
        self.flavour = FLAVOURS[c.autopilot]
        self.modes: dict[str, int] = self.flavour["modes"]
        self.mode_names = {v: k for k, v in self.modes.items()}
        self.mav = mavlink.MAVLink(None, srcSystem=c.system_id, srcComponent=c.component_id)
        self._rx = mavlink.MAVLink(None, srcSystem=c.system_id, srcComponent=c.component_id)
        self._rx.robust_parsing = True
        self.rng = np.random.default_rng(c.seed)
        self.world = World.from_config(c.world)
        self.sim = RoverSim(c.rover, self.world, self.rng, c.start_pose)
        self.params: dict[str, float] = {**self.flavour["params"], **c.params}
        self.custom_mode = self.modes[self.flavour["start"]]
        self.armed = False
        self.boot_t: float | None = None
        self.last_t: float | None = None
        self.target: tuple[float, float, float] | None = None  # (speed m/s, yaw rate NED rad/s, time)
        self.setpoint_t: float | None = None  # the last setpoint of any kind (PX4's offboard watchdog)
        self.last_gcs_t: float | None = None
        self.gcs_heartbeats = 0
        self.failsafe: str | None = None  # the failsafe in force ("gcs", "offboard")
        self.failsafes: list[tuple[float, str]] = []
        self.intervals: dict[str, float] = {}  # message → period s
        self.due: dict[str, float] = {}
        self.once: list[str] = []
        self.next_heartbeat_t = 0.0
        self.setpoints: list[tuple[float, float, float, int, int]] = []  # (t, vx, yaw_rate, frame, mask)
        self.mode_log: list[tuple[float, str, str]] = []  # (t, mode, cause)
        self.texts: list[tuple[float, int, str]] = []
        self.commands: list[tuple[float, int, int]] = []  # (t, command, result)
        self.frames_in = 0
        self.bad_frames_in = 0
        # faults
        self.heartbeat_drop = False
        self.silent = False
        self.refuse_arm: str | None = None
        self.lag_s = 0.0
        self._garbage = 0
        self._crc = 0
        self._out: deque[tuple[float, bytes]] = deque()
        for name, hz in c.default_rates_hz.items():
            self.intervals[name] = 1.0 / hz

    # ------------------------------------------------------------------ the runner's interface
    def host_opened(self, now_s: float) -> None:
        """A telemetry radio or a USB port opened: nothing resets on the vehicle (it is not an Arduino)."""

    def next_wakeup_s(self, now_s: float) -> float:
        times = [self.next_heartbeat_t, now_s + 0.01]  # the physics steps at 100 Hz while anything moves
        times += [t for t in self.due.values()]
        if self._out:
            times.append(self._out[0][0])
        return min(times)

    def receive(self, data: bytes, now_s: float) -> None:
        self._start(now_s)
        for msg in self._rx.parse_buffer(data) or ():
            if isinstance(msg, mavlink.MAVLink_bad_data):
                self.bad_frames_in += 1
                continue
            self.frames_in += 1
            self._handle(msg, now_s)

    def advance(self, now_s: float) -> bytes:
        self._start(now_s)
        self._physics(now_s)
        self._watchdogs(now_s)
        if now_s >= self.next_heartbeat_t:
            self._heartbeat(now_s)
            self.next_heartbeat_t = max(self.next_heartbeat_t + 1.0, now_s + 0.5)
        for name in self.once:
            self._emit_message(name, now_s)
        self.once.clear()
        for name, period in list(self.intervals.items()):
            due = self.due.setdefault(name, now_s)
            if now_s >= due:
                self._emit_message(name, now_s)
                self.due[name] = due + period if due + period > now_s else now_s + period
        out = bytearray()
        while self._out and self._out[0][0] <= now_s:
            out += self._out.popleft()[1]
        if self._garbage:
            out += self.rng.integers(0, 256, self._garbage, dtype=np.uint8).tobytes()
            self._garbage = 0
        return bytes(out) if not self.silent else b""

    # ------------------------------------------------------------------ fault injection
    def inject(self, kind: str, **kw: Any) -> None:
        """``heartbeat_drop``, ``silent``, ``refuse_arm`` (``reason=``), ``lag`` (``lag_s=``), ``garbage``
        (``count=`` bytes), ``crc`` (``count=`` frames), or ``clear`` (all of them off)."""
        if kind == "heartbeat_drop":
            self.heartbeat_drop = True
        elif kind == "silent":
            self.silent = True
        elif kind == "refuse_arm":
            self.refuse_arm = str(kw.get("reason", "PreArm: Hardware safety switch"))
        elif kind == "lag":
            self.lag_s = float(kw.get("lag_s", 0.5))
        elif kind == "garbage":
            self._garbage += int(kw.get("count", 200))
        elif kind == "crc":
            self._crc += int(kw.get("count", 20))
        elif kind == "clear":
            self.heartbeat_drop = self.silent = False
            self.refuse_arm = None
            self.lag_s = 0.0
            self._garbage = self._crc = 0
        else:
            raise ValueError(f"unknown fault {kind!r}")

    # ------------------------------------------------------------------ state for tests
    @property
    def mode(self) -> str:
        return self.mode_names.get(self.custom_mode, f"mode {self.custom_mode}")

    @property
    def moving(self) -> bool:
        left, right = self.sim.wheel_speeds
        return abs(left) > 0.05 or abs(right) > 0.05

    def zero_setpoints_since(self, t: float) -> list[float]:
        """Arrival times of the zero-velocity setpoints received after ``t``."""
        return [st for st, vx, yr, _, _ in self.setpoints if st >= t and vx == 0.0 and yr == 0.0]

    # ------------------------------------------------------------------ internals
    def _start(self, now_s: float) -> None:
        if self.boot_t is None:
            self.boot_t = self.last_t = now_s
            self.next_heartbeat_t = now_s
            for name in self.intervals:
                self.due[name] = now_s

    def _boot_ms(self, now_s: float) -> int:
        return int((now_s - (self.boot_t or now_s)) * 1000) & 0xFFFFFFFF

    def _send(self, msg: Any, now_s: float) -> None:
        if self.silent:
            return
        data = bytearray(msg.pack(self.mav))
        self.mav.seq = (self.mav.seq + 1) % 256  # pack() leaves the sequence number alone
        if self._crc:
            self._crc -= 1
            data[-1] ^= 0x5A
        self._out.append((now_s + self.lag_s, bytes(data)))

    def _text(self, severity: int, text: str, now_s: float) -> None:
        self.texts.append((now_s, severity, text))
        logger.info("vehicle: %s", text)
        self._send(self.mav.statustext_encode(severity, text.encode()[:50]), now_s)

    def _set_mode(self, mode: int, now_s: float, cause: str) -> bool:
        if mode not in self.mode_names:
            return False
        if self.mode_names[mode] == "OFFBOARD" and (self.setpoint_t is None or now_s - self.setpoint_t > 0.5):
            return False  # PX4: "offboard mode requires a setpoint stream" before it is entered
        if mode != self.custom_mode:
            self.custom_mode = mode
            self.target = None
            self.mode_log.append((now_s, self.mode, cause))
            self._heartbeat(now_s)
        return True

    def _heartbeat(self, now_s: float) -> None:
        if self.heartbeat_drop:
            return
        base = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mavlink.MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0)
        if self.mode_names.get(self.custom_mode) in ("GUIDED", "OFFBOARD"):
            base |= mavlink.MAV_MODE_FLAG_GUIDED_ENABLED
        state = mavlink.MAV_STATE_ACTIVE if self.armed else mavlink.MAV_STATE_STANDBY
        self._send(self.mav.heartbeat_encode(mavlink.MAV_TYPE_GROUND_ROVER, self.flavour["autopilot"], base,
                                             self.custom_mode, state), now_s)

    def _ack(self, command: int, result: int, now_s: float, sysid: int = 0, compid: int = 0) -> None:
        self.commands.append((now_s, command, result))
        self._send(self.mav.command_ack_encode(command, result, 0, 0, sysid, compid), now_s)

    def _physics(self, now_s: float) -> None:
        assert self.last_t is not None
        dt = now_s - self.last_t
        if dt <= 0:
            return
        self.last_t = now_s
        speed, yaw_rate_ned = 0.0, 0.0
        drive = self.mode_names.get(self.custom_mode) == self.flavour["drive"]
        if self.armed and drive and self.target is not None:
            speed, yaw_rate_ned, _ = self.target
        p = self.config.rover
        left, right = wheel_speeds(speed, -yaw_rate_ned, p.track_m, p.wheel_radius_m)
        while dt > 0:  # steps of ≤ 20 ms: a runner that slept long does not jump the rover through a wall
            h = min(dt, 0.02)
            self.sim.step(h, left, right)
            dt -= h

    def _watchdogs(self, now_s: float) -> None:
        if self.target is not None and now_s - self.target[2] > self.config.guided_timeout_s:
            self.target = None
            self._text(mavlink.MAV_SEVERITY_WARNING, "target not received last 3secs, stopping", now_s)
        drive_mode = self.mode_names.get(self.custom_mode) == self.flavour["drive"]
        if self.config.autopilot == "px4" and drive_mode and self.setpoint_t is not None and \
                now_s - self.setpoint_t > self.params["COM_OF_LOSS_T"]:
            self._failsafe("offboard", "Failsafe: offboard setpoints lost, holding", now_s)
        if self.armed and self.last_gcs_t is not None and self.failsafe is None:
            if self.config.autopilot == "px4":
                on, timeout = self.params["NAV_DLL_ACT"] > 0, self.params["COM_DL_LOSS_T"]
            else:
                on, timeout = self.params["FS_GCS_ENABLE"] > 0 and self.params["FS_ACTION"] > 0, \
                    self.params["FS_TIMEOUT"]
            if on and now_s - self.last_gcs_t > timeout:
                self._failsafe("gcs", f"Failsafe: GCS heartbeat lost for {timeout:g} s, holding", now_s)

    def _failsafe(self, cause: str, text: str, now_s: float) -> None:
        self.failsafe = cause
        self.failsafes.append((now_s, cause))
        self._text(mavlink.MAV_SEVERITY_CRITICAL, text, now_s)
        self._set_mode(self.modes[self.flavour["hold"]], now_s, f"failsafe: {cause}")

    # ------------------------------------------------------------------ what it receives
    def _for_us(self, msg: Any) -> bool:
        target = getattr(msg, "target_system", 0)
        return target in (0, self.config.system_id)

    def _handle(self, msg: Any, now_s: float) -> None:
        kind = msg.get_type()
        if kind == "HEARTBEAT":
            if msg.type == mavlink.MAV_TYPE_GCS:
                self.last_gcs_t = now_s
                self.gcs_heartbeats += 1
                if self.failsafe == "gcs":
                    self.failsafe = None
                    self._text(mavlink.MAV_SEVERITY_INFO, "GCS failsafe cleared", now_s)
            return
        if not self._for_us(msg):
            return
        handler = getattr(self, f"_on_{kind.lower()}", None)
        if handler is not None:
            handler(msg, now_s)

    def _on_set_position_target_local_ned(self, m: Any, now_s: float) -> None:
        self.setpoints.append((now_s, float(m.vx), float(m.yaw_rate), m.coordinate_frame, m.type_mask))
        self.setpoint_t = now_s
        if self.failsafe == "offboard":
            self.failsafe = None
        if self.mode_names.get(self.custom_mode) != self.flavour["drive"]:
            return  # ArduPilot ignores guided targets outside GUIDED
        mask = m.type_mask
        if not mask & _IGNORE_ACCEL == _IGNORE_ACCEL:
            self._text(mavlink.MAV_SEVERITY_WARNING, "Ignoring SET_POSITION_TARGET_LOCAL_NED; set ignore accel", now_s)
            return
        use_vel = not mask & (_IGNORE_VX | _IGNORE_VY)
        use_rate = not mask & _IGNORE_YAW_RATE
        speed = math.copysign(math.hypot(m.vx, m.vy), m.vx) if use_vel else 0.0
        speed = max(-self.params.get("WP_SPEED", 2.0), min(self.params.get("WP_SPEED", 2.0), speed))
        self.target = (speed, float(m.yaw_rate) if use_rate else 0.0, now_s)

    def _on_command_long(self, m: Any, now_s: float) -> None:
        self._command(m.command, [m.param1, m.param2, m.param3, m.param4, m.param5, m.param6, m.param7], m, now_s)

    def _on_command_int(self, m: Any, now_s: float) -> None:
        self._command(m.command, [m.param1, m.param2, m.param3, m.param4, float(m.x), float(m.y), m.z], m, now_s)

    def _command(self, cmd: int, p: list[float], m: Any, now_s: float) -> None:
        src = (m.get_srcSystem(), m.get_srcComponent())
        if cmd == mavlink.MAV_CMD_SET_MESSAGE_INTERVAL:
            name = _NAME.get(int(p[0]))
            if name is None:
                self._ack(cmd, mavlink.MAV_RESULT_DENIED, now_s, *src)
                return
            if p[1] < 0:
                self.intervals.pop(name, None)
                self.due.pop(name, None)
            else:
                period = max(0.02, p[1] * 1e-6) if p[1] > 0 else 0.25  # 0: "the default rate"; 50 Hz at most
                self.intervals[name] = period
                self.due[name] = now_s
            self._ack(cmd, mavlink.MAV_RESULT_ACCEPTED, now_s, *src)
        elif cmd == mavlink.MAV_CMD_REQUEST_MESSAGE:
            name = _NAME.get(int(p[0]))
            self._ack(cmd, mavlink.MAV_RESULT_ACCEPTED if name else mavlink.MAV_RESULT_DENIED, now_s, *src)
            if name:
                self.once.append(name)
        elif cmd == mavlink.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES:
            self._ack(cmd, mavlink.MAV_RESULT_ACCEPTED, now_s, *src)
            self.once.append("AUTOPILOT_VERSION")
        elif cmd == mavlink.MAV_CMD_DO_SET_MODE:
            mode = px4_mode(int(p[1]), int(p[2])) if self.config.autopilot == "px4" else int(p[1])
            ok = int(p[0]) & mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED and self._set_mode(mode, now_s, "commanded")
            self._ack(cmd, mavlink.MAV_RESULT_ACCEPTED if ok else mavlink.MAV_RESULT_DENIED, now_s, *src)
            if ok and self.failsafe == "gcs" and self.mode_names.get(mode) == self.flavour["drive"]:
                self.failsafe = None  # a GCS that drives again owns the vehicle again
        elif cmd == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            self._arm(p[0] >= 0.5, now_s, cmd, src)
        else:
            self._ack(cmd, mavlink.MAV_RESULT_UNSUPPORTED, now_s, *src)

    def _arm(self, arm: bool, now_s: float, cmd: int, src: tuple[int, int]) -> None:
        if not arm:
            if self.armed:
                self.armed = False
                self.target = None
                self._text(mavlink.MAV_SEVERITY_INFO, "Disarming motors", now_s)
                self._heartbeat(now_s)
            self._ack(cmd, mavlink.MAV_RESULT_ACCEPTED, now_s, *src)
            return
        reason = self.refuse_arm
        volt_min = self.params.get("ARMING_VOLT_MIN", 0.0)
        if reason is None and volt_min > 0 and self.sim.battery_v < volt_min:
            reason = f"PreArm: Battery below minimum arming voltage ({self.sim.battery_v:.1f} V < {volt_min:g} V)"
        if reason is None and self.mode_names.get(self.custom_mode) in ("RTL", "AUTO"):
            reason = f"Arm: Mode not armable ({self.mode})"
        if reason is not None:
            self._text(mavlink.MAV_SEVERITY_CRITICAL, reason, now_s)  # the text first, then the ACK (ArduPilot)
            self._ack(cmd, mavlink.MAV_RESULT_FAILED, now_s, *src)
            return
        if not self.armed:
            self.armed = True
            self.failsafe = None
            self._text(mavlink.MAV_SEVERITY_INFO, "Arming motors", now_s)
            self._heartbeat(now_s)
        self._ack(cmd, mavlink.MAV_RESULT_ACCEPTED, now_s, *src)

    def _on_set_mode(self, m: Any, now_s: float) -> None:
        if m.base_mode & mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED:
            self._set_mode(m.custom_mode, now_s, "commanded")

    def _on_request_data_stream(self, m: Any, now_s: float) -> None:
        for name in DATA_STREAMS.get(m.req_stream_id, ()):
            if m.start_stop and m.req_message_rate > 0:
                self.intervals[name] = 1.0 / max(1, m.req_message_rate)
                self.due[name] = now_s
            else:
                self.intervals.pop(name, None)
                self.due.pop(name, None)

    def _param_value(self, name: str, now_s: float) -> None:
        names = sorted(self.params)
        self._send(self.mav.param_value_encode(name.encode(), float(self.params[name]), mavlink.MAV_PARAM_TYPE_REAL32,
                                               len(names), names.index(name)), now_s)

    def _on_param_request_read(self, m: Any, now_s: float) -> None:
        name = m.param_id.decode() if isinstance(m.param_id, bytes) else m.param_id
        name = name.rstrip("\x00")
        names = sorted(self.params)
        if m.param_index >= 0 and not name and m.param_index < len(names):
            name = names[m.param_index]
        if name in self.params:
            self._param_value(name, now_s)

    def _on_param_request_list(self, m: Any, now_s: float) -> None:
        for name in sorted(self.params):
            self._param_value(name, now_s)

    def _on_param_set(self, m: Any, now_s: float) -> None:
        name = (m.param_id.decode() if isinstance(m.param_id, bytes) else m.param_id).rstrip("\x00")
        if name in self.params and math.isfinite(m.param_value):
            self.params[name] = float(m.param_value)
            self._param_value(name, now_s)

    def _on_timesync(self, m: Any, now_s: float) -> None:
        if m.tc1 == 0:
            self._send(self.mav.timesync_encode(int(now_s * 1e9), m.ts1), now_s)

    # ------------------------------------------------------------------ what it sends
    def _emit_message(self, name: str, now_s: float) -> None:
        build = getattr(self, f"_msg_{name.lower()}", None)
        if build is None:
            return
        out = build(now_s)
        for msg in out if isinstance(out, list) else [out]:
            self._send(msg, now_s)

    def _ned(self) -> tuple[float, float, float, float, float, float]:
        """(north, east, down) position and velocity, m and m/s, from the sim's ENU truth."""
        s = self.sim
        v = s.linear_m_s
        return s.y, s.x, -s.z, v * math.sin(s.yaw), v * math.cos(s.yaw), 0.0

    def _yaw_ned(self) -> float:
        return (math.pi / 2 - self.sim.yaw + math.pi) % (2 * math.pi) - math.pi

    def _msg_attitude(self, now_s: float) -> Any:
        roll, pitch = self.sim.attitude
        return self.mav.attitude_encode(self._boot_ms(now_s), roll, -pitch, self._yaw_ned(), 0.0, 0.0,
                                        -self.sim.angular_rad_s)

    def _msg_attitude_quaternion(self, now_s: float) -> Any:
        roll, pitch = self.sim.attitude
        r, p, y = roll / 2, -pitch / 2, self._yaw_ned() / 2
        q = (math.cos(r) * math.cos(p) * math.cos(y) + math.sin(r) * math.sin(p) * math.sin(y),
             math.sin(r) * math.cos(p) * math.cos(y) - math.cos(r) * math.sin(p) * math.sin(y),
             math.cos(r) * math.sin(p) * math.cos(y) + math.sin(r) * math.cos(p) * math.sin(y),
             math.cos(r) * math.cos(p) * math.sin(y) - math.sin(r) * math.sin(p) * math.cos(y))
        return self.mav.attitude_quaternion_encode(self._boot_ms(now_s), *q, 0.0, 0.0, -self.sim.angular_rad_s)

    def _msg_local_position_ned(self, now_s: float) -> Any:
        n, e, d, vn, ve, vd = self._ned()
        return self.mav.local_position_ned_encode(self._boot_ms(now_s), n, e, d, vn, ve, vd)

    def _latlon(self) -> tuple[int, int]:
        c = self.config
        lat = c.home_lat_deg + self.sim.y / _M_PER_DEG
        lon = c.home_lon_deg + self.sim.x / (_M_PER_DEG * math.cos(math.radians(c.home_lat_deg)))
        return int(round(lat * 1e7)), int(round(lon * 1e7))

    def _msg_global_position_int(self, now_s: float) -> Any:
        n, e, d, vn, ve, vd = self._ned()
        lat, lon = self._latlon()
        hdg = int(round(math.degrees(self._yaw_ned()) % 360.0 * 100)) % 36000
        return self.mav.global_position_int_encode(self._boot_ms(now_s), lat, lon, int(-d * 1000) + 488_000,
                                                   int(-d * 1000), int(vn * 100), int(ve * 100), 0, hdg)

    def _msg_gps_raw_int(self, now_s: float) -> Any:
        lat, lon = self._latlon()
        return self.mav.gps_raw_int_encode(int(now_s * 1e6), mavlink.GPS_FIX_TYPE_3D_FIX, lat, lon, 488_000, 80, 120,
                                           int(abs(self.sim.linear_m_s) * 100), 65535, 14)

    def _msg_home_position(self, now_s: float) -> Any:
        c = self.config
        return self.mav.home_position_encode(int(c.home_lat_deg * 1e7), int(c.home_lon_deg * 1e7), 488_000,
                                             0.0, 0.0, 0.0, [1.0, 0.0, 0.0, 0.0], 0.0, 0.0, 0.0)

    def _msg_vfr_hud(self, now_s: float) -> Any:
        heading = int(round(math.degrees(self._yaw_ned()))) % 360
        speed = abs(self.sim.linear_m_s)
        throttle = int(min(100, 100 * speed / max(self.config.rover.max_speed_m_s, 1e-6)))
        return self.mav.vfr_hud_encode(speed, speed, heading, throttle, 488.0 + self.sim.z, 0.0)

    def _msg_sys_status(self, now_s: float) -> Any:
        sensors = (mavlink.MAV_SYS_STATUS_SENSOR_3D_GYRO | mavlink.MAV_SYS_STATUS_SENSOR_3D_ACCEL |
                   mavlink.MAV_SYS_STATUS_SENSOR_GPS | mavlink.MAV_SYS_STATUS_SENSOR_MOTOR_OUTPUTS)
        current = sum(self.sim.motor_currents) + 0.3
        return self.mav.sys_status_encode(sensors, sensors, sensors, 200, int(self.sim.battery_v * 1000),
                                          int(current * 100), int(round(self.sim.soc * 100)), 0, 0, 0, 0, 0, 0)

    def _msg_battery_status(self, now_s: float) -> Any:
        cells = [int(self.sim.battery_v * 1000)] + [65535] * 9
        current = sum(self.sim.motor_currents) + 0.3
        return self.mav.battery_status_encode(0, mavlink.MAV_BATTERY_FUNCTION_ALL, mavlink.MAV_BATTERY_TYPE_LIPO,
                                              2500, cells, int(current * 100), -1, -1, int(round(self.sim.soc * 100)))

    def _msg_distance_sensor(self, now_s: float) -> list[Any]:
        out = []
        for i, r in enumerate(self.config.rover.rangers):
            reading = self.sim.ranges[r.name]
            orientation = _orientation(r.yaw_rad)
            out.append(self.mav.distance_sensor_encode(
                self._boot_ms(now_s), int(r.min_range_m * 100), int(r.max_range_m * 100), int(round(reading * 100)),
                mavlink.MAV_DISTANCE_SENSOR_ULTRASOUND, i, orientation, 0))
        return out

    def _msg_rc_channels(self, now_s: float) -> Any:
        return self.mav.rc_channels_encode(self._boot_ms(now_s), 8, *([1500] * 8), *([65535] * 10), 255)

    def _msg_servo_output_raw(self, now_s: float) -> Any:
        left, right = self.sim.wheel_speeds
        lim = self.config.rover.max_wheel_speed_rad_s
        pwm = [int(1500 + 500 * w / lim) for w in (left, right)]
        return self.mav.servo_output_raw_encode(int(now_s * 1e6) & 0xFFFFFFFF, 0, pwm[0], 0, pwm[1], 0, 0, 0, 0, 0)

    def _msg_ekf_status_report(self, now_s: float) -> Any:
        flags = 1 | 2 | 4 | 8 | 16 | 32 | 128 | 256
        return self.mav.ekf_status_report_encode(flags, 0.02, 0.03, 0.01, 0.05, 0.0)

    def _msg_estimator_status(self, now_s: float) -> Any:
        flags = 1 | 2 | 4 | 8 | 16 | 32
        return self.mav.estimator_status_encode(int(now_s * 1e6), flags, 0.02, 0.05, 0.03, 0.01, 0.0, 0.0, 0.3, 0.5)

    def _msg_extended_sys_state(self, now_s: float) -> Any:
        return self.mav.extended_sys_state_encode(mavlink.MAV_VTOL_STATE_UNDEFINED, mavlink.MAV_LANDED_STATE_ON_GROUND)

    def _msg_system_time(self, now_s: float) -> Any:
        return self.mav.system_time_encode(0, self._boot_ms(now_s))

    def _msg_autopilot_version(self, now_s: float) -> Any:
        caps = (mavlink.MAV_PROTOCOL_CAPABILITY_MAVLINK2 | mavlink.MAV_PROTOCOL_CAPABILITY_SET_POSITION_TARGET_LOCAL_NED |
                mavlink.MAV_PROTOCOL_CAPABILITY_COMMAND_INT | mavlink.MAV_PROTOCOL_CAPABILITY_PARAM_FLOAT)
        return self.mav.autopilot_version_encode(caps, 0x04050000, 0, 0, 0, [0] * 8, [0] * 8, [0] * 8, 0, 0,
                                                 self.config.system_id)


def _orientation(yaw_rad: float) -> int:
    """MAV_SENSOR_ORIENTATION of a ranger looking ``yaw_rad`` (body, counter-clockwise): forward 0, left 6 …"""
    deg = round(math.degrees(yaw_rad) / 45.0) * 45 % 360
    return {0: 0, 45: 7, 90: 6, 135: 5, 180: 4, 225: 3, 270: 2, 315: 1}[deg]


def main() -> None:  # pragma: no cover - interactive
    from sim.devices.net import TcpRunner, UdpRunner
    from sim.devices.pty import PtyRunner, serve_runner

    ap = argparse.ArgumentParser(description="An emulated MAVLink vehicle (ArduPilot Rover or PX4) on a pty, "
                                             "UDP or TCP")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--udp-out", metavar="HOST:PORT", help="send to a ground station listening there "
                                                               "(the driver's port: udpin:HOST:PORT)")
    where.add_argument("--udp-in", metavar="HOST:PORT", help="listen there (the driver's port: udpout:HOST:PORT)")
    where.add_argument("--tcp", metavar="HOST:PORT", help="serve TCP there (the driver's port: tcp:HOST:PORT)")
    ap.add_argument("--autopilot", choices=sorted(FLAVOURS), default="ardupilot")
    ap.add_argument("--fs-timeout", type=float, default=1.5, help="its GCS failsafe timeout, s (0: failsafe off)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    params = ({"FS_TIMEOUT": args.fs_timeout, "FS_GCS_ENABLE": 1.0 if args.fs_timeout > 0 else 0.0}
              if args.autopilot == "ardupilot" else {"COM_DL_LOSS_T": max(1.0, args.fs_timeout)})
    vehicle = MavlinkVehicle(VehicleConfig(autopilot=args.autopilot, params=params, seed=args.seed))
    if args.tcp or args.udp_in or args.udp_out:
        host, _, port = (args.tcp or args.udp_in or args.udp_out).rpartition(":")
        runner = (TcpRunner(vehicle, "mavlink", host or "127.0.0.1", int(port)) if args.tcp else
                  UdpRunner(vehicle, "mavlink", listen=(host or "127.0.0.1", int(port))) if args.udp_in else
                  UdpRunner(vehicle, "mavlink", send_to=(host or "127.0.0.1", int(port))))
    else:
        runner = PtyRunner(vehicle, "mavlink")
    serve_runner(runner)


if __name__ == "__main__":  # pragma: no cover
    main()
