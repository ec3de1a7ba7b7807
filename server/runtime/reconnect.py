"""A device driver's blocking lifecycle calls, off the control loop's tick: reconnect and activate.

Two calls of a serial driver talk to the device and wait for it: ``reconnect()`` (seconds) and
``activate()`` (a FAULHABER drive is enabled by requests that each await an answer on a half-duplex
line). Made in the tick, under the loop's lock, either would stall the loop and hold back every
operator request behind it — an e-stop included: measured, an HTTP e-stop waited 10 s for a start's
``EN`` whose answer the drive held back. So both run in worker threads here; the tick only looks at
how they are doing. Drivers declare it (:class:`drivers.base.Capability`): ``RECONNECT`` for
``reconnect()``, ``SLOW_ACTIVATE`` for an ``activate()`` that waits for the device (device drivers;
the simulator has neither and keeps its instant, in-tick activation).

Reconnect
---------

A serial driver's fault sticks (docs/hardware.md, "Faults, reconnect, and the stop bound"):
after a lost port, a silent board, garbage or a board that reset itself, every read raises
until ``driver.reconnect()`` closes the port and opens it again. That call blocks — a Firmata
board resets when its port opens and talks only seconds later, a drive on a dead line is
retried with backoff up to the driver's ``reconnect_timeout_s`` — so it cannot run in the
control loop's tick. The loop keeps its rate meanwhile (it still publishes the fault, takes
e-stops, keeps the event log) and does **not read the driver** while a reconnect runs (the
driver is being closed and reopened under it): it reports the read as failed, so the
supervisor holds ``fault``.

A driver that comes back is ``inactive`` (outputs safe, relay open, drives disabled). The
supervisor's ``fault`` clears only by an operator's reset (accepted once fresh data flows
again) and motion only by the operator's start after it. This is ros2_control's error
handling: the hardware is made safe and waits to be activated again; nothing here moves it.

``reconnect(timeout_s=None, stop=None) -> attempts`` is the serial drivers'; the simulator heals
when its injected fault is cleared.

Backoff: the driver's own (0.1, 0.2, 0.5, 1, 2, 2 … s) inside each ``reconnect`` call;
between calls that failed, :data:`RETRY_S`; and a driver that fails again soon after it
came back (within :data:`STABLE_S`) waits :data:`CYCLE_BACKOFF_S` (growing) before the next
reconnect, so a flapping board does not keep the line in a reset loop.

Activate
--------
After an accepted start the tick asks :meth:`Activator.poll` each tick until the worker's
``activate()`` finished, and writes nothing meanwhile (the driver is not active yet; the supervisor
keeps running). A halt that comes in meanwhile wins: the driver base refuses the activation, and the
worker halts once more after it, because a stop's bytes may have gone out *before* the rest of the
activation's (a drive ``EN``-abled after its ``DI``, a relay closed after it was opened).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol

from drivers.base import Capability, Driver, DriverState

log = logging.getLogger(__name__)

#: wait between two ``reconnect`` calls that both failed, s
RETRY_S = 2.0
#: a driver that fails again within this long after it came back is flapping, s
STABLE_S = 10.0
#: waits before reconnecting a flapping driver (the n-th quick failure in a row), s; the last repeats
CYCLE_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
#: how long :meth:`Reconnector.stop` waits for a reconnect in progress (an open may wait for a banner), s
STOP_JOIN_S = 10.0


class EventSink(Protocol):
    """The control loop's event log (``emit`` under its lock, ``emit_now`` from another thread)."""

    def emit(self, trigger: str, message: str, kind: str = "info", values: dict[str, Any] | None = None) -> None: ...

    def emit_now(self, trigger: str, message: str, kind: str = "info",
                 values: dict[str, Any] | None = None) -> None: ...


class Reconnector:
    """Runs ``driver.reconnect`` in a worker thread after a failed read, until the driver is back.

    The control loop calls :meth:`start` (on its thread, under its lock) when a read fails and
    checks :attr:`busy` before each read; :meth:`status` goes into the snapshot's ``driver``
    field; :meth:`stop` ends a reconnect in progress at shutdown.

    >>> from drivers.sim import SimDriver
    >>> class Board(SimDriver):
    ...     capabilities = frozenset({Capability.RECONNECT})
    ...     def reconnect(self, timeout_s=None, stop=None):
    ...         return 3
    >>> class Log:
    ...     def emit(self, *a, **k): pass
    ...     def emit_now(self, *a, **k): pass
    >>> r = Reconnector.for_driver(Board({}, {}), Log())
    >>> r.start("DriverLinkError: port unplugged"), r.wait_idle(5.0), r.status()["reconnects"]
    (True, True, 1)
    >>> Reconnector.for_driver(SimDriver({}, {}), Log()) is None   # a driver that cannot reconnect: nothing to do
    True
    """

    def __init__(self, driver: Driver, events: EventSink, *, retry_s: float = RETRY_S, stable_s: float = STABLE_S,
                 cycle_backoff_s: tuple[float, ...] = CYCLE_BACKOFF_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.driver = driver
        self.events = events
        self.retry_s = retry_s
        self.stable_s = stable_s
        self.cycle_backoff_s = cycle_backoff_s
        self.clock = clock
        self._busy = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reason = ""
        self._since = 0.0
        self._back_t = -float("inf")  # when the driver last came back
        self._quick_failures = 0  # failures within stable_s of coming back, in a row
        # counters for telemetry (written by the worker, read by anyone)
        self.reconnects = 0  # times the driver came back
        self.failures = 0  # reconnect calls that gave up (each tried for the driver's reconnect_timeout_s)
        self.last_error: str | None = None

    @classmethod
    def for_driver(cls, driver: Driver, events: EventSink, **kw: Any) -> "Reconnector | None":
        """A reconnector when ``driver`` declares it can reconnect, else ``None``."""
        return cls(driver, events, **kw) if driver.has(Capability.RECONNECT) else None

    # ------------------------------------------------------------------ the control loop's side
    @property
    def busy(self) -> bool:
        """A reconnect is in progress: do not read the driver."""
        return self._busy.is_set()

    def read_error(self) -> str:
        """What a tick reports instead of reading while :attr:`busy`."""
        return f"reconnecting to the driver for {self.clock() - self._since:.1f} s (after {self._reason})"

    def start(self, reason: str) -> bool:
        """Begin reconnecting after a failed read (control-loop thread, under its lock); False if already
        running or stopped. Emits ``driver_reconnecting``."""
        if self._busy.is_set() or self._stop.is_set():
            return False
        if self._thread is not None and self._thread.is_alive():
            return False  # the last reconnect is still announcing itself; the next failed read starts one
        now = self.clock()
        delay = 0.0
        if now - self._back_t < self.stable_s:
            delay = self.cycle_backoff_s[min(self._quick_failures, len(self.cycle_backoff_s) - 1)]
            self._quick_failures += 1
        else:
            self._quick_failures = 0
        self._reason = reason
        self._since = now
        self._busy.set()
        self.events.emit("driver_reconnecting",
                         f"driver failed ({reason}); reconnecting" + (f" in {delay:g} s" if delay else ""),
                         values={"reason": reason, "delay_s": delay})
        log.warning("driver failed (%s); reconnecting%s", reason, f" in {delay:g} s" if delay else "")
        self._thread = threading.Thread(target=self._run, args=(delay,), name="driver-reconnect", daemon=True)
        self._thread.start()
        return True

    def status(self) -> dict[str, Any]:
        """For the snapshot's ``driver`` field (flat, so ``/metrics`` can export the numbers)."""
        return {"reconnecting": self._busy.is_set(), "reconnects": self.reconnects,
                "reconnect_failures": self.failures, "reconnect_error": self.last_error}

    def stop(self, timeout_s: float = STOP_JOIN_S) -> None:
        """End a reconnect in progress (shutdown) and wait for the worker, at most ``timeout_s``."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
            if t.is_alive():
                log.warning("driver reconnect still running %.0f s after shutdown was asked", timeout_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no reconnect runs and its worker has ended (tests); True if so."""
        t = self._thread
        if t is not None:
            t.join(timeout_s)
        return not self._busy.is_set() and (t is None or not t.is_alive())

    # ------------------------------------------------------------------ the worker
    def _run(self, delay_s: float) -> None:
        calls = 0
        announced = False
        try:
            if delay_s and self._stop.wait(delay_s):
                return
            while not self._stop.is_set():
                calls += 1
                try:
                    attempts = int(self.driver.reconnect(None, self._stop))
                except Exception as err:  # noqa: BLE001 - DriverError, or a driver bug: keep trying either way
                    self.last_error = f"{type(err).__name__}: {err}"
                    if self._stop.is_set():
                        return
                    self.failures += 1
                    if not announced:  # once per outage: the snapshot carries the count from here on
                        announced = True
                        self.events.emit_now("driver_reconnect_failed",
                                             f"driver still down ({self.last_error}); retrying until it answers",
                                             values={"error": self.last_error})
                    log.info("driver reconnect failed (%s); retrying in %g s", self.last_error, self.retry_s)
                    if self._stop.wait(self.retry_s):
                        return
                    continue
                self.reconnects += 1
                self.last_error = None
                took = self.clock() - self._since
                self._back_t = self.clock()
                self._busy.clear()  # before the event: whoever sees it and asks for the state sees the driver back
                log.warning("driver reconnected after %.2f s; outputs stay off until reset and start", took)
                self.events.emit_now("driver_reconnected",
                                     f"driver reconnected after {took:.2f} s; outputs stay off: reset, then start",
                                     values={"after_s": round(took, 3), "calls": calls, "attempts": attempts})
                return
        finally:
            self._busy.clear()


class Activator:
    """``driver.activate()`` for one accepted start, in a worker thread; the tick polls it.

    >>> from drivers.sim import SimDriver
    >>> drive = SimDriver({}, {})
    >>> drive.open()
    >>> a = Activator(drive)
    >>> a.poll(1)               # the first poll of start 1 starts the worker
    False
    >>> a.wait_idle(5.0), a.poll(1)
    (True, True)
    """

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self._start = 0
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_driver(cls, driver: Driver) -> "Activator | None":
        """An activator for a driver that declares a slow ``activate()``, else ``None`` (activate in the tick)."""
        return cls(driver) if driver.has(Capability.SLOW_ACTIVATE) else None

    @property
    def busy(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def poll(self, start: int) -> bool:
        """True once ``activate()`` returned for the supervisor's ``start``; starts it on the first poll (after a
        previous activation's worker has finished). Raises what ``activate()`` raised."""
        if self._start != start:
            if self.busy:
                return False  # the last start's activation is still winding down: one at a time
            self._start = start
            self._done.clear()
            self._error = None
            self._thread = threading.Thread(target=self._run, name="driver-activate", daemon=True)
            self._thread.start()
            return False
        if not self._done.is_set():
            return False
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no activation runs (tests); True if idle."""
        t = self._thread
        if t is not None:
            t.join(timeout_s)
        return not self.busy

    def _run(self) -> None:
        try:
            self.driver.activate()
            if self.driver.state is not DriverState.ACTIVE:
                # a halt overtook the activation: what the activation wrote after the stop's bytes is undone
                self.driver.halt()
        except Exception as err:  # noqa: BLE001 - handed to the tick, which faults the robot on it
            self._error = err
            self.driver.halt()
        finally:
            self._done.set()


def lifecycle_status(reconnector: Reconnector | None, activator: Activator | None) -> dict[str, Any]:
    """The workers' part of the snapshot's ``driver`` field (``{}`` for a driver without them)."""
    out: dict[str, Any] = reconnector.status() if reconnector is not None else {}
    if activator is not None:
        out["activating"] = activator.busy
    return out


__all__ = ["Activator", "CYCLE_BACKOFF_S", "RETRY_S", "Reconnector", "STABLE_S", "lifecycle_status"]
