"""The ``firmata`` driver's ``[driver]`` table as msgspec Structs (docs/hardware.md, "The driver tables").

:class:`FirmataTable` holds the link and timing keys; each named sub-table — ``analog``,
``digital``, ``wheels``, ``servos``, ``outputs`` — is a struct of its own (:class:`AnalogTable`, …),
converted one by one (:func:`drivers.serial.support.named_tables`) so an error names its key:
``analog.battery.poly: must be a list of length <= 6``.

>>> from drivers.tables import convert_table
>>> t = convert_table({"port": "loop://", "keep_alive_s": 2}, FirmataTable)
>>> t.keep_alive_s, t.banner_wait_s, t.analog
(2, 5.0, {})
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from drivers.firmata.protocol import MAX_KEEP_ALIVE_S
from drivers.serial.support import SerialTable, SubTable

Pin = Annotated[int, Meta(ge=2, le=127)]


class FirmataTable(SerialTable):
    """The board: its line, timing and safety pins; the sub-tables are converted apart (their keys named)."""

    banner_wait_s: Annotated[float, Meta(ge=0.0, le=30.0)] = 5.0  # the board resets when its port opens
    query_timeout_s: Annotated[float, Meta(ge=0.01, le=30.0)] = 1.0
    stale_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 0.5
    keep_alive_s: Annotated[int, Meta(ge=0, le=MAX_KEEP_ALIVE_S)] = 1  # the board zeroes its PWM without refreshes
    require_keep_alive: bool = False
    estop_pin: Annotated[int, Meta(ge=0, le=127)] | None = None
    estop_active_low: bool = True
    relay_pin: Annotated[int, Meta(ge=0, le=127)] | None = None
    analog: dict[str, Any] = {}
    digital: dict[str, Any] = {}
    wheels: dict[str, Any] = {}
    servos: dict[str, Any] = {}
    outputs: dict[str, Any] = {}


class AnalogTable(SubTable):
    """An analog input: its channel, the polynomial from counts (c0 + c1·x + …) and how the dashboard shows it."""

    channel: Annotated[int, Meta(ge=0, le=15)]
    poly: Annotated[list[float], Meta(min_length=1, max_length=6)] = msgspec.field(default_factory=lambda: [0.0, 1.0])
    unit: str = ""
    min: float = 0.0
    max: float = 1023.0
    warn_low: float | None = None
    warn_high: float | None = None
    crit_low: float | None = None
    crit_high: float | None = None
    widget: Literal["dial", "digital", "bar", "lamp", "plot"] = "dial"
    label: str = ""
    plot: bool = True

    def problem(self) -> tuple[str, str] | None:
        if self.max <= self.min:
            return "max", "must be greater than min"
        for key in ("warn_low", "warn_high", "crit_low", "crit_high"):
            v = getattr(self, key)
            if v is not None and not self.min <= v <= self.max:
                return key, f"must be in [min, max] = [{self.min:g}, {self.max:g}]"
        return None


class DigitalTable(SubTable):
    pin: Pin
    pullup: bool = True
    active_low: bool = True


class WheelTable(SubTable):
    pwm_pin: Pin
    dir_pin: Pin
    max_rad_s: Annotated[float, Meta(gt=0.0)]  # the wheel speed at full PWM
    invert: bool = False
    pwm_max: Annotated[int, Meta(ge=1, le=(1 << 14) - 1)] = 255

    def problem(self) -> tuple[str, str] | None:
        return ("dir_pin", "must differ from pwm_pin") if self.pwm_pin == self.dir_pin else None


class ServoTable(SubTable):
    pin: Pin
    min_rad: float = 0.0
    max_rad: float = math.pi
    min_pulse_us: Annotated[int, Meta(ge=100, le=3000)] = 544
    max_pulse_us: Annotated[int, Meta(ge=100, le=3000)] = 2400

    def problem(self) -> tuple[str, str] | None:
        if self.max_rad <= self.min_rad or self.max_pulse_us <= self.min_pulse_us:
            return "", "max_rad and max_pulse_us must exceed their minimums"
        return None


class OutputTable(SubTable):
    pin: Pin


__all__ = ["AnalogTable", "DigitalTable", "FirmataTable", "OutputTable", "ServoTable", "WheelTable"]
