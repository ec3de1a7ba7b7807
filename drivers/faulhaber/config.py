"""The FAULHABER drivers' ``[driver]`` table as msgspec Structs (docs/hardware.md, "The driver tables").

:class:`FaulhaberTable` holds the line's keys; each ``[driver.axes.NAME]`` is an :class:`AxisTable`,
converted on its own (:func:`drivers.serial.support.named_tables`) so an error names its key:
``axes.q1.node: must be <= 127``.

>>> from drivers.serial.support import named_tables
>>> axes = named_tables({"q1": {"node": 1, "max_speed_rad_s": 2.0, "max_accel_rad_s2": 10.0}}, AxisTable, "axes")
>>> axes["q1"].config("q1").counts_per_rev, axes["q1"].mode
(2048, 'velocity')
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from msgspec import Meta

from drivers.faulhaber.axis import AxisConfig, AxisMode
from drivers.serial.support import SerialTable, SubTable

Positive = Annotated[float, Meta(gt=0.0)]


class FaulhaberTable(SerialTable):
    """The line: its timing, the reply timeouts, and the drives on it (``axes``, converted apart)."""

    xonxoff: bool | None = None  # None: on for ASCII (the manual's default), off for MC V3.0
    reply_timeout_s: Annotated[float, Meta(ge=0.001, le=10.0)] = 0.2
    timeouts_idle: Annotated[int, Meta(ge=1, le=1000)] = 2
    timeouts_moving: Annotated[int, Meta(ge=1, le=1000)] = 5
    poll_interval_s: Annotated[float, Meta(ge=0.0, le=10.0)] = 0.0
    refresh_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 0.5
    axes: dict[str, Any] = {}


class AxisTable(SubTable, kw_only=True):
    """One drive on the line (:class:`drivers.faulhaber.axis.AxisConfig`)."""

    node: Annotated[int, Meta(ge=0, le=127)]
    mode: Literal["velocity", "position"] = "velocity"
    counts_per_rev: Annotated[int, Meta(ge=1, le=1 << 24)] = 2048
    gear_ratio: Positive = 1.0
    max_speed_rad_s: Positive
    max_accel_rad_s2: Positive
    min_rad: float = -math.pi
    max_rad: float = math.pi
    current_limit_a: Positive | None = None
    peak_current_a: Positive | None = None
    invert: bool = False
    enabled_mask: Annotated[int, Meta(ge=0, le=2**32 - 1)] = 1

    def problem(self) -> tuple[str, str] | None:
        return ("max_rad", "must be greater than min_rad") if self.max_rad <= self.min_rad else None

    def config(self, name: str) -> AxisConfig:
        return AxisConfig(name=name, node=self.node, mode=AxisMode(self.mode), counts_per_rev=self.counts_per_rev,
                          gear_ratio=self.gear_ratio, max_speed_rad_s=self.max_speed_rad_s,
                          max_accel_rad_s2=self.max_accel_rad_s2, min_rad=self.min_rad, max_rad=self.max_rad,
                          current_limit_a=self.current_limit_a, peak_current_a=self.peak_current_a,
                          invert=self.invert, enabled_mask=self.enabled_mask)


__all__ = ["AxisTable", "FaulhaberTable"]
