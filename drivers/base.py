"""The driver interface: one for the simulator and every piece of hardware.

A driver has a lifecycle borrowed from ros2_control's hardware components:
``closed`` → :meth:`~Driver.open` → ``inactive`` (connected and readable, outputs
held safe) → :meth:`~Driver.activate` → ``active`` (may move) → :meth:`~Driver.halt`
or :meth:`~Driver.deactivate` → ``inactive`` → :meth:`~Driver.close` → ``closed``.

The public methods are final and do what every driver must do (python-can's
``BusABC.send`` wraps ``_send`` the same way); a driver overrides the ``_``-prefixed
hooks:

* :meth:`~Driver.read` checks the driver is open, calls ``_read`` and stamps every
  value the driver did not stamp with the host time of the read (``Frame.sample_t``).
* :meth:`~Driver.write` refuses unknown actuators, non-finite values and values
  outside the actuator limits (nothing is written), and drops the command (returns
  ``False``) unless the driver is ``active``: a halt from another thread always wins
  over a command computed just before it.
* :meth:`~Driver.halt` never raises, may be called from any thread, takes the
  output lock, makes the driver ``inactive`` and calls ``_halt`` to write the safe
  state. Outputs stay halted until the control loop calls :meth:`~Driver.activate`.

``_write`` and ``_halt`` run under the output lock and must not block (a serial
driver queues its bytes for a writer thread); ``_read`` runs on the control-loop
thread only.

Channels are described as data (:class:`ChannelSpec`), values are SI unless a
channel's ``unit`` says otherwise, and every value carries the host time it was
sampled, so the safety supervisor can tell a fresh reading from a held one.

**Optional capabilities are declared**, never probed: :attr:`Driver.capabilities` lists the
:class:`Capability` values a driver has, and the base class has a method for each that a
driver with the capability overrides —

* :attr:`Capability.RECONNECT`: :meth:`Driver.reconnect` reopens the device after a fault
  (it blocks: the runtime calls it in a worker thread, :mod:`server.runtime.reconnect`);
* :attr:`Capability.SLOW_ACTIVATE`: :meth:`Driver.activate` waits for the device (a drive
  enabled by requests that each await an answer), so the runtime calls it in a worker, off the tick;
* :attr:`Capability.PROGRAMS`: :meth:`Driver.program_generator` turns a joint motion into the
  program its drives run (:class:`ProgramGenerator`), each joint on the drive that moves it;
* :attr:`Capability.BODY_TWIST`: the driver takes the body twist itself — actuators ``linear_m_s``
  (body x, forward) and ``angular_rad_s`` (about body z, counter-clockwise) — and the vehicle mixes
  its wheels and estimates its own pose (an autopilot); the controller registry gives such a driver
  the twist controller (:mod:`server.runtime.controllers.twist`) instead of the wheel mixer.

A device with a voice of its own (an autopilot's STATUSTEXT, its mode changes) hands its events to
the loop's log through :meth:`Driver.take_events` (default: none).
"""

from __future__ import annotations

import abc
import enum
import logging
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from drivers.errors import AcquisitionError, DriverCommandError, DriverOpenError, DriverStateError

log = logging.getLogger(__name__)

WIDGETS = ("dial", "digital", "bar", "lamp", "plot")


class DriverState(str, enum.Enum):
    CLOSED = "closed"  # not connected
    INACTIVE = "inactive"  # connected, readable, outputs held safe
    ACTIVE = "active"  # may move: writes reach the device


class Capability(str, enum.Enum):
    """An optional capability a driver declares (:attr:`Driver.capabilities`); see the module docstring."""

    RECONNECT = "reconnect"
    SLOW_ACTIVATE = "slow_activate"
    PROGRAMS = "programs"
    BODY_TWIST = "body_twist"


#: the actuators of a :attr:`Capability.BODY_TWIST` driver: forward speed, m/s, and yaw rate, rad/s (REP-103)
TWIST_ACTUATORS = ("linear_m_s", "angular_rad_s")


@dataclass(frozen=True)
class JointLimits:
    """A joint a motion program moves, and the limits the program must keep (SI: rad, rad/s, rad/s²)."""

    name: str
    min_rad: float
    max_rad: float
    max_speed_rad_s: float
    max_accel_rad_s2: float


@dataclass(frozen=True)
class MotionProgram:
    """A generated program: its text (one command a line), the number of lines, and per joint (in the order
    asked) what drives it: ``node``, ``counts_per_rev``, ``gear_ratio``, ``max_speed_rad_s``, ``max_accel_rad_s2``
    and ``from_driver`` (the driver's own drive, or a default one of the joint's limits)."""

    text: str
    lines: int
    axes: tuple[dict[str, Any], ...]


class ProgramGenerator(abc.ABC):
    """Turns a joint motion into a program for the drives (:attr:`Capability.PROGRAMS`)."""

    @abc.abstractmethod
    def generate(self, waypoints: Sequence[tuple[float, Mapping[str, float]]],
                 joints: Sequence[JointLimits]) -> MotionProgram:
        """``waypoints``: (t_s, joint name → target rad), the first at the motion's start. Raises
        :class:`drivers.errors.ProgramGenerationError` naming the segment and joint that do not fit."""


@dataclass(frozen=True)
class ChannelSpec:
    """Description of one channel, as data (the dashboard builds its widgets from it).

    ``warn_*``/``crit_*`` are the thresholds the dashboard colours; safety rules
    are separate (config ``[[safety.rules]]``) so that a display change cannot
    weaken a stop.
    """

    name: str
    unit: str = ""
    min: float = 0.0
    max: float = 1.0
    widget: str = "digital"
    label: str = ""
    kind: str = "analog"  # "analog" | "digital"
    warn_low: float | None = None
    warn_high: float | None = None
    crit_low: float | None = None
    crit_high: float | None = None
    plot: bool = False
    decimals: int = 2

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["label"] = self.label or self.name
        return d


@dataclass
class Frame:
    """Latest sensor values. ``t`` is the driver clock in seconds (monotonic).

    ``sample_t`` maps a channel to the host ``time.monotonic()`` at which its value was
    sampled. A value held from an older sample keeps its old time: the supervisor treats
    a rule channel whose sample is older than ``safety.sensor_stale_s`` as failed.
    """

    t: float
    values: dict[str, float] = field(default_factory=dict)
    # ground truth only the simulator knows (pose, collisions); never used by safety
    truth: dict[str, Any] = field(default_factory=dict)
    sample_t: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Acquisition:
    """Sampling rate in Hz and the channels being acquired."""

    rate_hz: float
    channels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rate_hz": self.rate_hz, "channels": list(self.channels)}


class Driver(abc.ABC):
    """Base class of every driver (see the module docstring for the lifecycle and the hooks).

    ``write`` takes a mapping actuator name → value (e.g. ``{"wheel_left": rad/s}``);
    ``actuators()`` lists the names and their limits.
    """

    #: registry name, e.g. "sim"
    name: ClassVar[str] = "base"
    #: the highest and lowest sampling rates this driver supports
    max_rate_hz: ClassVar[float] = 1000.0
    min_rate_hz: ClassVar[float] = 0.1
    #: driver-clock seconds per host second (the simulator may run faster than real time) and the
    #: longest step one read covers; estimators integrate on the driver's clock
    time_scale: float = 1.0
    max_read_dt_s: float = math.inf
    #: the optional capabilities it has (module docstring); the base methods of the others refuse
    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    def __init__(self) -> None:
        self._state = DriverState.CLOSED
        self._output_lock = threading.Lock()
        self.dropped_writes = 0
        self._halts = 0
        self._acquisition = Acquisition(100.0, ())

    @classmethod
    @abc.abstractmethod
    def from_config(cls, table: Mapping[str, Any], profile: Mapping[str, Any]) -> "Driver":
        """Build from the profile's ``[driver]`` table; ``profile`` is the whole validated config
        (read-only) for shared values (robot geometry, loop rate, UWB anchors).

        Raises :class:`drivers.errors.DriverConfigError` naming the bad key."""

    # lifecycle -----------------------------------------------------------
    @property
    def state(self) -> DriverState:
        return self._state

    @property
    def is_open(self) -> bool:
        return self._state is not DriverState.CLOSED

    def open(self) -> None:
        """Connect and configure (``closed`` → ``inactive``); raises :class:`DriverOpenError`."""
        if self._state is not DriverState.CLOSED:
            return
        self._open()
        self._state = DriverState.INACTIVE

    def activate(self) -> None:
        """Allow motion (``inactive`` → ``active``), e.g. enable a drive's power stage."""
        if self._state is DriverState.CLOSED:
            raise DriverStateError(f"{self.name}: cannot activate a closed driver")
        if self._state is DriverState.ACTIVE:
            return
        halts = self._halts
        self._activate()
        with self._output_lock:
            if self._halts != halts:  # a halt arrived while the drive was being enabled: it wins
                return
            self._state = DriverState.ACTIVE

    def deactivate(self) -> None:
        """Halt and leave ``active`` (a no-op when not active)."""
        self.halt()
        if self._state is DriverState.INACTIVE:
            self._deactivate()

    def close(self) -> None:
        """Halt, then release the device; outputs are safe afterwards. Closing twice is fine."""
        if self._state is DriverState.CLOSED:
            return
        self.halt()
        try:
            self._close()
        finally:
            self._state = DriverState.CLOSED

    # I/O -----------------------------------------------------------------
    def read(self, dt_s: float) -> Frame:
        """Latest frame; ``dt_s`` is the measured loop period (the sim steps by it).

        Raises :class:`drivers.errors.DriverError` on failure."""
        if self._state is DriverState.CLOSED:
            raise DriverStateError(f"{self.name}: read from a closed driver")
        frame = self._read(dt_s)
        if len(frame.sample_t) < len(frame.values):
            now = time.monotonic()
            stamped = frame.sample_t
            for name in frame.values:
                if name not in stamped:
                    stamped[name] = now
        return frame

    def write(self, command: Mapping[str, float]) -> bool:
        """Apply an actuator command; ``False`` (dropped, counted) unless the driver is active.

        Raises :class:`DriverCommandError` (nothing written) for an unknown actuator, a
        non-finite value or a value outside the actuator's limits."""
        limits = self.actuators()
        clean: dict[str, float] = {}
        for key, value in command.items():
            lim = limits.get(key)
            if lim is None:
                raise DriverCommandError(f"{self.name}: unknown actuator {key!r}; known: {', '.join(sorted(limits))}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise DriverCommandError(f"{self.name}: {key} must be a finite number, not {value!r}")
            lo, hi = lim
            if not lo <= value <= hi:
                raise DriverCommandError(f"{self.name}: {key}={value:g} is outside [{lo:g}, {hi:g}]")
            clean[key] = float(value)
        with self._output_lock:
            if self._state is not DriverState.ACTIVE:
                self.dropped_writes += 1
                return False
            self._write(clean)
            return True

    def halt(self) -> None:
        """Zero every output now and stay halted until :meth:`activate`. Never raises; any thread."""
        try:
            with self._output_lock:
                self._halts += 1
                if self._state is DriverState.ACTIVE:
                    self._state = DriverState.INACTIVE
                self._halt()
        except Exception:  # the safety path must go on whatever a driver does
            log.exception("%s: halt() failed", self.name)

    # hooks ---------------------------------------------------------------
    @abc.abstractmethod
    def _open(self) -> None:
        """Connect and configure; raise :class:`DriverOpenError`."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the device (already halted)."""

    def _activate(self) -> None:
        """Enable outputs (e.g. a drive's power stage). Default: nothing to do."""

    def _deactivate(self) -> None:
        """Disable outputs after a halt. Default: nothing to do."""

    @abc.abstractmethod
    def _read(self, dt_s: float) -> Frame:
        """The latest frame (control-loop thread only)."""

    @abc.abstractmethod
    def _write(self, command: dict[str, float]) -> None:
        """Apply a checked command; called under the output lock and must not block."""

    @abc.abstractmethod
    def _halt(self) -> None:
        """Write the safe state; called under the output lock, must be fast and must not block."""

    # description ---------------------------------------------------------
    @abc.abstractmethod
    def channels(self) -> list[ChannelSpec]:
        """Every channel this driver can acquire."""

    @abc.abstractmethod
    def actuators(self) -> dict[str, tuple[float, float]]:
        """Actuator name → (min, max) in SI."""

    # acquisition ---------------------------------------------------------
    def get_acquisition(self) -> Acquisition:
        return self._acquisition

    def set_acquisition(self, rate_hz: float, channels: list[str] | tuple[str, ...]) -> Acquisition:
        """Change the sampling rate and active channels; returns what was achieved.

        Raises :class:`drivers.errors.AcquisitionError` naming the bad setting; on error
        nothing changes."""
        if not isinstance(rate_hz, (int, float)) or isinstance(rate_hz, bool) or not math.isfinite(rate_hz):
            raise AcquisitionError("rate_hz must be a finite number")
        if not self.min_rate_hz <= rate_hz <= self.max_rate_hz:
            raise AcquisitionError(f"rate_hz must be in [{self.min_rate_hz:g}, {self.max_rate_hz:g}]")
        known = {c.name for c in self.channels()}
        unknown = [c for c in channels if c not in known]
        if unknown:
            raise AcquisitionError(f"unknown channel(s): {', '.join(map(str, unknown))}")
        if len(set(channels)) != len(channels):
            raise AcquisitionError("channels must not repeat")
        self._acquisition = self._set_acquisition(float(rate_hz), tuple(channels))
        return self._acquisition

    def _set_acquisition(self, rate_hz: float, channels: tuple[str, ...]) -> Acquisition:
        """Apply checked settings; return what was achieved (may raise :class:`AcquisitionError`)."""
        return Acquisition(rate_hz, channels)

    # optional ------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """Link counters for telemetry (bytes in/out, invalid frames, timeouts, rtt …); ``{}`` if none."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Extra description for ``GET /api/robot`` (the simulator gives its world); ``{}`` if none."""
        return {}

    def camera_source(self, settings: Mapping[str, Any]):  # -> drivers.camera.base.CameraSource | None
        """A camera bound to this driver (the simulator renders one); ``None`` if it has none."""
        return None

    def take_events(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        """The device's own events since the last call — (trigger, message, kind, values): an autopilot's
        STATUSTEXT, its mode or arming changes — which the control loop logs after each read (its thread,
        under its lock). Default: none."""
        return []

    def debug(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """Test hooks (fault injection); only reachable when the config enables debug routes."""
        raise NotImplementedError(f"driver {self.name!r} has no debug hooks")

    # declared capabilities -----------------------------------------------
    def has(self, capability: Capability) -> bool:
        """Whether the driver declares ``capability``."""
        return capability in self.capabilities

    def reconnect(self, timeout_s: float | None = None, stop: threading.Event | None = None) -> int:
        """Close and reopen the device after a fault (:attr:`Capability.RECONNECT`), to ``inactive``; blocks,
        retrying up to ``timeout_s`` or until ``stop`` is set; returns the attempts made. Raises
        :class:`DriverError` when the device does not come back."""
        raise DriverStateError(f"driver {self.name!r} cannot reconnect")

    def program_generator(self) -> ProgramGenerator | None:
        """The generator of programs for this driver's drives (:attr:`Capability.PROGRAMS`); ``None`` without."""
        return None


__all__ = ["Acquisition", "Capability", "ChannelSpec", "Driver", "DriverOpenError", "DriverState", "Frame", "JointLimits",
           "MotionProgram", "ProgramGenerator", "TWIST_ACTUATORS", "WIDGETS"]
