"""What the serial drivers share beyond the link: config-table checks, reconnect with backoff.

Config checks raise :class:`DriverConfigError` naming the key (dotted within
the ``[driver]`` table) so a wrong profile says exactly what to fix.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable, Mapping

from drivers.errors import DriverConfigError, DriverError

logger = logging.getLogger(__name__)

#: waits between reconnect attempts, s; the last one repeats
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)


class Table:
    """A ``[driver]`` (sub)table read key by key; :meth:`done` refuses the keys nobody read.

    >>> t = Table({"port": "loop://", "baudrate": 9600}, "driver")
    >>> t.str("port"), t.int("baudrate", lo=300)
    ('loop://', 9600)
    >>> t.done()
    >>> Table({"rate": "x"}, "driver").number("rate")
    Traceback (most recent call last):
    ...
    drivers.errors.DriverConfigError: driver.rate: must be a number, not 'x'
    """

    def __init__(self, data: Mapping[str, Any], prefix: str) -> None:
        if not isinstance(data, Mapping):
            raise DriverConfigError(prefix, "must be a table")
        self.data = data
        self.prefix = prefix
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = None) -> Any:
        self.seen.add(name)
        return self.data.get(name, default)

    def str(self, name: str, default: str | None = None, choices: tuple[str, ...] | None = None) -> str:
        v = self.raw(name, default)
        if not isinstance(v, str) or not v:
            raise DriverConfigError(self.key(name), "is required" if v is None else f"must be a text, not {v!r}")
        if choices is not None and v not in choices:
            raise DriverConfigError(self.key(name), f"must be one of {', '.join(choices)}, not {v!r}")
        return v

    def number(self, name: str, default: float | None = None, lo: float = -math.inf, hi: float = math.inf,
               lo_open: bool = False) -> float:
        v = self.raw(name, default)
        if v is None:
            raise DriverConfigError(self.key(name), "is required")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise DriverConfigError(self.key(name), f"must be a number, not {v!r}")
        if v < lo or v > hi or (lo_open and v == lo):
            lo_s = f"> {lo:g}" if lo_open else f">= {lo:g}"
            raise DriverConfigError(self.key(name), f"must be {lo_s} and <= {hi:g}, not {v!r}")
        return float(v)

    def int(self, name: str, default: int | None = None, lo: int = -(2**63), hi: int = 2**63) -> int:
        v = self.raw(name, default)
        if v is None:
            raise DriverConfigError(self.key(name), "is required")
        if isinstance(v, bool) or not isinstance(v, int):
            raise DriverConfigError(self.key(name), f"must be an integer, not {v!r}")
        if not lo <= v <= hi:
            raise DriverConfigError(self.key(name), f"must be in [{lo}, {hi}], not {v}")
        return v

    def optional_int(self, name: str, lo: int = 0, hi: int = 127) -> int | None:
        return None if self.raw(name) is None else self.int(name, lo=lo, hi=hi)

    def bool(self, name: str, default: bool) -> bool:
        v = self.raw(name, default)
        if not isinstance(v, bool):
            raise DriverConfigError(self.key(name), f"must be true or false, not {v!r}")
        return v

    def tables(self, name: str) -> dict[str, "Table"]:
        v = self.raw(name, {})
        if not isinstance(v, Mapping):
            raise DriverConfigError(self.key(name), "must be a table of tables")
        return {k: Table(sub, f"{self.key(name)}.{k}") for k, sub in v.items()}

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise DriverConfigError(self.key(unknown[0]), f"unknown key (known: {', '.join(sorted(self.seen))})")


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
