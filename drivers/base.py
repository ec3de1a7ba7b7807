"""The driver interface: one for the simulator and every piece of hardware.

A driver has a lifecycle (``closed`` → ``open`` → ``closed``), describes its
channels as data, reads a :class:`Frame` of the latest sensor values, writes an
actuator command, and has a fast ``halt()`` that never raises, called from the
safety path. Acquisition settings (sampling rate, active channels) are part of
the interface since the operator may change them at run time.

All values are SI (m, s, rad, m/s, rad/s, V, A) unless a channel's ``unit`` says
otherwise. Drivers are called from the control-loop thread only, except
``halt()`` which may be called from any thread.
"""

from __future__ import annotations

import abc
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

WIDGETS = ("dial", "digital", "bar", "lamp", "plot")


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
    """Latest sensor values. ``t`` is the driver clock in seconds (monotonic)."""

    t: float
    values: dict[str, float] = field(default_factory=dict)
    # ground truth only the simulator knows (pose, collisions); never used by safety
    truth: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Acquisition:
    """Sampling rate in Hz and the channels being acquired."""

    rate_hz: float
    channels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rate_hz": self.rate_hz, "channels": list(self.channels)}


class Driver(abc.ABC):
    """Base class of every driver; subclasses override the ``_``-less abstract methods.

    ``write`` takes a mapping actuator name → value (e.g. ``{"wheel_left": rad/s}``);
    ``actuators()`` lists the names and their limits.
    """

    #: registry name, e.g. "sim"
    name: str = "base"
    #: the highest sampling rate this driver supports
    max_rate_hz: float = 1000.0

    def __init__(self) -> None:
        self.is_open = False

    # lifecycle -----------------------------------------------------------
    @abc.abstractmethod
    def open(self) -> None:
        """Connect and configure; raises :class:`drivers.errors.DriverOpenError`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device; outputs must be safe (halted) afterwards."""

    # description ---------------------------------------------------------
    @abc.abstractmethod
    def channels(self) -> list[ChannelSpec]:
        """Every channel this driver can acquire."""

    @abc.abstractmethod
    def actuators(self) -> dict[str, tuple[float, float]]:
        """Actuator name → (min, max) in SI."""

    # I/O -----------------------------------------------------------------
    @abc.abstractmethod
    def read(self, dt_s: float) -> Frame:
        """Latest frame; ``dt_s`` is the measured loop period (the sim steps by it).

        Raises :class:`drivers.errors.DriverError` on failure.
        """

    @abc.abstractmethod
    def write(self, command: Mapping[str, float]) -> None:
        """Apply an actuator command (already limited by the server)."""

    @abc.abstractmethod
    def halt(self) -> None:
        """Zero every output now. Must never raise and must be fast; any thread may call it."""

    # acquisition ---------------------------------------------------------
    def get_acquisition(self) -> Acquisition:
        return self._acquisition

    def set_acquisition(self, rate_hz: float, channels: list[str] | tuple[str, ...]) -> Acquisition:
        """Change the sampling rate and active channels; returns what was achieved.

        Raises :class:`drivers.errors.AcquisitionError` naming the bad setting;
        on error nothing changes.
        """
        from drivers.errors import AcquisitionError

        if not isinstance(rate_hz, (int, float)) or isinstance(rate_hz, bool) or not math.isfinite(rate_hz):
            raise AcquisitionError("rate_hz must be a finite number")
        if not 0 < rate_hz <= self.max_rate_hz:
            raise AcquisitionError(f"rate_hz must be in (0, {self.max_rate_hz:g}]")
        known = {c.name for c in self.channels()}
        unknown = [c for c in channels if c not in known]
        if unknown:
            raise AcquisitionError(f"unknown channel(s): {', '.join(map(str, unknown))}")
        if len(set(channels)) != len(channels):
            raise AcquisitionError("channels must not repeat")
        self._acquisition = Acquisition(float(rate_hz), tuple(channels))
        return self._acquisition

    _acquisition: Acquisition = Acquisition(100.0, ())

    # optional ------------------------------------------------------------
    def camera_source(self, settings: Mapping[str, Any]):  # -> drivers.camera.base.CameraSource | None
        """A camera bound to this driver (the simulator renders one); ``None`` if it has none."""
        return None

    def debug(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """Test hooks (fault injection); only reachable when the config enables debug routes."""
        raise NotImplementedError(f"driver {self.name!r} has no debug hooks")
