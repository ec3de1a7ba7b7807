"""What the emulated drive buses share: the wire, the answers' fault injection and the physics clock.

The FAULHABER emulators speak different protocols (ASCII command lines, MC V3.0 binary frames) over
one serial line to several drives each; the rest is the same and lives here:

* the wire: bytes leave in order, no sooner than the line's baud rate lets them (``baudrate`` None:
  no wire delay), and :meth:`SerialBus.advance` hands the pty runner what is due;
* the answers' faults (:meth:`SerialBus.inject`): ``drop`` (the next ``count`` answers), ``delay``
  (answers ``delay_s`` late), ``hold`` (keep answers until ``release``), ``silent``, ``garbage``
  (``count`` random bytes on the line now), ``reboot`` (drives reset, silent for ``boot_s``), ``clear``;
  a bus adds its own in :attr:`SerialBus.COUNTED` and :meth:`SerialBus._inject`;
* the physics clock: :meth:`SerialBus._elapsed` gives the seconds since the last call.

A bus's ``config`` has ``baudrate``, ``response_delay_s``, ``boot_s`` and ``seed``; its drives have
``reset()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class SerialBus:
    """The shared half of an emulated drive bus (see the module docstring); the protocol is the subclass's."""

    #: faults that are a count or a delay, kept in ``faults`` until used up or ``clear``
    COUNTED: tuple[str, ...] = ("drop", "delay", "silent", "hold")

    def __init__(self, config: Any, drives: dict[int, Any]) -> None:
        self.config = config
        self.drives = drives
        self.rng = np.random.default_rng(config.seed)
        self.faults: dict[str, float] = {}
        self._buf = bytearray()
        self._out: list[tuple[float, bytes]] = []  # (when due, bytes), in order
        self._held: list[bytes] = []
        self._wire_free_t = 0.0
        self._last_t: float | None = None
        self._silent_until = 0.0

    # runner interface ------------------------------------------------------------
    def next_wakeup_s(self, now_s: float) -> float:
        t = now_s + 0.005  # the motors' physics
        if self._out:
            t = min(t, self._out[0][0])
        return t

    def advance(self, now_s: float) -> bytes:
        self._physics(now_s)
        self._due(now_s)
        out = bytearray()
        while self._out and self._out[0][0] <= now_s:
            out += self._out.pop(0)[1]
        return bytes(out)

    # faults ------------------------------------------------------------------------
    def inject(self, fault: str, now_s: float = 0.0, **kw: float) -> None:
        if fault == "clear":
            self.faults.clear()
        elif fault in self.COUNTED:
            self.faults[fault] = float(kw.get("count", kw.get("delay_s", 1)))
        elif fault == "release":
            self.faults.pop("hold", None)
            for data in self._held:
                self._send(data, now_s)
            self._held.clear()
        elif fault == "garbage":
            self._send(bytes(self.rng.integers(0, 256, int(kw.get("count", 16)), dtype=np.uint8)), now_s)
        elif fault == "reboot":
            for d in self.drives.values():
                d.reset()
            self._reboot(now_s, float(kw.get("boot_s", self.config.boot_s)))
        else:
            self._inject(fault, now_s)

    def _inject(self, fault: str, now_s: float) -> None:
        """A fault of the subclass's own."""
        raise ValueError(f"unknown fault {fault!r}")

    def _reboot(self, now_s: float, boot_s: float) -> None:
        self._silent_until = now_s + boot_s

    def _take(self, fault: str) -> bool:
        """Whether a counted fault applies to this answer (and one of its count is used up)."""
        if self.faults.get(fault, 0) <= 0:
            return False
        self.faults[fault] -= 1
        if self.faults[fault] <= 0:
            del self.faults[fault]
        return True

    # the wire ----------------------------------------------------------------------
    def _answer(self, data: bytes, now_s: float) -> None:
        """An answer leaves after the drive's processing time (and an injected delay), or is held."""
        if "hold" in self.faults:
            self._held.append(data)
            return
        self._send(data, now_s + self.config.response_delay_s + self.faults.get("delay", 0.0))

    def _send(self, data: bytes, t: float) -> None:
        baud = self.config.baudrate
        if baud:
            start = max(t, self._wire_free_t)
            self._wire_free_t = start + len(data) * 10.0 / baud
            t = self._wire_free_t
        self._out.append((t, data))
        self._out.sort(key=lambda x: x[0])

    def _due(self, now_s: float) -> None:
        """What the bus sends by itself once ``now_s`` comes (a boot-up message)."""

    # physics -----------------------------------------------------------------------
    def _physics(self, now_s: float) -> None:
        raise NotImplementedError

    def _elapsed(self, now_s: float) -> float:
        """Seconds since the last call (0 on the first; at most 10: a paused test does not fling the motors)."""
        if self._last_t is None:
            self._last_t = now_s
            return 0.0
        dt = min(10.0, max(0.0, now_s - self._last_t))
        self._last_t = now_s
        return dt


__all__ = ["SerialBus"]
