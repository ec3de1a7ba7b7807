"""One motion axis behind a FAULHABER controller, whatever protocol it speaks.

The driver talks to :class:`MotionAxis` only; :class:`AsciiAxis` (MCDC/MCBL
300x) and :class:`McV3Axis` (MC V3.0, CiA 402) turn its calls into bytes. No
ASCII leaks through this interface (hardware-protocols §2.2).

Units: the axis is configured on the *output* side in SI (rad, rad/s, rad/s²,
A) and converts with ``gear_ratio`` (motor revolutions per output revolution)
and ``counts_per_rev`` (encoder increments per motor revolution):

>>> cfg = AxisConfig("q1", node=1, counts_per_rev=2048, gear_ratio=10.0)
>>> cfg.counts(math.pi), cfg.rpm(2 * math.pi)
(10240, 600)
>>> round(cfg.rad_from_counts(10240), 6), round(cfg.rad_s_from_rpm(600), 6)
(3.141593, 6.283185)

Calls that wait for the device (``configure``, ``enable``, ``poll``) block
their thread (the driver's poller or ``activate``); commands
(``command_velocity``, ``command_position``) queue bytes and return at once;
``stop_bytes`` gives the bytes of the stop lane (V0 + DI / quick stop).
"""

from __future__ import annotations

import abc
import enum
import math
from dataclasses import dataclass

from drivers.errors import DriverProtocolError
from drivers.faulhaber import ascii as fa
from drivers.faulhaber import mcv3
from drivers.serial.link import SerialLink


class AxisMode(str, enum.Enum):
    VELOCITY = "velocity"  # wheels: a speed command streamed every tick
    POSITION = "position"  # arm joints: a target the drive reaches with its own profile


@dataclass(frozen=True)
class AxisConfig:
    name: str
    node: int
    mode: AxisMode = AxisMode.VELOCITY
    counts_per_rev: int = 2048
    gear_ratio: float = 1.0
    max_speed_rad_s: float = 10.0
    max_accel_rad_s2: float = 50.0
    min_rad: float = -math.pi
    max_rad: float = math.pi
    current_limit_a: float | None = None
    peak_current_a: float | None = None
    invert: bool = False
    #: ASCII only: bit of the ``GST`` status answer that says "output stage enabled" (0: do not poll GST)
    #: [verify: the MCDC 300x manual's GST table]
    enabled_mask: int = 1

    @property
    def sign(self) -> int:
        return -1 if self.invert else 1

    def counts(self, rad: float) -> int:
        return int(round(self.sign * rad / (2 * math.pi) * self.gear_ratio * self.counts_per_rev))

    def rad_from_counts(self, counts: int) -> float:
        return self.sign * counts * 2 * math.pi / (self.gear_ratio * self.counts_per_rev)

    def rpm(self, rad_s: float) -> int:
        """Motor rpm (signed) for an output speed."""
        return int(round(self.sign * rad_s / (2 * math.pi) * 60.0 * self.gear_ratio))

    def rad_s_from_rpm(self, rpm: float) -> float:
        return self.sign * rpm * 2 * math.pi / (60.0 * self.gear_ratio)

    def rev_s2(self, rad_s2: float) -> int:
        """Motor rev/s² (FAULHABER ``AC``/``DEC``), at least 1."""
        return max(1, int(round(abs(rad_s2) / (2 * math.pi) * self.gear_ratio)))

    @property
    def actuator_limits(self) -> tuple[float, float]:
        if self.mode is AxisMode.POSITION:
            return (self.min_rad, self.max_rad)
        return (-self.max_speed_rad_s, self.max_speed_rad_s)


@dataclass(frozen=True)
class AxisSample:
    position_rad: float
    velocity_rad_s: float
    current_a: float
    enabled: bool = True
    fault: str | None = None


class MotionAxis(abc.ABC):
    """What the FAULHABER drivers need of an axis; one implementation per protocol."""

    def __init__(self, link: SerialLink, config: AxisConfig) -> None:
        self.link = link
        self.config = config

    @abc.abstractmethod
    def configure(self) -> None:
        """Write limits and the operating mode (blocking, at open)."""

    @abc.abstractmethod
    def enable(self) -> None:
        """Power stage on, holding still (blocking, at activate)."""

    @abc.abstractmethod
    def disable(self) -> None:
        """Power stage off (blocking)."""

    @abc.abstractmethod
    def command_velocity(self, rad_s: float, on_reply=None) -> None:
        """Queue a speed command (never blocks)."""

    @abc.abstractmethod
    def command_position(self, rad: float, on_reply=None) -> None:
        """Queue a move to ``rad`` with the drive's profile (never blocks)."""

    @abc.abstractmethod
    def stop_bytes(self) -> tuple[bytes, int]:
        """The safe-state bytes for the stop lane and how many replies they draw."""

    @abc.abstractmethod
    def poll(self) -> AxisSample:
        """Read position, speed and current (blocking; the driver's poller thread)."""


# ====================================================================== ASCII
def _ascii_ok(reply: object, what: str) -> None:
    if isinstance(reply, fa.ErrorReply):
        raise DriverProtocolError(f"FAULHABER {what}: {reply.text}")
    if not isinstance(reply, fa.Ok):
        raise DriverProtocolError(f"FAULHABER {what}: expected OK, got {reply!r}")


def _ascii_value(reply: object, what: str) -> int:
    if isinstance(reply, fa.Value):
        return reply.value
    if isinstance(reply, fa.ErrorReply):
        raise DriverProtocolError(f"FAULHABER {what}: {reply.text}")
    raise DriverProtocolError(f"FAULHABER {what}: expected a number, got {reply!r}")


class AsciiAxis(MotionAxis):
    """An MCDC/MCBL 300x drive, answer mode 2 (every command confirmed, so a lost one is seen)."""

    retries = 1

    def _cmd(self, command: str, arg: int | None = None) -> None:
        what = f"node {self.config.node} {command}{'' if arg is None else arg}"
        _ascii_ok(self.link.request(fa.encode(self.config.node, command, arg), fa.is_reply,
                                    retries=self.retries), what)

    def _query(self, command: str) -> int:
        return _ascii_value(self.link.request(fa.encode(self.config.node, command), fa.is_reply,
                                              retries=self.retries), f"node {self.config.node} {command}")

    def configure(self) -> None:
        c = self.config
        # ANSW takes effect before it answers: in mode 2 the drive confirms it [verify on hardware]
        self._cmd("ANSW", 2)
        self._cmd("DI")
        self._cmd("SP", abs(c.rpm(c.max_speed_rad_s)))
        self._cmd("AC", c.rev_s2(c.max_accel_rad_s2))
        self._cmd("DEC", c.rev_s2(c.max_accel_rad_s2))
        if c.current_limit_a is not None:
            self._cmd("LCC", int(round(c.current_limit_a * 1000)))
        if c.peak_current_a is not None:
            self._cmd("LPC", int(round(c.peak_current_a * 1000)))

    def enable(self) -> None:
        if self.config.mode is AxisMode.POSITION:
            # hold where it stands: load the actual position as target before EN
            pos = self._query("POS")
            self._cmd("LA", pos)
            self._cmd("EN")
            self._cmd("M")
        else:
            self._cmd("V", 0)
            self._cmd("EN")

    def disable(self) -> None:
        self._cmd("DI")

    def command_velocity(self, rad_s: float, on_reply=None) -> None:
        self.link.send(fa.encode(self.config.node, "V", self.config.rpm(rad_s)), replies=1, on_reply=on_reply,
                       match=fa.is_reply, key=("setpoint", self.config.node))

    def command_position(self, rad: float, on_reply=None) -> None:
        node = self.config.node
        self.link.send(fa.encode(node, "LA", self.config.counts(rad)) + fa.encode(node, "M"), replies=2,
                       on_reply=on_reply, match=fa.is_reply, key=("setpoint", node))

    def stop_bytes(self) -> tuple[bytes, int]:
        node = self.config.node
        return fa.encode(node, "V", 0) + fa.encode(node, "DI"), 2

    def poll(self) -> AxisSample:
        c = self.config
        pos = self._query("POS")
        rpm = self._query("GN")
        ma = self._query("GRC")
        enabled = bool(self._query("GST") & c.enabled_mask) if c.enabled_mask else True
        return AxisSample(c.rad_from_counts(pos), c.rad_s_from_rpm(rpm), abs(ma) / 1000.0, enabled=enabled)

    def send_line(self, line: str) -> None:
        """One program line (``1LA2000``) through the request path, awaiting its ``OK``."""
        _ascii_ok(self.link.request(line.encode("ascii") + fa.CR, fa.is_reply, retries=0), line)


# ====================================================================== MC V3.0
class McV3Axis(MotionAxis):
    """An MC V3.0 drive: SDO access to CiA 402 objects; velocities rpm, accelerations rpm/s [verify]."""

    retries = 1

    def _write(self, index: int, value: int, sub: int = 0) -> None:
        node = self.config.node
        reply = self.link.request(mcv3.encode_sdo_write(node, index, sub, value),
                                  mcv3.reply_matcher(node, index, sub), retries=self.retries)
        if isinstance(reply, mcv3.SdoAbort):
            raise DriverProtocolError(f"MC V3.0 node {node}: write 0x{index:04X} refused (abort 0x{reply.code:08X})")

    def _read(self, index: int, sub: int = 0) -> int:
        node = self.config.node
        reply = self.link.request(mcv3.encode_sdo_read(node, index, sub), mcv3.reply_matcher(node, index, sub),
                                  retries=self.retries)
        if isinstance(reply, mcv3.SdoAbort):
            raise DriverProtocolError(f"MC V3.0 node {node}: read 0x{index:04X} refused (abort 0x{reply.code:08X})")
        assert isinstance(reply, mcv3.SdoData)
        return reply.value()

    def configure(self) -> None:
        c = self.config
        self._write(mcv3.CONTROLWORD, mcv3.CW_FAULT_RESET)
        self._write(mcv3.CONTROLWORD, mcv3.CW_DISABLE_VOLTAGE)
        mode = mcv3.MODE_PROFILE_POSITION if c.mode is AxisMode.POSITION else mcv3.MODE_PROFILE_VELOCITY
        self._write(mcv3.MODES_OF_OPERATION, mode)
        self._write(mcv3.PROFILE_VELOCITY, abs(c.rpm(c.max_speed_rad_s)))
        accel_rpm_s = max(1, abs(c.rpm(c.max_accel_rad_s2)))
        self._write(mcv3.PROFILE_ACCELERATION, accel_rpm_s)
        self._write(mcv3.PROFILE_DECELERATION, accel_rpm_s)

    def enable(self) -> None:
        if self.config.mode is AxisMode.POSITION:
            self._write(mcv3.TARGET_POSITION, self._read(mcv3.POSITION_ACTUAL))
        else:
            self._write(mcv3.TARGET_VELOCITY, 0)
        for cw in (mcv3.CW_SHUTDOWN, mcv3.CW_SWITCH_ON, mcv3.CW_ENABLE_OPERATION):
            self._write(mcv3.CONTROLWORD, cw)
        state = mcv3.cia402_state(self._read(mcv3.STATUSWORD))
        if state is not mcv3.Cia402State.OPERATION_ENABLED:
            raise DriverProtocolError(f"MC V3.0 node {self.config.node}: not enabled after 0x06/0x07/0x0F "
                                      f"(state: {state.value})")

    def disable(self) -> None:
        self._write(mcv3.CONTROLWORD, mcv3.CW_DISABLE_VOLTAGE)

    def command_velocity(self, rad_s: float, on_reply=None) -> None:
        node = self.config.node
        self.link.send(mcv3.encode_sdo_write(node, mcv3.TARGET_VELOCITY, 0, self.config.rpm(rad_s)), replies=1,
                       on_reply=on_reply, match=mcv3.reply_matcher(node, mcv3.TARGET_VELOCITY),
                       key=("setpoint", node))

    def command_position(self, rad: float, on_reply=None) -> None:
        node = self.config.node
        cw = mcv3.CW_ENABLE_OPERATION | mcv3.CW_SET_IMMEDIATELY
        data = (mcv3.encode_sdo_write(node, mcv3.TARGET_POSITION, 0, self.config.counts(rad))
                + mcv3.encode_sdo_write(node, mcv3.CONTROLWORD, 0, cw)
                + mcv3.encode_sdo_write(node, mcv3.CONTROLWORD, 0, cw | mcv3.CW_NEW_SETPOINT))
        match = mcv3.reply_matcher
        self.link.send(data, replies=3, on_reply=on_reply, key=("setpoint", node),
                       match=lambda m: match(node, mcv3.TARGET_POSITION)(m) or match(node, mcv3.CONTROLWORD)(m))

    def stop_bytes(self) -> tuple[bytes, int]:
        # quick stop: the drive brakes on its quick-stop ramp, then disables (CiA 402 option code 2)
        return mcv3.encode_sdo_write(self.config.node, mcv3.CONTROLWORD, 0, mcv3.CW_QUICK_STOP), 1

    def poll(self) -> AxisSample:
        c = self.config
        sw = self._read(mcv3.STATUSWORD)
        pos = self._read(mcv3.POSITION_ACTUAL)
        rpm = self._read(mcv3.VELOCITY_ACTUAL)
        cur = self._read(mcv3.CURRENT_ACTUAL)
        state = mcv3.cia402_state(sw)
        fault = state.value if state in (mcv3.Cia402State.FAULT, mcv3.Cia402State.FAULT_REACTION) else None
        return AxisSample(c.rad_from_counts(pos), c.rad_s_from_rpm(rpm), abs(cur) / 1000.0,
                          enabled=state is mcv3.Cia402State.OPERATION_ENABLED, fault=fault)
