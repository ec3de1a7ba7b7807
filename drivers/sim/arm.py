"""What the simulated arm drivers share: a simulation behind the :class:`Driver` lifecycle, per-axis
commands handed to the control-loop thread without locks, sampling at the acquisition rate, faults.

:class:`drivers.sim.scara.ScaraSimDriver` and :class:`drivers.sim.stewart.StewartSimDriver`
are built on :class:`SimArmDriver`; like :class:`drivers.sim.rover.SimDriver` they play
ros2_control's mock hardware. Their ``[driver]`` tables are structs of
:mod:`drivers.sim.config` (:class:`~drivers.sim.config.SimArmTable` and its subclasses).

**Commands and halt across threads.** ``_write`` and ``_halt`` (any thread, under
the base's output lock) never touch the simulation: they replace one tuple, the
*desired* state of every axis — ``("position", v)``, ``("velocity", v)`` or
``("hold",)`` — built from the previous one, so a command naming some axes keeps
the others' and nothing is lost between two reads. ``_read`` (the loop thread)
applies that tuple when it is a new object, then steps. ``halt()`` sets every
axis to hold: at the next read every axis stops dead where it is (the simulated
drives' quick stop), before the step.

**Time and sampling.** Each ``read(dt_s)`` advances the simulation by
``dt_s · time_scale`` (capped at ``max_read_dt_s``); ``Frame.t`` is the
simulation clock. Values are sampled on a grid at the acquisition rate and held
in between, each with the host time it was sampled (``Frame.sample_t``).

**Faults** (:meth:`SimArmDriver.debug`, :mod:`drivers.sim.debug`): ``{"fault": "read_error" |
"timeout" | "open_error" | None}``, sticky until cleared.
"""

from __future__ import annotations

import abc
import logging
import math
import time
from typing import Any, Mapping

import msgspec

from drivers.base import Acquisition, ChannelSpec, Driver, Frame
from drivers.errors import DriverCommandError, DriverConfigError, DriverError, DriverOpenError
from drivers.sim.debug import FaultCommand, Faults, parse

logger = logging.getLogger(__name__)

HOLD = ("hold",)


class SimArmDriver(Driver):
    """Base of the simulated arm drivers; see the module docstring. Subclasses provide the simulation."""

    #: axis names, in the order of the desired-state tuple
    axes: tuple[str, ...] = ()

    def __init__(self, *, seed: int = 0, time_scale: float = 1.0, rate_hz: float = 100.0,
                 max_read_dt_s: float = 0.5) -> None:
        super().__init__()
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        for key, value in (("time_scale", time_scale), ("max_read_dt_s", max_read_dt_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"{key} must be a number > 0, got {value!r}")
        if isinstance(rate_hz, bool) or not isinstance(rate_hz, (int, float)) \
                or not self.min_rate_hz <= rate_hz <= self.max_rate_hz:
            raise ValueError(f"rate_hz must be in [{self.min_rate_hz:g}, {self.max_rate_hz:g}], got {rate_hz!r}")
        self.seed, self.time_scale, self.max_read_dt_s = seed, float(time_scale), float(max_read_dt_s)
        self._channels = self._describe_channels()
        self._acquisition = Acquisition(float(rate_hz), tuple(c.name for c in self._channels))
        self._sim: Any = None
        self._desired: tuple[tuple, ...] = (HOLD,) * len(self.axes)
        self._applied: tuple[tuple, ...] | None = None
        self._held: dict[str, float] = {}
        self._held_t: dict[str, float] = {}
        self._next_sample_t = 0.0
        self._faults = Faults(f"{self.name} simulator")

    # ---- what a subclass provides ---------------------------------------------------------
    @abc.abstractmethod
    def _build_sim(self) -> Any:
        """A fresh simulation (seeded from :attr:`seed`); raise ValueError if it cannot be built."""

    @abc.abstractmethod
    def _apply(self, sim: Any, desired: tuple[tuple, ...]) -> None:
        """Hand the desired state of every axis to the simulation (loop thread)."""

    @abc.abstractmethod
    def _sample(self, sim: Any) -> dict[str, float]:
        """Every channel's value now (plain floats)."""

    @abc.abstractmethod
    def _truth(self, sim: Any) -> dict[str, Any]:
        """Ground truth for ``Frame.truth`` (JSON-ready)."""

    @abc.abstractmethod
    def _describe_channels(self) -> list[ChannelSpec]:
        """The channels, as data."""

    @abc.abstractmethod
    def _command_axes(self, command: Mapping[str, float]) -> dict[int, tuple]:
        """Actuator values (checked against the limits by the base) → axis index → desired entry.

        Raise :class:`DriverCommandError` for a command that contradicts itself."""

    # ---- lifecycle --------------------------------------------------------------------------
    @property
    def sim(self) -> Any:
        """The simulation (``None`` before the first open)."""
        return self._sim

    def _open(self) -> None:
        self._faults.check_open()
        try:
            sim = self._build_sim()
        except ValueError as err:
            raise DriverOpenError(f"{self.name}: {err}") from err
        self._desired = (HOLD,) * len(self.axes)
        self._applied = None
        self._held, self._held_t = {}, {}
        self._next_sample_t = 0.0
        self._sim = sim
        logger.info("%s open (seed %d)", self.name, self.seed)

    def _close(self) -> None:
        logger.info("%s closed", self.name)

    # ---- I/O ----------------------------------------------------------------------------------
    def channels(self) -> list[ChannelSpec]:
        return list(self._channels)

    def _write(self, command: dict[str, float]) -> None:
        changes = self._command_axes(command)
        desired = list(self._desired)
        for axis, entry in changes.items():
            desired[axis] = entry
        self._desired = tuple(desired)  # one assignment: the loop thread sees the old or the new, whole

    def _halt(self) -> None:
        self._desired = (HOLD,) * len(self.axes)

    def _read(self, dt_s: float) -> Frame:
        self._faults.check_read()
        sim = self._sim
        if sim is None:
            raise DriverError(f"{self.name} is not open")
        dt = float(dt_s) * self.time_scale
        if not (math.isfinite(dt) and dt >= 0.0):
            raise DriverError(f"read: dt_s must be finite and >= 0, got {dt_s!r}")
        dt = min(dt, self.max_read_dt_s)
        desired = self._desired
        if desired is not self._applied:
            self._apply(sim, desired)
            self._applied = desired
        sim.step(dt)
        t = sim.t
        period = 1.0 / self._acquisition.rate_hz
        # sample when the next sample instant is nearer than half this step (as drivers.sim does)
        if not self._held or t >= self._next_sample_t - 0.5 * dt:
            now = time.monotonic()
            self._held = self._sample(sim)
            self._held_t = dict.fromkeys(self._held, now)
            self._next_sample_t += period
            if self._next_sample_t <= t:
                self._next_sample_t = t + period
        active = self._acquisition.channels
        return Frame(t=t, values={n: self._held[n] for n in active}, truth={"sim_time_s": t, **self._truth(sim)},
                     sample_t={n: self._held_t[n] for n in active})

    def _set_acquisition(self, rate_hz: float, channels: tuple[str, ...]) -> Acquisition:
        """The next read samples at once with the new settings."""
        self._held, self._held_t = {}, {}
        self._next_sample_t = 0.0
        return Acquisition(rate_hz, channels)

    @property
    def desired(self) -> tuple[tuple, ...]:
        """The desired state of every axis (``("position", v)``, ``("velocity", v)`` or ``("hold",)``)."""
        return self._desired

    # ---- test hooks ---------------------------------------------------------------------------
    def debug(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """``{"fault": "read_error" | "timeout" | "open_error" | None}``; returns ``{"fault": ...}``.

        Bad values raise :class:`ValueError` and change nothing."""
        cmd = parse(FaultCommand, command)
        if cmd.fault is not msgspec.UNSET:
            self._faults.set(cmd.fault)
        return {"fault": self._faults.fault}


def build(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls(*args, **kwargs)`` with a :class:`ValueError` turned into :class:`DriverConfigError` (keyed when
    the message starts with a setting's name)."""
    try:
        return cls(*args, **kwargs)
    except ValueError as err:
        first = str(err).split(" ", 1)[0]
        raise DriverConfigError(first if first in kwargs else "", str(err)) from err


def exclusive(command: Mapping[str, float], pairs: Mapping[str, tuple[str, str]]) -> None:
    """:class:`DriverCommandError` when a command gives both actuators of one axis (a position and a velocity)."""
    for axis, (a, b) in pairs.items():
        if a in command and b in command:
            raise DriverCommandError(f"{axis}: give {a} or {b}, not both")


__all__ = ["HOLD", "SimArmDriver", "build", "exclusive"]
