"""The simulated drivers' test hooks (``POST /api/debug/driver`` with ``[debug] routes``): fault injection and,
for the rover, forced readings and a teleport.

A debug command is a msgspec Struct like every other body (:class:`FaultCommand` for every sim
driver, :class:`RoverCommand` for the rover): unknown keys, wrong types and values out of range raise
:class:`ValueError` naming the key, and nothing changes. :class:`Faults` is the injected fault every
sim driver shares: sticky across close and open until cleared, checked by ``open`` and ``read``.

>>> f = Faults("simulator")
>>> f.set(parse(FaultCommand, {"fault": "timeout"}).fault)
>>> f.check_read()
Traceback (most recent call last):
...
drivers.errors.DriverTimeoutError: injected timeout: no frame from the simulator
>>> parse(FaultCommand, {"teleport": [0, 0, 0]})
Traceback (most recent call last):
...
ValueError: unknown debug key(s): teleport
"""

from __future__ import annotations

import logging
from typing import Any, Literal, Mapping, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from drivers.errors import DriverError, DriverOpenError, DriverTimeoutError
from drivers.tables import explain, explain_words, non_finite_path

logger = logging.getLogger(__name__)

Fault = Literal["read_error", "timeout", "open_error"]
T = TypeVar("T")


class FaultCommand(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``{"fault": "read_error" | "timeout" | "open_error" | null}``: reads raise :class:`DriverError`, reads
    raise :class:`DriverTimeoutError`, ``open`` raises :class:`DriverOpenError`; ``null`` clears it."""

    fault: Fault | None | UnsetType = UNSET


class RoverCommand(FaultCommand):
    """The rover's hooks, each optional, applied in this order after the fault:

    * ``battery_v``: pin the battery voltage reading (V), ``null`` to release;
    * ``freeze``: channel names whose sensor stops updating (the value and its sample time stay those
      of the last sample: a stale reading); ``[]`` to release;
    * ``nan``: channel names that read NaN (no echo, a dead sensor); ``[]`` to release;
    * ``teleport``: ``[x_m, y_m, yaw_rad]``: the rover stops there (the driver must be open).
    """

    battery_v: float | None | UnsetType = UNSET
    teleport: tuple[float, float, float] | None | UnsetType = UNSET
    freeze: list[str] | UnsetType = UNSET
    nan: list[str] | UnsetType = UNSET


def parse(cls: type[T], command: Mapping[str, Any]) -> T:
    """``command`` as a ``cls``; :class:`ValueError` naming the key otherwise."""
    if not isinstance(command, Mapping):
        raise ValueError("a debug command is an object")
    bad = non_finite_path(dict(command))
    if bad is not None:
        raise ValueError(f"{bad.lstrip('.')} must be finite")
    try:
        return msgspec.convert(dict(command), cls)
    except msgspec.ValidationError as err:
        e = explain(err)
        if e.kind == "unknown_field":
            raise ValueError(f"unknown debug key(s): {e.field}") from None
        raise ValueError(f"{e.key()}: {explain_words(e, cls)}") from None


class Faults:
    """The fault injected into a sim driver (``what`` names it in the messages)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.fault: str | None = None

    def set(self, fault: str | None) -> None:
        if fault != self.fault:
            logger.warning("%s fault injection: %s", self.what, fault)
        self.fault = fault

    def check_open(self) -> None:
        if self.fault == "open_error":
            raise DriverOpenError("injected open error")

    def check_read(self) -> None:
        if self.fault == "read_error":
            raise DriverError("injected read error")
        if self.fault == "timeout":
            raise DriverTimeoutError(f"injected timeout: no frame from the {self.what}")


__all__ = ["Fault", "FaultCommand", "Faults", "RoverCommand", "parse"]
