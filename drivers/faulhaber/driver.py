"""The ``faulhaber-ascii`` and ``faulhaber-mcv3`` drivers: FAULHABER drives as wheels or arm joints.

One class does the work (:class:`FaulhaberDriver`); the two registered
classes choose the protocol (:class:`~drivers.faulhaber.axis.AsciiAxis` or
:class:`~drivers.faulhaber.axis.McV3Axis`) and the line settings. Each
``[driver.axes.<actuator>]`` table is one drive (its ``node`` number on the
line) in ``velocity`` mode (wheels: the command is rad/s, streamed) or
``position`` mode (joints: the command is a target in rad the drive reaches
with its own speed/acceleration profile).

Threads: a poller thread cycles ``poll()`` over the axes (position, speed,
current: one request at a time, each awaiting its answer, since ASCII replies
carry no node number); ``read()`` returns the latest samples at once with the
host time each arrived, so the control loop never waits for the line. Commands
are queued (a newer setpoint for the same axis replaces one not yet written);
``halt()`` puts ``V0``+``DI`` (ASCII) or a quick stop (MC V3.0) on the stop lane.

Faults: ``timeouts_idle`` consecutive timeouts while halted, or
``timeouts_moving`` while moving, make ``read()`` raise
:class:`DriverTimeoutError`; an error reply (``Unknown command``, an SDO
abort, a drive in FAULT) raises :class:`DriverProtocolError`; a lost port
:class:`DriverLinkError`. Before raising, the driver halts (safe state on every
fault). :meth:`FaulhaberDriver.reconnect` reopens with backoff and leaves the
driver ``inactive``: motion restarts only when the control loop activates it.

Without power on the drives' motor supply being cut, a FAULHABER drive keeps
its last ``V`` if this host dies (the ASCII protocol has no watchdog): wire the
e-stop relay into the motor supply (docs/hardware.md).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, ClassVar, Mapping

from drivers.base import Acquisition, Capability, ChannelSpec, Driver, DriverState, Frame, ProgramGenerator
from drivers.errors import (DriverConfigError, DriverError, DriverLinkError, DriverOpenError, DriverProtocolError,
                            DriverTimeoutError)
from drivers.faulhaber import ascii as fa
from drivers.faulhaber import mcv3
from drivers.faulhaber.axis import AsciiAxis, AxisConfig, AxisMode, AxisSample, McV3Axis, MotionAxis
from drivers.faulhaber.programmer import FaulhaberProgramGenerator
from drivers.serial.link import LinkCounters, SerialLink
from drivers.faulhaber.config import AxisTable, FaulhaberTable
from drivers.serial.support import named_tables, reconnect
from drivers.tables import convert_table

logger = logging.getLogger(__name__)


class FaulhaberDriver(Driver):
    """Drives on one serial line behind the motion-axis interface (subclasses pick the protocol)."""

    name: ClassVar[str] = "faulhaber"
    max_rate_hz = 1000.0
    axis_class: ClassVar[type[MotionAxis]] = AsciiAxis
    default_baudrate: ClassVar[int] = 9600
    ordered: ClassVar[bool] = True
    half_duplex: ClassVar[bool] = True
    decoder_class: ClassVar[type] = fa.AsciiDecoder
    # a lost line is reopened by reconnect(); enabling a drive awaits its answers; its axes make programs
    capabilities = frozenset({Capability.RECONNECT, Capability.SLOW_ACTIVATE, Capability.PROGRAMS})

    @classmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> "FaulhaberDriver":
        """The ``[driver]`` table (:class:`drivers.faulhaber.config.FaulhaberTable`, each axis an ``AxisTable``)."""
        t = convert_table(table, FaulhaberTable)
        axes = [a.config(name) for name, a in named_tables(t.axes, AxisTable, "axes").items()]
        return cls(t.port, axes, rate_hz=50.0 if t.rate_hz is None else t.rate_hz,
                   baudrate=cls.default_baudrate if t.baudrate is None else t.baudrate,
                   xonxoff=cls.decoder_class is fa.AsciiDecoder if t.xonxoff is None else t.xonxoff,
                   reply_timeout_s=t.reply_timeout_s, timeouts_idle=t.timeouts_idle,
                   timeouts_moving=t.timeouts_moving, poll_interval_s=t.poll_interval_s, refresh_s=t.refresh_s,
                   reconnect_timeout_s=t.reconnect_timeout_s)

    def __init__(self, port: str, axes: list[AxisConfig], *, rate_hz: float = 50.0, baudrate: int | None = None,
                 xonxoff: bool = False, reply_timeout_s: float = 0.2, timeouts_idle: int = 2,
                 timeouts_moving: int = 5, poll_interval_s: float = 0.0, refresh_s: float = 0.5,
                 reconnect_timeout_s: float = 10.0) -> None:
        super().__init__()
        if not axes:
            raise DriverConfigError("axes", "configure at least one axis")
        names = [a.name for a in axes]
        nodes = [a.node for a in axes]
        if len(set(nodes)) != len(nodes):
            raise DriverConfigError("axes", f"node numbers repeat: {nodes}")
        self.port = port
        self.axes_config = list(axes)
        self.baudrate = baudrate or self.default_baudrate
        self.xonxoff = xonxoff
        self.reply_timeout_s = reply_timeout_s
        self.timeouts_idle = timeouts_idle
        self.timeouts_moving = timeouts_moving
        self.poll_interval_s = poll_interval_s
        self.refresh_s = refresh_s
        self.reconnect_timeout_s = reconnect_timeout_s
        self._specs: list[ChannelSpec] = []
        for a in axes:
            lim = a.max_speed_rad_s * 1.2
            self._specs += [
                ChannelSpec(f"{a.name}_rad", "rad", min(a.min_rad, -1e-3) if a.mode is AxisMode.POSITION else -1e6,
                            max(a.max_rad, 1e-3) if a.mode is AxisMode.POSITION else 1e6, "digital",
                            plot=a.mode is AxisMode.POSITION, decimals=3),
                ChannelSpec(f"{a.name}_rad_s", "rad/s", -lim, lim, "dial", plot=True),
                ChannelSpec(f"{a.name}_a", "A", 0.0, max(1.0, (a.peak_current_a or 5.0) * 1.5), "bar"),
            ]
        self._acquisition = Acquisition(rate_hz, tuple(c.name for c in self._specs))
        self._names = names
        self._link: SerialLink | None = None
        self.counters = LinkCounters()  # the port's, across reconnects
        self._axes: dict[str, MotionAxis] = {}
        self._lock = threading.Lock()
        self._samples: dict[str, tuple[AxisSample, float]] = {}
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()
        self._poll_error: DriverError | None = None
        self._command_error: DriverError | None = None
        self._sent: dict[str, tuple[float, float]] = {}  # axis → (value, time sent)
        self._moving = False
        self.clean_polls = 0

    # ------------------------------------------------------------------ description
    def channels(self) -> list[ChannelSpec]:
        return list(self._specs)

    def actuators(self) -> dict[str, tuple[float, float]]:
        return {a.name: a.actuator_limits for a in self.axes_config}

    # ------------------------------------------------------------------ lifecycle
    def _open(self) -> None:
        link = SerialLink(self.port, self.decoder_class(), baudrate=self.baudrate, ordered=self.ordered,
                          half_duplex=self.half_duplex, reply_timeout_s=self.reply_timeout_s, xonxoff=self.xonxoff,
                          on_message=self._on_message, name=f"{self.name} {self.port}", counters=self.counters)
        link.open()
        try:
            axes = {a.name: self.axis_class(link, a) for a in self.axes_config}
            for axis in axes.values():
                axis.configure()
        except DriverError as err:
            link.close(drain_timeout_s=0.0)
            raise DriverOpenError(f"{self.name}: configuring the drives on {self.port!r} failed: {err}") from err
        self._link = link
        self._axes = axes
        self._fault = None
        self._samples.clear()
        self._poll_error = self._command_error = None
        self._sent.clear()
        self._moving = False
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll_loop, name=f"{self.name}-poller", daemon=True)
        self._poller.start()

    def _activate(self) -> None:
        self._check_faults()
        try:
            for axis in self._axes.values():
                axis.enable()
        except DriverError:
            self._halt()
            raise
        self._sent.clear()
        # a status polled before this moment may still say "disabled": only later polls are checked
        self._enabled_at = time.monotonic()

    _enabled_at = float("inf")

    def _halt(self) -> None:
        link = self._link
        self._enabled_at = float("inf")
        self._moving = False
        self._sent.clear()
        if link is None or link.lost is not None:
            return
        data, replies = b"", 0
        for axis in self._axes.values():
            b, n = axis.stop_bytes()
            data += b
            replies += n
        link.send_stop(data, replies=replies)

    def _close(self) -> None:
        self._stop.set()
        link, self._link = self._link, None
        if link is not None:
            link.close()  # writes the queued stop bytes, then fails a poll still waiting: the poller ends
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(2.0)
        self._poller = None
        self._axes = {}

    def program_generator(self) -> ProgramGenerator:
        """FAULHABER programs on these drives: each joint on the axis of its name (node, encoder, gearing)."""
        return FaulhaberProgramGenerator({a.name: a for a in self.axes_config})

    def reconnect(self, timeout_s: float | None = None, stop: threading.Event | None = None) -> int:
        """Close and reopen with backoff; stays ``inactive`` (the drives disabled) until ``activate()``."""
        self.close()
        return reconnect(self.open, self.reconnect_timeout_s if timeout_s is None else timeout_s, stop,
                         what=f"{self.name} {self.port}")

    # ------------------------------------------------------------------ polling
    def _on_message(self, msg: object, t: float) -> None:
        if isinstance(msg, (mcv3.Emergency,)):
            self._command_error = DriverProtocolError(f"{self.name}: EMCY from node {msg.node}: {msg.data.hex()}")
        elif isinstance(msg, fa.Event) and msg.kind == "r":
            self._command_error = DriverProtocolError(f"{self.name}: a drive reported an error (r)")

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            link = self._link
            if link is None:
                return
            error: DriverError | None = None
            for name, axis in list(self._axes.items()):
                if self._stop.is_set():
                    return
                t_poll = time.monotonic()
                try:
                    sample = axis.poll()
                except DriverLinkError as err:
                    self._poll_error = err
                    return
                except DriverTimeoutError:
                    continue  # counted by the link; read() decides when it is a fault
                except DriverError as err:
                    error = self._poll_error = err  # at once: the next axis' poll may wait a long time
                    continue
                with self._lock:
                    self._samples[name] = (sample, time.monotonic())
                if sample.fault:
                    error = self._poll_error = DriverProtocolError(
                        f"{self.name}: drive {name} (node {axis.config.node}) in {sample.fault}")
                elif not sample.enabled and self.state is DriverState.ACTIVE and t_poll > self._enabled_at:
                    error = self._poll_error = DriverProtocolError(
                        f"{self.name}: drive {name} (node {axis.config.node}) disabled itself while active "
                        "(a reboot or a drive fault)")
            if error is None and link.consecutive_timeouts == 0:
                self._poll_error = None
                self.clean_polls += 1
            if self.poll_interval_s:
                self._stop.wait(self.poll_interval_s)

    def _pending_fault(self) -> DriverError | None:
        """The fault ``read()`` would raise now, or None (does not change anything)."""
        link = self._link
        if self._fault is not None:
            return self._fault
        if link is None:
            return DriverLinkError(f"{self.name}: not connected")
        if link.lost is not None:
            return link.lost
        err = self._command_error or self._poll_error
        if err is not None:
            return err
        limit = self.timeouts_moving if self._moving else self.timeouts_idle
        if link.consecutive_timeouts >= limit:
            return DriverTimeoutError(f"{self.name}: {link.consecutive_timeouts} timeouts in a row on {self.port} "
                                      f"(limit {limit} while {'moving' if self._moving else 'idle'})")
        return None

    def _check_faults(self) -> None:
        """Raise the pending fault; it sticks until :meth:`reconnect` (never healed behind the supervisor)."""
        err = self._pending_fault()
        if err is not None:
            self._fault = err
            raise err

    _fault: DriverError | None = None

    def _read(self, dt_s: float) -> Frame:
        try:
            self._check_faults()
        except DriverError:
            self.halt()  # the safe state before the control loop even sees the fault
            raise
        now = time.monotonic()
        if len(self._samples) < len(self._axes):
            self._wait_first_samples(now + max(1.0, 10 * self.reply_timeout_s))
        frame = Frame(t=time.monotonic())
        active = set(self._acquisition.channels)
        with self._lock:
            samples = dict(self._samples)
        for name, (s, t) in samples.items():
            for key, value in ((f"{name}_rad", s.position_rad), (f"{name}_rad_s", s.velocity_rad_s),
                               (f"{name}_a", s.current_a)):
                if key in active:
                    frame.values[key] = float(value)
                    frame.sample_t[key] = t
        return frame

    def _wait_first_samples(self, deadline: float) -> None:
        while len(self._samples) < len(self._axes):
            if time.monotonic() > deadline:
                self.halt()
                raise DriverTimeoutError(f"{self.name}: no answer to the first poll on {self.port}")
            try:
                self._check_faults()
            except DriverError:
                self.halt()
                raise
            time.sleep(0.001)

    # ------------------------------------------------------------------ commands
    def _on_command_reply(self, reply: object | None, error: BaseException | None) -> None:
        if isinstance(reply, fa.ErrorReply):
            self._command_error = DriverProtocolError(f"{self.name}: drive refused a command: {reply.text}")
        elif isinstance(reply, mcv3.SdoAbort):
            self._command_error = DriverProtocolError(
                f"{self.name}: node {reply.node} refused 0x{reply.index:04X} (abort 0x{reply.code:08X})")

    def _write(self, command: dict[str, float]) -> None:
        link = self._link
        if link is None or link.lost is not None:
            return
        now = time.monotonic()
        moving = False
        for name, value in command.items():
            axis = self._axes[name]
            last = self._sent.get(name)
            cfg = axis.config
            if cfg.mode is AxisMode.VELOCITY:
                moving = moving or cfg.rpm(value) != 0
                if last is None or cfg.rpm(last[0]) != cfg.rpm(value) or now - last[1] > self.refresh_s:
                    axis.command_velocity(value, on_reply=self._on_command_reply)
                    self._sent[name] = (value, now)
            else:
                moving = True
                if last is None or cfg.counts(last[0]) != cfg.counts(value):
                    axis.command_position(value, on_reply=self._on_command_reply)
                    self._sent[name] = (value, now)
        for name in self._sent:
            if name not in command and self._axes[name].config.mode is AxisMode.VELOCITY:
                moving = moving or self._sent[name][0] != 0
        self._moving = moving

    # ------------------------------------------------------------------ programs and health
    def axis(self, name: str) -> MotionAxis:
        """The motion axis behind an actuator (program execution, tests)."""
        return self._axes[name]

    def positions(self) -> dict[str, float]:
        """The latest polled position of each axis, rad (thread-safe; program execution waits on it)."""
        with self._lock:
            return {name: s.position_rad for name, (s, _t) in self._samples.items()}

    def health(self) -> dict[str, Any]:
        link = self._link
        out: dict[str, Any] = {"port": self.port, "baudrate": self.baudrate, "clean_polls": self.clean_polls}
        out.update(self.counters.as_dict())  # also while reconnecting (no link then)
        out["connected"] = link is not None and link.lost is None
        out["consecutive_timeouts"] = link.consecutive_timeouts if link is not None else 0
        fault = self._pending_fault() if link is not None else self._fault
        out["fault"] = str(fault) if fault is not None else None
        return out


class FaulhaberAsciiDriver(FaulhaberDriver):
    """MCDC/MCBL 300x over RS232: ``[node]CMD[arg]\\r``, 9600 baud, XON/XOFF, several nodes on one line."""

    name = "faulhaber-ascii"
    axis_class = AsciiAxis
    default_baudrate = 9600
    ordered = True
    half_duplex = True
    decoder_class = fa.AsciiDecoder

    def run_line(self, line: str) -> None:
        """Send one ASCII program line (its node must be one of this driver's axes), awaiting its ``OK``.

        Refused unless the driver is active, so a halt stops a running program."""
        if self.state is not DriverState.ACTIVE:
            raise DriverError(f"{self.name}: not active (halted); program stopped at {line!r}")
        m = re.match(r"\s*(\d+)", line)
        node = int(m.group(1)) if m else None
        axis = next((a for a in self._axes.values() if a.config.node == node), None)
        if axis is None:
            raise DriverError(f"{self.name}: program line {line!r} names no configured node")
        self._check_faults()
        assert isinstance(axis, AsciiAxis)
        axis.send_line(line)
        self._moving = True


class FaulhaberMcV3Driver(FaulhaberDriver):
    """MC V3.0 (MC 5004/5005/5010) over RS232/USB: binary frames with CRC8, CiA 402 objects."""

    name = "faulhaber-mcv3"
    axis_class = McV3Axis
    default_baudrate = 115200
    ordered = False
    half_duplex = True
    decoder_class = mcv3.McV3Decoder
