"""The ``mavlink`` driver: a vehicle whose autopilot speaks MAVLink 2 (ArduPilot Rover/Boat, PX4 rovers).

The autopilot does the rest of the work a rover's controller does here: it mixes its wheels and runs its
own estimator (an EKF). So the driver takes the body twist (:attr:`Capability.BODY_TWIST`: actuators
``linear_m_s`` and ``angular_rad_s``), the controller registry gives it the twist controller, and its
position on the map is the autopilot's (LOCAL_POSITION_NED as ``est_x_m``/``est_y_m``, no estimator stage).

Link: any URL :mod:`drivers.mavlink.ports` takes (serial, ``udpin:``, ``udpout:``, ``tcp:``), one
:class:`~drivers.serial.link.SerialLink` (reader thread, writer thread, stop lane), MAVLink 2 framed by
pymavlink (:mod:`drivers.mavlink.codec`), we are a ground station (``system_id`` 255, component 190).

Lifecycle (the driver base's, on the autopilot's terms):

* ``open``: wait for the vehicle's HEARTBEAT (sending ours), ask for the streams its channels come from
  (MAV_CMD_SET_MESSAGE_INTERVAL at the acquisition rate), read — and per ``[driver.failsafe]`` set — its GCS
  failsafe, put it in its safe state (zero velocity, HOLD, disarmed) and wait for a first sample of every
  channel: **inactive = connected, disarmed, telemetry flowing**;
* ``activate`` (in a worker: it waits for the vehicle): zero setpoints first (PX4 leaves OFFBOARD without a
  stream), GUIDED / OFFBOARD, then arm; a refusal raises :class:`ArmingRefused` with the autopilot's own
  words (the ``PreArm: …`` STATUSTEXT it sends before its COMMAND_ACK); done once a HEARTBEAT shows both;
  **active = GUIDED (OFFBOARD) and armed**;
* ``write``: the twist as SET_POSITION_TARGET_LOCAL_NED (body frame, velocity + yaw rate), sent when it
  changes (at most ``max_setpoint_rate_hz``: a 57600-baud radio carries ~90 of these a second) and
  resent every ``1/setpoint_rate_hz`` s while active. ArduPilot Rover stops a GUIDED velocity target it
  has not heard again within 3 s ("target not received last 3secs, stopping", ``Rover/mode_guided.cpp``);
  PX4 leaves OFFBOARD after ``COM_OF_LOSS_T`` (1 s by default) without one. The stream comes from the
  control loop's writes only, never from a thread of the driver's: a stalled loop is silence, and silence
  stops the vehicle;
* ``halt`` (any thread, never raises, never blocks): a zero setpoint, then HOLD, then (``disarm_on_halt``)
  disarm, on the link's stop lane in that order, ahead of anything queued; re-sent every second while
  the vehicle's heartbeat says it is still in GUIDED (or armed);
* the vehicle's HEARTBEAT older than ``heartbeat_timeout_s`` is a :class:`DriverTimeoutError` (a lost link,
  as a pulled cable is for the serial drivers); a vehicle that leaves GUIDED or disarms while active (the
  pilot took it, a failsafe) is a fault too. Faults stick until :meth:`MavlinkDriver.reconnect`, which
  reopens to inactive: motion never resumes by itself.

Our GCS HEARTBEAT (2 Hz, so a vehicle's 1 s ``FS_TIMEOUT`` survives a late one) rides on the control
loop's reads for the same reason as the setpoints (and on ``open`` and ``activate`` while they wait for
the vehicle, bounded by their timeouts): a runtime that stops reading is, to the autopilot, a ground
station gone, and its own GCS failsafe (``FS_GCS_ENABLE``/``FS_TIMEOUT`` on ArduPilot,
``NAV_DLL_ACT``/``COM_DL_LOSS_T`` on PX4) holds the vehicle: the second layer under the server's stops
(docs/safety.md). At open the driver reads those parameters and warns (log and event) when the vehicle
would keep driving if the server died.

STATUSTEXT, mode and arming changes are events (:meth:`MavlinkDriver.take_events`); the channels'
values carry the host time their message arrived, so a rule on ``range_front_m`` goes stale when the
DISTANCE_SENSOR stream stops.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from drivers.base import TWIST_ACTUATORS, Acquisition, Capability, ChannelSpec, Driver, DriverState, Frame
from drivers.errors import (DriverConfigError, DriverError, DriverLinkError, DriverOpenError, DriverProtocolError,
                            DriverStateError, DriverTimeoutError)
from drivers.mavlink import codec as mc
from drivers.mavlink.codec import mavlink
from drivers.mavlink.config import MavlinkTable, RangerTable
from drivers.mavlink.ports import port_url
from drivers.serial.link import LinkCounters, SerialLink
from drivers.serial.support import named_tables, reconnect
from drivers.tables import convert_table

logger = logging.getLogger(__name__)

#: invalid frames within :data:`_QUALITY_WINDOW_S`, and more of them than good ones, make a read fail (garbage,
#: a wrong baud rate, a radio out of range); a radio's odd lost frame does not
_INVALID_BURST = 8
_QUALITY_WINDOW_S = 1.0
#: our GCS heartbeat period, s: MAVLink asks for at least 1 Hz; at 1 Hz one late heartbeat would trip a vehicle
#: whose FS_TIMEOUT is 1 s (measured against the emulator: it did, 0.7 s after arming), so 2 Hz
_GCS_HEARTBEAT_S = 0.5
#: how often the safe state is asked again while the vehicle has not taken it, s
_SAFE_RETRY_S = 1.0
#: a STATUSTEXT this old no longer explains a refusal, s
_REASON_WINDOW_S = 5.0
#: after a refused command, how long to wait for the STATUSTEXT that says why, s
_REASON_WAIT_S = 0.3
#: EKF_STATUS_REPORT / ESTIMATOR_STATUS flags that make a usable horizontal solution (attitude, horizontal
#: velocity, relative horizontal position; MAVLink's ESTIMATOR_STATUS_FLAGS share the bits)
_EKF_GOOD = 1 | 2 | 8
_EKF_MESSAGE = {"ardupilot": "EKF_STATUS_REPORT", "px4": "ESTIMATOR_STATUS"}
_UNKNOWN_U16 = 0xFFFF


class ArmingRefused(DriverError):
    """The autopilot would not arm; ``reason`` is what it said (its STATUSTEXT) or its COMMAND_ACK result."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Source:
    """A channel and the messages its value is computed from (the streams to ask for)."""

    spec: ChannelSpec
    messages: tuple[str, ...]


def _spec(name: str, unit: str, lo: float, hi: float, *messages: str, **kw: Any) -> Source:
    return Source(ChannelSpec(name=name, unit=unit, min=lo, max=hi, **kw), messages)


@dataclass
class Vehicle:
    """What the last HEARTBEAT said (reader thread writes, under the driver's lock)."""

    system: int | None = None
    component: int = 1
    autopilot: int = mavlink.MAV_AUTOPILOT_INVALID
    type: int = 0
    base_mode: int = 0
    custom_mode: int = -1
    system_status: int = 0
    heartbeat_t: float = 0.0
    heartbeats: int = 0

    @property
    def armed(self) -> bool:
        return bool(self.base_mode & mc.ARMED_FLAG)


class MavlinkDriver(Driver):
    name = "mavlink"
    max_rate_hz = 50.0  # ArduPilot schedules its streams at up to 50 Hz
    min_rate_hz = 0.2
    capabilities = frozenset({Capability.RECONNECT, Capability.SLOW_ACTIVATE, Capability.BODY_TWIST})

    # ------------------------------------------------------------------ config
    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> "MavlinkDriver":
        """The ``[driver]`` table (:class:`drivers.mavlink.config.MavlinkTable`); the telemetry rate defaults
        to 10 Hz."""
        t = convert_table(table, MavlinkTable)
        return cls(t, named_tables(t.rangers, RangerTable, "rangers"))

    def __init__(self, table: MavlinkTable, rangers: Mapping[str, RangerTable] | None = None) -> None:
        super().__init__()
        self.cfg = table
        self.port = table.port
        self.baudrate = 57600 if table.baudrate is None else table.baudrate
        self.rangers = dict(rangers or {})
        self.map_size_m = table.map_size_m
        self.map_origin_m = table.map_origin_m
        self.reconnect_timeout_s = table.reconnect_timeout_s
        self._sources = self._describe_sources()
        names = [s.spec.name for s in self._sources]
        if len(set(names)) != len(names):
            raise DriverConfigError("rangers", f"channel names repeat: {names}")
        self._acquisition = Acquisition(10.0 if table.rate_hz is None else min(table.rate_hz, self.max_rate_hz),
                                        tuple(names))
        self.counters = LinkCounters()  # the link's, across reconnects
        self._lock = threading.Lock()
        self._link: SerialLink | None = None
        self._codec: mc.MavlinkCodec | None = None
        self.flavour: mc.Flavour | None = mc.FLAVOURS.get(table.autopilot)
        self.vehicle = Vehicle(system=table.target_system, component=table.target_component)
        self._heartbeat_seen = threading.Event()
        self._values: dict[str, tuple[float, float]] = {}
        self._yaw_ned: float | None = None
        self._texts: collections.deque[tuple[float, int, str]] = collections.deque(maxlen=64)
        self._events: collections.deque[tuple[str, str, str, dict[str, Any]]] = collections.deque(maxlen=256)
        self._arrivals: dict[str, collections.deque[float]] = {}
        self._fault: DriverError | None = None
        self._quality: collections.deque[tuple[float, int, int]] = collections.deque()
        self._open_t = time.monotonic()
        self._gcs_hb_t = 0.0
        self._cmd = (0.0, 0.0)
        self._sent_t = 0.0
        self._stop_sent_t = 0.0
        self._safe_wanted = True
        self._confirmed_t: float | None = None  # when a heartbeat confirmed the activation
        self.setpoints_sent = 0
        self.safe_retries = 0
        self.failsafe: dict[str, Any] = {}
        self.stream_acks: dict[str, str] = {}

    def _describe_sources(self) -> list[Source]:
        """Every channel, as data, with the messages it is computed from."""
        t = self.cfg
        out = [
            _spec("linear_m_s", "m/s", -t.max_linear_m_s * 1.5, t.max_linear_m_s * 1.5, "LOCAL_POSITION_NED",
                  "ATTITUDE", widget="dial", label="speed (body x)", plot=True),
            _spec("angular_rad_s", "rad/s", -t.max_angular_rad_s * 1.5, t.max_angular_rad_s * 1.5, "ATTITUDE",
                  widget="dial", label="yaw rate", plot=True),
            _spec("groundspeed_m_s", "m/s", 0.0, t.max_linear_m_s * 1.5, "VFR_HUD", widget="bar",
                  label="ground speed"),
            _spec("roll_rad", "rad", -math.pi, math.pi, "ATTITUDE", widget="digital"),
            _spec("pitch_rad", "rad", -math.pi, math.pi, "ATTITUDE", widget="digital"),
            _spec("yaw_rad", "rad", -math.pi, math.pi, "ATTITUDE", widget="digital", label="yaw (ENU)"),
            _spec("heading_deg", "deg", 0.0, 360.0, "ATTITUDE", widget="dial", decimals=0),
            _spec("est_x_m", "m", -1e4, 1e4, "LOCAL_POSITION_NED", widget="digital", label="x east (EKF)"),
            _spec("est_y_m", "m", -1e4, 1e4, "LOCAL_POSITION_NED", widget="digital", label="y north (EKF)"),
            _spec("lat_deg", "deg", -90.0, 90.0, "GLOBAL_POSITION_INT", widget="digital", decimals=7),
            _spec("lon_deg", "deg", -180.0, 180.0, "GLOBAL_POSITION_INT", widget="digital", decimals=7),
            _spec("battery_v", "V", 0.0, 60.0, "SYS_STATUS", widget="dial", plot=True),
            _spec("battery_a", "A", -100.0, 200.0, "SYS_STATUS", widget="digital"),
            _spec("battery_pct", "%", 0.0, 100.0, "SYS_STATUS", widget="bar", decimals=0, warn_low=30.0,
                  crit_low=15.0),
        ]
        for name, r in self.rangers.items():
            out.append(_spec(f"range_{name}_m", "m", 0.0, r.max_range_m, "DISTANCE_SENSOR", widget="bar",
                             label=r.label or f"range {name}", plot=True))
        for i in range(1, self.cfg.rc_channels + 1):
            out.append(_spec(f"rc{i}_us", "us", 800.0, 2200.0, "RC_CHANNELS", widget="digital", decimals=0))
        out += [
            _spec("ekf_ok", "", 0.0, 1.0, "EKF", widget="lamp", kind="digital", decimals=0, label="EKF ok"),
            _spec("ekf_variance", "", 0.0, 2.0, "EKF", widget="bar", warn_high=0.5, crit_high=1.0,
                  label="EKF variance (1 = failing)"),
            _spec("armed", "", 0.0, 1.0, "HEARTBEAT", widget="lamp", kind="digital", decimals=0),
            _spec("guided", "", 0.0, 1.0, "HEARTBEAT", widget="lamp", kind="digital", decimals=0,
                  label="GUIDED / OFFBOARD"),
        ]
        return out

    # ------------------------------------------------------------------ description
    def channels(self) -> list[ChannelSpec]:
        return [s.spec for s in self._sources]

    def actuators(self) -> dict[str, tuple[float, float]]:
        lin, ang = TWIST_ACTUATORS
        return {lin: (-self.cfg.max_linear_m_s, self.cfg.max_linear_m_s),
                ang: (-self.cfg.max_angular_rad_s, self.cfg.max_angular_rad_s)}

    def describe(self) -> dict[str, Any]:
        """The map the dashboard draws (its size; the EKF origin sits at ``map_origin_m``)."""
        return {"world": {"size_m": list(self.map_size_m)}}

    # ------------------------------------------------------------------ acquisition
    def _streams(self, channels: tuple[str, ...]) -> set[str]:
        """The messages the ``channels`` need (HEARTBEAT always comes)."""
        ekf = _EKF_MESSAGE[self.flavour.name if self.flavour else "ardupilot"]
        out = {m for s in self._sources if s.spec.name in channels for m in s.messages}
        if "EKF" in out:
            out.discard("EKF")
            out.add(ekf)
        out.discard("HEARTBEAT")
        return out

    def _set_acquisition(self, rate_hz: float, channels: tuple[str, ...]) -> Acquisition:
        acq = Acquisition(rate_hz, channels)
        link = self._link
        if link is not None and link.lost is None and self.vehicle.system is not None:
            old = self._streams(self._acquisition.channels)
            for msg in sorted(self._streams(channels)):
                self._send_command(link, mc.message_interval_command, getattr(mavlink, f"MAVLINK_MSG_ID_{msg}"),
                                   rate_hz)
            for msg in sorted(old - self._streams(channels)):
                self._send_command(link, mc.message_interval_command, getattr(mavlink, f"MAVLINK_MSG_ID_{msg}"), 0)
        return acq

    def _send_command(self, link: SerialLink, build: Callable[..., Any], *args: Any) -> None:
        """Queue a command without waiting for its COMMAND_ACK (the reader notes a refusal)."""
        assert self._codec is not None and self.vehicle.system is not None
        link.send(self._codec.encode(build(self._codec, self.vehicle.system, self.cfg.target_component, *args)),
                  droppable=False)

    # ------------------------------------------------------------------ lifecycle
    def _open(self) -> None:
        self._fault = None
        self._quality.clear()  # the counters span reconnects: the window starts again
        self._heartbeat_seen.clear()
        self._confirmed_t = None
        self._safe_wanted = True
        with self._lock:
            self._values.clear()  # nothing from before a reconnect passes for fresh
            self._yaw_ned = None
        codec = mc.MavlinkCodec(self.cfg.system_id, self.cfg.component_id)
        link = SerialLink(port_url(self.port), codec, baudrate=self.baudrate, on_message=self._on_message,
                          reply_timeout_s=self.cfg.command_timeout_s, name="mavlink", counters=self.counters)
        link.open()
        self._codec, self._link = codec, link
        self._open_t = time.monotonic()
        try:
            self._wait_for_vehicle(link)
            self._request_streams(link)
            self._check_failsafe(link)
            if self.vehicle.armed or self.vehicle.custom_mode == self.flavour.drive_mode:
                self._send_stop(link)  # found it armed or in GUIDED: make it safe before anything else
            self._wait_first_samples(link)
            self._link_quality(link, time.monotonic())  # the window's first sample
        except BaseException:
            self._link = None
            link.close(drain_timeout_s=0.1)
            raise

    def _wait_for_vehicle(self, link: SerialLink) -> None:
        """Send our heartbeat each second until the vehicle's arrives; :class:`DriverOpenError` at the deadline."""
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        while not self._heartbeat_seen.is_set():
            if link.lost is not None:
                raise DriverOpenError(f"mavlink: {self.port}: {link.lost}")
            self._send_gcs_heartbeat(link)
            left = deadline - time.monotonic()
            if left <= 0:
                who = f"system {self.cfg.target_system}" if self.cfg.target_system else "a vehicle"
                raise DriverOpenError(f"mavlink: no HEARTBEAT from {who} on {self.port} within "
                                      f"{self.cfg.connect_timeout_s:g} s (link up? right port, baud rate "
                                      f"{self.baudrate}, system id?)")
            self._heartbeat_seen.wait(min(_GCS_HEARTBEAT_S, left))
        if self.flavour is None:
            self.flavour = mc.flavour_of(self.vehicle.autopilot) or mc.ARDUPILOT
        logger.info("mavlink: vehicle %d on %s (%s, mode %s, %s)", self.vehicle.system, self.port,
                    self.flavour.name, self.flavour.mode_name(self.vehicle.custom_mode),
                    "armed" if self.vehicle.armed else "disarmed")

    def _request_streams(self, link: SerialLink) -> None:
        rate = self._acquisition.rate_hz
        for msg in sorted(self._streams(self._acquisition.channels)):
            msg_id = getattr(mavlink, f"MAVLINK_MSG_ID_{msg}")
            try:
                ack = self._request_command(link, mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, msg_id, 1e6 / rate)
                result = mc.RESULT_NAMES_BY_VALUE.get(ack.result, str(ack.result))
            except DriverTimeoutError:
                result = "no answer"
            self.stream_acks[msg] = result
            if result != "ACCEPTED":
                logger.warning("mavlink: SET_MESSAGE_INTERVAL %s at %g Hz: %s", msg, rate, result)

    def _request_command(self, link: SerialLink, command: int, *params: float, timeout_s: float | None = None) -> Any:
        """COMMAND_LONG and its COMMAND_ACK (blocks its caller: open and activate run in workers)."""
        assert self._codec is not None and self.vehicle.system is not None
        data = self._codec.encode(mc.command_long(self._codec, self.vehicle.system, self.cfg.target_component,
                                                  command, *params))
        return link.request(data, lambda m: m.get_type() == "COMMAND_ACK" and m.command == command,
                            timeout_s=timeout_s)

    # ------------------------------------------------------------------ the vehicle's own failsafe
    def _check_failsafe(self, link: SerialLink) -> None:
        """Read (and per config set) the GCS failsafe; warn when the vehicle would keep driving without us."""
        fs = self.cfg.failsafe
        self.failsafe = {}
        if not fs.check and not fs.set:
            return
        ardupilot = self.flavour is not mc.PX4
        wanted = ({"FS_GCS_ENABLE": 1.0, "FS_ACTION": 2.0, "FS_TIMEOUT": fs.timeout_s} if ardupilot else
                  {"NAV_DLL_ACT": 1.0, "COM_DL_LOSS_T": float(max(1, round(fs.timeout_s)))})
        got: dict[str, float | None] = {}
        for name, value in wanted.items():
            try:
                got[name] = self._param(link, name, value if fs.set else None)
            except DriverTimeoutError:
                got[name] = None
        self.failsafe = {"failsafe_" + k.lower(): v for k, v in got.items()}
        if ardupilot:
            enabled = bool(got["FS_GCS_ENABLE"]) and got["FS_ACTION"] not in (None, 0.0)
            timeout = got["FS_TIMEOUT"]
            how = (f"FS_GCS_ENABLE={_fmt(got['FS_GCS_ENABLE'])}, FS_ACTION={_fmt(got['FS_ACTION'])} (2 = Hold), "
                   f"FS_TIMEOUT={_fmt(timeout)} s")
        else:
            enabled = got["NAV_DLL_ACT"] not in (None, 0.0)
            timeout = got["COM_DL_LOSS_T"]
            how = f"NAV_DLL_ACT={_fmt(got['NAV_DLL_ACT'])} (1 = Hold), COM_DL_LOSS_T={_fmt(timeout)} s"
        self.failsafe["failsafe_enabled"] = enabled
        self.failsafe["failsafe_timeout_s"] = timeout
        if enabled:
            self._note("vehicle_failsafe", f"the vehicle's GCS failsafe is on: {how}", "info",
                       {"enabled": True, "timeout_s": timeout})
            return
        warning = (f"the vehicle's GCS failsafe is off ({how}): if the server died it would keep driving until "
                   f"its own setpoint timeout (3 s on ArduPilot Rover); set [driver.failsafe] set = true or the "
                   f"parameters by hand (docs/safety.md)")
        logger.warning("mavlink: %s", warning)
        self._note("vehicle_failsafe", warning, "error", {"enabled": False})
        if fs.require:
            raise DriverOpenError(f"mavlink: {warning} ([driver.failsafe] require = true)")

    def _param(self, link: SerialLink, name: str, value: float | None) -> float:
        """A parameter's value (PARAM_VALUE); with ``value``, set it first and return what the vehicle echoed."""
        assert self._codec is not None and self.vehicle.system is not None
        sysid, comp = self.vehicle.system, self.cfg.target_component
        msg = (mc.param_read(self._codec, sysid, comp, name) if value is None else
               mc.param_set(self._codec, sysid, comp, name, value))
        reply = link.request(self._codec.encode(msg), lambda m: m.get_type() == "PARAM_VALUE" and
                             mc.param_name(m) == name, retries=1)
        return float(reply.param_value)

    # ------------------------------------------------------------------ first samples
    def _missing(self, channels: tuple[str, ...]) -> list[str]:
        with self._lock:
            return [n for n in channels if n not in self._values]

    def _wait_first_samples(self, link: SerialLink) -> None:
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        while True:
            missing = self._missing(self._acquisition.channels)
            if not missing:
                return
            if link.lost is not None:
                raise DriverOpenError(f"mavlink: {self.port}: {link.lost}")
            if time.monotonic() > deadline:
                need = sorted({m for s in self._sources if s.spec.name in missing for m in s.messages})
                raise DriverOpenError(
                    f"mavlink: the vehicle does not stream what {', '.join(missing)} come from ({', '.join(need)}) "
                    f"after {self.cfg.connect_timeout_s:g} s; its answers to SET_MESSAGE_INTERVAL: "
                    f"{self.stream_acks or 'none'} (remove the channels, e.g. [driver.rangers], or enable the "
                    "sensor on the vehicle)")
            self._heartbeat_if_due(link)
            time.sleep(0.01)

    # ------------------------------------------------------------------ activate, halt
    def _activate(self) -> None:
        if self._fault is not None:
            raise self._fault
        link = self._require_link()
        fl = self.flavour or mc.ARDUPILOT
        halts = self._halts  # a halt from now on wins: stop asking the vehicle to move
        self._safe_wanted = False
        self._confirmed_t = None
        t_end = time.monotonic() + fl.prestream_s
        self._heartbeat_if_due(link)  # open and activate wait for the vehicle: our heartbeat goes on meanwhile
        while True:
            self._send_setpoint(link, 0.0, 0.0)
            if time.monotonic() >= t_end:
                break
            time.sleep(1.0 / self.cfg.setpoint_rate_hz)
        if self._halts != halts:
            return
        # asked even when the last heartbeat says so already: a halt's HOLD and disarm may still be on their way
        self._command_or_fail(link, mavlink.MAV_CMD_DO_SET_MODE, fl.mode_params(fl.drive_mode),
                              f"switching to {fl.drive_name}")
        if self._halts != halts:
            return
        asked_t = time.monotonic()
        try:
            self._command_or_fail(link, mavlink.MAV_CMD_COMPONENT_ARM_DISARM, (1.0,), "arming")
        except _Refused as err:
            raise ArmingRefused(f"mavlink: arming refused by the autopilot: {err.reason}", err.reason) from None
        if self._halts != halts:
            return
        deadline = time.monotonic() + self.cfg.command_timeout_s
        while True:  # a heartbeat after the acks says both; it also proves the vehicle took them
            with self._lock:
                v = self.vehicle
                ok = v.heartbeat_t >= asked_t and v.armed and v.custom_mode == fl.drive_mode
                mode, armed = fl.mode_name(v.custom_mode), v.armed
            if ok:
                self._confirmed_t = time.monotonic()
                self._sent_t = 0.0  # the first command after the start goes out at once
                return
            if self._halts != halts:
                return
            if link.lost is not None:
                raise link.lost
            self._heartbeat_if_due(link)
            if time.monotonic() > deadline:
                raise DriverTimeoutError(f"mavlink: the vehicle accepted {fl.drive_name} and arming but its "
                                         f"heartbeat still says {mode}, {'armed' if armed else 'disarmed'} after "
                                         f"{self.cfg.command_timeout_s:g} s")
            time.sleep(0.005)

    def _command_or_fail(self, link: SerialLink, command: int, params: tuple[float, ...], what: str) -> None:
        asked_t = time.monotonic()
        try:
            ack = self._request_command(link, command, *params)
        except DriverTimeoutError:
            raise DriverTimeoutError(f"mavlink: no COMMAND_ACK for {what} within {self.cfg.command_timeout_s:g} s") \
                from None
        if ack.result == mc.ACCEPTED:
            return
        result = mc.RESULT_NAMES_BY_VALUE.get(ack.result, str(ack.result))
        reason = self._reason(asked_t) or f"COMMAND_ACK {result}, no STATUSTEXT given"
        if command == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            raise _Refused(reason)
        raise DriverStateError(f"mavlink: the autopilot refused {what} ({result}): {reason}")

    def _reason(self, since_t: float) -> str:
        """What the vehicle said since ``since_t`` (waiting a little for it): its warnings, joined."""
        deadline = time.monotonic() + _REASON_WAIT_S
        while True:
            with self._lock:
                texts = [text for t, sev, text in self._texts if t >= since_t - 0.05 and sev <= mc.WARNING]
            if texts or time.monotonic() > deadline:
                return "; ".join(dict.fromkeys(texts))
            time.sleep(0.01)

    def _halt(self) -> None:
        self._cmd = (0.0, 0.0)
        self._deferred = False
        self._safe_wanted = True
        self._confirmed_t = None
        link = self._link
        if link is None or link.lost is not None or self._codec is None or self.vehicle.system is None:
            return
        self._send_stop(link)

    def _stop_bytes(self) -> bytes:
        """Zero velocity first (it stops even if the rest is lost), HOLD, then disarm (per config)."""
        c, sysid, comp = self._codec, self.vehicle.system, self.cfg.target_component
        assert c is not None and sysid is not None
        fl = self.flavour or mc.ARDUPILOT
        data = c.encode(mc.velocity_setpoint(c, sysid, comp, 0.0, 0.0, self.cfg.frame, self._boot_ms()))
        data += c.encode(mc.command_long(c, sysid, comp, mavlink.MAV_CMD_DO_SET_MODE, *fl.mode_params(fl.hold_mode)))
        if self.cfg.disarm_on_halt:
            data += c.encode(mc.arm_command(c, sysid, comp, False))
        return data

    def _send_stop(self, link: SerialLink) -> None:
        link.send_stop(self._stop_bytes())
        self._stop_sent_t = time.monotonic()
        self._sent_t = self._stop_sent_t

    def _close(self) -> None:
        link, self._link = self._link, None
        if link is None:
            return
        link.close()

    def reconnect(self, timeout_s: float | None = None, stop: threading.Event | None = None) -> int:
        """Close and reopen with backoff until the vehicle's heartbeat is back; stays ``inactive`` (disarmed,
        HOLD: motion never resumes by itself). The attempts made; the last :class:`DriverError` after
        ``timeout_s`` (default ``reconnect_timeout_s``)."""
        self.close()
        return reconnect(self.open, self.reconnect_timeout_s if timeout_s is None else timeout_s, stop,
                         what=f"mavlink {self.port}")

    # ------------------------------------------------------------------ I/O
    def _require_link(self) -> SerialLink:
        link = self._link
        if link is None:
            raise DriverLinkError("mavlink: not connected")
        link.check()
        return link

    def _boot_ms(self) -> int:
        return int((time.monotonic() - self._open_t) * 1000)

    def _send_gcs_heartbeat(self, link: SerialLink) -> None:
        if self._codec is None or link.lost is not None:
            return
        link.send(self._codec.encode(mc.gcs_heartbeat(self._codec)), key="gcs_heartbeat", droppable=False)
        self._gcs_hb_t = time.monotonic()

    def _heartbeat_if_due(self, link: SerialLink) -> None:
        if time.monotonic() - self._gcs_hb_t >= _GCS_HEARTBEAT_S:
            self._send_gcs_heartbeat(link)

    def _send_setpoint(self, link: SerialLink, linear: float, angular: float) -> None:
        c = self._codec
        assert c is not None and self.vehicle.system is not None
        # REP-103 angular (counter-clockwise, z up) is a negative NED yaw rate (z down)
        msg = mc.velocity_setpoint(c, self.vehicle.system, self.cfg.target_component, linear, -angular,
                                   self.cfg.frame, self._boot_ms())
        link.send(c.encode(msg), key="setpoint")
        self._sent_t = time.monotonic()
        self.setpoints_sent += 1

    def _write(self, command: dict[str, float]) -> None:
        link = self._link
        if link is None or link.lost is not None:
            return
        lin_key, ang_key = TWIST_ACTUATORS
        cmd = (command.get(lin_key, self._cmd[0]), command.get(ang_key, self._cmd[1]))
        since = time.monotonic() - self._sent_t
        changed = cmd != self._cmd or self._deferred
        self._cmd = cmd
        if (changed and since >= 1.0 / self.cfg.max_setpoint_rate_hz) or since >= 1.0 / self.cfg.setpoint_rate_hz:
            self._send_setpoint(link, *cmd)
            self._deferred = False
        else:
            self._deferred = changed  # too soon after the last one: the next read or write sends it

    _deferred = False

    def _flush_deferred(self, link: SerialLink) -> None:
        """A change :meth:`_write` held back for the rate limit goes out once the limit allows (read's thread)."""
        if not self._deferred or time.monotonic() - self._sent_t < 1.0 / self.cfg.max_setpoint_rate_hz:
            return
        with self._output_lock:  # the gate: after a halt nothing but zero goes out
            if self._deferred and self.state is DriverState.ACTIVE:
                self._send_setpoint(link, *self._cmd)
            self._deferred = False

    def _fail(self, err: DriverError) -> DriverError:
        """Make the vehicle safe before the error reaches the control loop; the fault sticks until reconnect."""
        self._fault = err
        self.halt()
        return err

    def _read(self, dt_s: float) -> Frame:
        link = self._link
        if link is None:
            raise DriverLinkError("mavlink: not connected")
        if self._fault is not None:
            raise self._fail(self._fault)
        if link.lost is not None:
            raise self._fail(link.lost)
        now = time.monotonic()
        bad, good = self._link_quality(link, now)
        if bad >= _INVALID_BURST and bad >= good:
            raise self._fail(DriverProtocolError(f"mavlink: garbage on {self.port} ({bad} invalid frames against "
                                                 f"{good} good in {_QUALITY_WINDOW_S:g} s; wrong baud rate or a "
                                                 "noisy radio?)"))
        with self._lock:
            v = self.vehicle
            hb_age = now - v.heartbeat_t
            leaving = None
            if self._confirmed_t is not None and self.state is DriverState.ACTIVE and v.heartbeat_t > self._confirmed_t:
                fl = self.flavour or mc.ARDUPILOT
                if not v.armed or v.custom_mode != fl.drive_mode:
                    leaving = (fl.mode_name(v.custom_mode), v.armed, fl.drive_name)
            unsafe = v.armed and self.cfg.disarm_on_halt or v.custom_mode == (self.flavour or mc.ARDUPILOT).drive_mode
            values = {name: self._values.get(name) for name in self._acquisition.channels}
        if hb_age > self.cfg.heartbeat_timeout_s:
            raise self._fail(DriverTimeoutError(f"mavlink: no HEARTBEAT from vehicle {v.system} on {self.port} for "
                                                f"{hb_age:.1f} s (heartbeat_timeout_s={self.cfg.heartbeat_timeout_s:g})"))
        if leaving is not None:
            mode, armed, drive = leaving
            raise self._fail(DriverStateError(f"mavlink: the vehicle left {drive} while driven (now {mode}, "
                                              f"{'armed' if armed else 'disarmed'}): its pilot or a failsafe took it"))
        self._heartbeat_if_due(link)
        self._flush_deferred(link)
        if self._safe_wanted and unsafe and now - self._stop_sent_t > _SAFE_RETRY_S:
            self.safe_retries += 1
            self._send_stop(link)
        missing = [n for n, val in values.items() if val is None]
        if missing:
            values.update(self._first_samples(link, missing))
        frame = Frame(t=now)
        for name, (value, t) in values.items():
            frame.values[name] = value
            frame.sample_t[name] = t
        return frame

    def _link_quality(self, link: SerialLink, now: float) -> tuple[int, int]:
        """Invalid and good frames over the last :data:`_QUALITY_WINDOW_S` (between reads): a radio drops a frame
        now and then, which is no fault; more bad frames than good ones is."""
        c = link.counters
        window = self._quality
        window.append((now, c.invalid_frames + c.crc_errors, c.frames_in))
        while len(window) > 2 and now - window[1][0] >= _QUALITY_WINDOW_S:
            window.popleft()
        _, bad0, good0 = window[0]
        return window[-1][1] - bad0, window[-1][2] - good0

    def _first_samples(self, link: SerialLink, missing: list[str]) -> dict[str, tuple[float, float]]:
        """A channel enabled since open has not reported yet: wait for it (bounded; its stream was asked for)."""
        deadline = time.monotonic() + self.cfg.first_sample_timeout_s
        while True:
            with self._lock:
                got = {n: self._values[n] for n in missing if n in self._values}
            if len(got) == len(missing):
                return got
            if link.lost is not None:
                raise self._fail(link.lost)
            if time.monotonic() > deadline:
                raise self._fail(DriverTimeoutError(f"mavlink: no sample yet for {', '.join(sorted(set(missing) - set(got)))} "
                                                    f"after {self.cfg.first_sample_timeout_s:g} s"))
            time.sleep(0.002)

    # ------------------------------------------------------------------ the reader thread
    def _on_message(self, msg: Any, t: float) -> None:
        kind = msg.get_type()
        sysid = msg.get_srcSystem()
        if kind == "HEARTBEAT":
            self._on_heartbeat(msg, t)
            return
        if self.vehicle.system is None or sysid != self.vehicle.system:
            return
        handler = self._HANDLERS.get(kind)
        with self._lock:
            arrivals = self._arrivals.get(kind)
            if arrivals is None:
                arrivals = self._arrivals[kind] = collections.deque(maxlen=128)
            arrivals.append(t)
            if handler is not None:
                handler(self, msg, t)

    def _on_heartbeat(self, msg: Any, t: float) -> None:
        if msg.type in mc.NOT_A_VEHICLE or msg.autopilot == mavlink.MAV_AUTOPILOT_INVALID:
            return
        v = self.vehicle
        sysid, comp = msg.get_srcSystem(), msg.get_srcComponent()
        with self._lock:
            if v.system is None:
                v.system = sysid  # the first vehicle heard
            if sysid != v.system or comp != self.cfg.target_component:
                return
            fl = self.flavour or mc.flavour_of(msg.autopilot) or mc.ARDUPILOT
            was_mode, was_armed, first = v.custom_mode, v.armed, v.heartbeats == 0
            v.autopilot, v.type, v.base_mode = msg.autopilot, msg.type, msg.base_mode
            v.custom_mode, v.system_status, v.heartbeat_t = msg.custom_mode, msg.system_status, t
            v.heartbeats += 1
            self._values["armed"] = (1.0 if v.armed else 0.0, t)
            self._values["guided"] = (1.0 if v.custom_mode == fl.drive_mode else 0.0, t)
            self._arrivals.setdefault("HEARTBEAT", collections.deque(maxlen=128)).append(t)
            if not first and v.custom_mode != was_mode:
                self._note("vehicle_mode", f"vehicle mode {fl.mode_name(was_mode)} → {fl.mode_name(v.custom_mode)}",
                           "info", {"mode": fl.mode_name(v.custom_mode), "custom_mode": v.custom_mode})
            if not first and v.armed != was_armed:
                self._note("vehicle_armed" if v.armed else "vehicle_disarmed",
                           f"vehicle {'armed' if v.armed else 'disarmed'}", "info", {"armed": v.armed})
        self._heartbeat_seen.set()

    def _note(self, trigger: str, message: str, kind: str = "info", values: dict[str, Any] | None = None) -> None:
        self._events.append((trigger, message, kind, values or {}))

    def _put(self, name: str, value: float, t: float) -> None:
        self._values[name] = (float(value), t)

    def _on_attitude(self, m: Any, t: float) -> None:
        roll, pitch, yaw = mc.attitude_rep103(m.roll, m.pitch, m.yaw)
        self._yaw_ned = m.yaw
        self._put("roll_rad", roll, t)
        self._put("pitch_rad", pitch, t)
        self._put("yaw_rad", yaw, t)
        self._put("angular_rad_s", -m.yawspeed, t)
        self._put("heading_deg", math.degrees(m.yaw) % 360.0, t)

    def _on_local_position(self, m: Any, t: float) -> None:
        east, north = mc.enu_from_ned(m.x, m.y)
        self._put("est_x_m", east + self.map_origin_m[0], t)
        self._put("est_y_m", north + self.map_origin_m[1], t)
        if self._yaw_ned is not None:
            self._put("linear_m_s", mc.forward_speed(m.vx, m.vy, self._yaw_ned), t)

    def _on_global_position(self, m: Any, t: float) -> None:
        self._put("lat_deg", m.lat * 1e-7, t)
        self._put("lon_deg", m.lon * 1e-7, t)

    def _on_vfr_hud(self, m: Any, t: float) -> None:
        self._put("groundspeed_m_s", m.groundspeed, t)

    def _on_sys_status(self, m: Any, t: float) -> None:
        self._put("battery_v", math.nan if m.voltage_battery == _UNKNOWN_U16 else m.voltage_battery / 1000.0, t)
        self._put("battery_a", math.nan if m.current_battery < 0 else m.current_battery / 100.0, t)
        self._put("battery_pct", math.nan if m.battery_remaining < 0 else float(m.battery_remaining), t)

    def _on_battery_status(self, m: Any, t: float) -> None:
        cells = [c for c in m.voltages if c != _UNKNOWN_U16]
        if cells:
            self._put("battery_v", sum(cells) / 1000.0, t)
        if m.current_battery >= 0:
            self._put("battery_a", m.current_battery / 100.0, t)
        if m.battery_remaining >= 0:
            self._put("battery_pct", float(m.battery_remaining), t)

    def _on_distance(self, m: Any, t: float) -> None:
        for name, r in self.rangers.items():
            if r.orientation == m.orientation and (r.id is None or r.id == m.id):
                cm = min(max(m.current_distance, m.min_distance), m.max_distance)  # out of range reads its bound
                self._put(f"range_{name}_m", cm / 100.0, t)

    def _on_rc(self, m: Any, t: float) -> None:
        for i in range(1, self.cfg.rc_channels + 1):
            raw = getattr(m, f"chan{i}_raw")
            self._put(f"rc{i}_us", math.nan if raw in (0, _UNKNOWN_U16) else float(raw), t)

    def _on_ekf(self, m: Any, t: float) -> None:
        self._put("ekf_ok", 1.0 if (m.flags & _EKF_GOOD) == _EKF_GOOD else 0.0, t)
        if m.get_type() == "EKF_STATUS_REPORT":
            var = max(m.velocity_variance, m.pos_horiz_variance)
        else:  # ESTIMATOR_STATUS: test ratios, 1 = rejected
            var = max(m.vel_ratio, m.pos_horiz_ratio)
        self._put("ekf_variance", var, t)

    def _on_statustext(self, m: Any, t: float) -> None:
        text = mc.status_text(m)
        self._texts.append((t, m.severity, text))
        severity = mavlink.enums["MAV_SEVERITY"][m.severity].name.removeprefix("MAV_SEVERITY_") \
            if m.severity in mavlink.enums["MAV_SEVERITY"] else str(m.severity)
        self._note("vehicle_text", f"vehicle: {text}", "error" if m.severity <= mc.WARNING else "info",
                   {"severity": severity, "text": text})

    def _on_command_ack(self, m: Any, t: float) -> None:
        if m.result != mc.ACCEPTED and m.result != mavlink.MAV_RESULT_IN_PROGRESS:
            name = mavlink.enums["MAV_CMD"][m.command].name if m.command in mavlink.enums["MAV_CMD"] else m.command
            result = mc.RESULT_NAMES_BY_VALUE.get(m.result, str(m.result))
            self._note("vehicle_refused", f"vehicle refused {name}: {result}", "error",
                       {"command": m.command, "result": result})

    _HANDLERS: dict[str, Callable[["MavlinkDriver", Any, float], None]] = {
        "ATTITUDE": _on_attitude, "LOCAL_POSITION_NED": _on_local_position, "GLOBAL_POSITION_INT": _on_global_position,
        "VFR_HUD": _on_vfr_hud, "SYS_STATUS": _on_sys_status, "BATTERY_STATUS": _on_battery_status,
        "DISTANCE_SENSOR": _on_distance, "RC_CHANNELS": _on_rc, "EKF_STATUS_REPORT": _on_ekf,
        "ESTIMATOR_STATUS": _on_ekf, "STATUSTEXT": _on_statustext, "COMMAND_ACK": _on_command_ack,
    }

    # ------------------------------------------------------------------ events, health
    def take_events(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    def rates_hz(self, window_s: float = 2.0) -> dict[str, float]:
        """Messages per second from the vehicle over the last ``window_s``, per message type."""
        now = time.monotonic()
        with self._lock:
            out = {}
            for kind, times in self._arrivals.items():
                recent = [t for t in times if now - t <= window_s]
                span = (recent[-1] - recent[0]) if len(recent) > 1 else 0.0
                out[kind] = round((len(recent) - 1) / span, 2) if span > 0 else 0.0
        return out

    def health(self) -> dict[str, Any]:
        link = self._link
        v = self.vehicle
        fl = self.flavour or mc.ARDUPILOT
        out: dict[str, Any] = {"port": self.port, "autopilot": self.flavour.name if self.flavour else None,
                               "vehicle_system": v.system, "mode": fl.mode_name(v.custom_mode) if v.heartbeats else None,
                               "armed": v.armed, "heartbeats": v.heartbeats,
                               "heartbeat_age_s": round(time.monotonic() - v.heartbeat_t, 3) if v.heartbeats else None,
                               "setpoints_sent": self.setpoints_sent, "safe_retries": self.safe_retries,
                               "rate_requested_hz": self._acquisition.rate_hz}
        out.update(self.counters.as_dict())
        out.update(self.failsafe)
        out["connected"] = link is not None and link.lost is None
        out["fault"] = str(self._fault) if self._fault is not None else None
        for kind, hz in self.rates_hz().items():
            out[f"rate_{kind.lower()}_hz"] = hz
        return out


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _fmt(v: float | None) -> str:
    return "unread" if v is None else f"{v:g}"


__all__ = ["ArmingRefused", "MavlinkDriver"]
