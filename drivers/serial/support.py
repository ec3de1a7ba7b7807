"""What the serial drivers share beyond the link: their config table's common keys, reconnect with backoff.

Each serial driver's ``[driver]`` table is a msgspec Struct built on :class:`SerialTable`, converted
with :func:`drivers.tables.convert_table`, so a bad key raises :class:`DriverConfigError` naming it
(dotted within the ``[driver]`` table: ``port``, ``analog.battery.poly``) and a wrong profile says
exactly what to fix. Named sub-tables (channels, wheels, axes) go through :func:`named_tables`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Annotated, Any, Callable, Mapping, TypeVar

import msgspec
from msgspec import Meta

from drivers.errors import DriverConfigError, DriverError
from drivers.tables import convert_table

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

logger = logging.getLogger(__name__)

#: waits between reconnect attempts, s; the last one repeats
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)


class SerialTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What every serial driver's ``[driver]`` table has (each driver's struct adds its own keys)."""

    name: str = ""
    port: Annotated[str, Meta(min_length=1)]  # a device path or a pyserial URL (loop://, socket://host:port)
    baudrate: Annotated[int, Meta(ge=300, le=4_000_000)] | None = None  # None: the driver's default
    rate_hz: Annotated[float, Meta(ge=0.1, le=1000.0)] | None = None  # None: the driver's default
    reconnect_timeout_s: Annotated[float, Meta(ge=0.0, le=3600.0)] = 10.0


class SubTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A named sub-table (a channel, a wheel, an axis); :meth:`problem` is what its fields cannot say alone."""

    def problem(self) -> tuple[str, str] | None:
        """(key within the sub-table, or "" for the whole; what is wrong), or None."""
        return None


S = TypeVar("S", bound=SubTable)


def named_tables(tables: Mapping[str, Any], cls: type[S], prefix: str) -> dict[str, S]:
    """A table of named sub-tables (``[driver.analog.battery]`` …) as ``name → cls`` structs, each converted on
    its own so an error names its key (msgspec would say ``analog[...]``); names are lower_snake_case.

    >>> class Pin(SubTable):
    ...     pin: int
    >>> named_tables({"Led": {"pin": 3}}, Pin, "outputs")
    Traceback (most recent call last):
    ...
    drivers.errors.DriverConfigError: outputs.Led: names are lower_case_with_underscores
    """
    out = {}
    for name, sub in tables.items():
        key = f"{prefix}.{name}"
        if not _NAME.match(name):
            raise DriverConfigError(key, "names are lower_case_with_underscores")
        table = convert_table(sub, cls, key)
        problem = table.problem()
        if problem is not None:
            raise DriverConfigError(f"{key}.{problem[0]}" if problem[0] else key, problem[1])
        out[name] = table
    return out


def reconnect(open_once: Callable[[], None], timeout_s: float, stop: threading.Event | None = None,
              backoff_s: tuple[float, ...] = BACKOFF_S, what: str = "driver") -> int:
    """Call ``open_once`` until it succeeds, waiting ``backoff_s`` between tries; the attempts made.

    Raises the last :class:`DriverError` when ``timeout_s`` passes (or ``stop`` is set) first.
    Motion is never restarted here: the caller opens to ``inactive`` only.
    """
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        attempt += 1
        try:
            open_once()
            logger.info("%s: reconnected after %d attempt(s)", what, attempt)
            return attempt
        except DriverError as err:
            wait = backoff_s[min(attempt - 1, len(backoff_s) - 1)]
            if time.monotonic() + wait > deadline or (stop is not None and stop.is_set()):
                raise
            logger.info("%s: reconnect attempt %d failed (%s); next in %.1f s", what, attempt, err, wait)
            if stop is not None:
                if stop.wait(wait):
                    raise
            else:
                time.sleep(wait)
