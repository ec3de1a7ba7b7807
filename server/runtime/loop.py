"""The control loop: a dedicated thread at a fixed rate with absolute deadlines, robot-neutral.

Each tick: read the driver → run the stages (estimators) → run the safety supervisor →
the active behaviour or the operator's setpoint → the profile's :class:`Controller` →
write the driver (or halt, as the supervisor's :class:`OutputMode` says) → every N ticks
publish a snapshot.

It runs in the runtime process (no web server shares its GIL) in a thread of its own,
with ``SCHED_FIFO`` when granted, a 0.5 ms GIL switch interval and a sleep-then-spin tail
(notes/performance.md: asyncio timers cannot hold 1 kHz; such a thread can). Real-time
priority is tried and reported; refused, the loop runs at normal priority and says so.

A failed read faults the robot (the driver halted before raising); a driver that can
reconnect is reopened by a worker thread meanwhile and not read until it is back, inactive
(:mod:`server.runtime.reconnect`): the fault clears by an operator's reset, motion by a start.

Deadlines advance by one period; when a tick lands a whole period late the missed
deadlines are skipped and counted (ros2_control does the same) and the tick is an
*overrun*. N consecutive overruns, or one tick later than ``loop.max_stall_s``, e-stop
the robot.

Garbage collection stays out of the tick: after start-up everything alive is frozen
(``gc.freeze``), automatic collection is off, and the loop thread collects the young
generation itself in the slack after a tick (see :class:`GcPolicy`).

Requests from the runtime API (start, stop, e-stop, setpoints …) run on another thread and
take :attr:`ControlLoop.lock`; every change they make is recorded in a new snapshot before
the lock is released, so a reply is never contradicted by an older snapshot. Drivers must
not block in ``_read``/``_write`` (serial drivers read from a reader thread and queue their
writes), and a device driver's blocking ``activate``/``reconnect`` run in worker threads, so the
lock is held for microseconds.
"""

from __future__ import annotations

import bisect
import collections
import gc
import logging
import math
import os
import sys
import threading
import time
from typing import Annotated, Any, Callable, Protocol

import numpy as np
from msgspec import Meta

from drivers.base import Driver, DriverState
from drivers.errors import DriverError, DriverLinkError
from server.config import Table
from server.runtime.controllers.base import Controller
from server.runtime.reconnect import Activator, Reconnector, lifecycle_status
from server.runtime.supervisor import Event, Inputs, OutputMode, Refused, State, Supervisor

log = logging.getLogger(__name__)

JITTER_WINDOW = 2048
#: upper edges (µs) of the cumulative lateness histogram kept for the whole run (``loop_stats``)
JITTER_BUCKETS_US = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1e9)


class LoopConfig(Table):
    """The ``[loop]`` table."""

    rate_hz: Annotated[float, Meta(ge=1.0, le=2000.0)] = 100.0
    realtime: bool = True  # ask for SCHED_FIFO; falls back to normal priority if refused
    spin_us: Annotated[float, Meta(ge=0.0, le=2000.0)] = 200.0  # busy-wait tail before each deadline
    max_consecutive_overruns: Annotated[int, Meta(ge=1, le=100000)] = 10
    # one tick later than this is a trigger of its own (a frozen process counts one overrun);
    # default: five periods, but never under 0.1 s (a VM without PREEMPT_RT shows single ticks
    # several milliseconds late under load, which must not e-stop a healthy robot)
    max_stall_s: Annotated[float, Meta(gt=0.0, le=60.0)] | None = None
    gc: bool = True  # freeze start-up objects and collect in the loop's slack (False: Python's default)

    def __post_init__(self) -> None:
        if self.max_stall_s is None:
            self.max_stall_s = max(5.0 / self.rate_hz, 0.1)


def percentiles(a: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``np.percentile(a, qs)`` (linear interpolation) by one partial sort: ~20 µs for the 2048-tick window
    where three ``np.percentile`` calls took ~0.15 ms on the runtime's publishing thread.

    >>> a = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    >>> percentiles(a, (0, 50, 99, 100)) == [float(x) for x in np.percentile(a, [0, 50, 99, 100])]
    True
    """
    n = len(a)
    pos = [q / 100.0 * (n - 1) for q in qs]
    ks = sorted({int(math.floor(p)) for p in pos} | {min(int(math.floor(p)) + 1, n - 1) for p in pos})
    part = np.partition(a, ks)
    out = []
    for p in pos:
        lo = int(math.floor(p))
        hi = min(lo + 1, n - 1)
        out.append(float(part[lo] + (part[hi] - part[lo]) * (p - lo)))
    return out


class LoopStats:
    """Tick timing, written by the loop thread; read (approximately) by others."""

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz
        self.ticks = 0
        self.missed = 0
        self.overruns = 0
        self.gc_collections = 0
        self.realtime = "not started"
        self.jitter_us = np.zeros(JITTER_WINDOW)
        self.exec_us = np.zeros(JITTER_WINDOW)
        self.jitter_counts = [0] * len(JITTER_BUCKETS_US)  # cumulative since start, per bucket
        self.jitter_sum_us = 0.0
        self.started_t = time.monotonic()
        self._cached_at = -1.0
        self._cached: dict[str, Any] | None = None

    def record(self, late_s: float, exec_s: float) -> None:
        i = self.ticks % JITTER_WINDOW
        late_us = late_s * 1e6
        self.jitter_us[i] = late_us
        self.exec_us[i] = exec_s * 1e6
        self.jitter_counts[bisect.bisect_left(JITTER_BUCKETS_US, late_us)] += 1
        self.jitter_sum_us += late_us
        self.ticks += 1

    def histogram(self) -> dict[str, Any]:
        """The whole run's lateness histogram (for benchmarks and ``/metrics``): bucket upper edges in µs
        and the count in each, plus ticks, missed and overruns."""
        return {"buckets_us": list(JITTER_BUCKETS_US), "counts": list(self.jitter_counts),
                "sum_us": round(self.jitter_sum_us, 1), "ticks": self.ticks,
                "missed": self.missed, "overruns": self.overruns, "gc_collections": self.gc_collections}

    def to_json(self) -> dict[str, Any]:
        """Figures over the last ticks; percentiles are recomputed at most every 0.5 s (they cost ~0.1 ms)."""
        now = time.monotonic()
        if now - self._cached_at < 0.5 and self._cached is not None:
            return {**self._cached, "ticks": self.ticks, "missed": self.missed, "overruns": self.overruns}
        self._cached_at = now
        self._cached = self._compute()
        return self._cached

    def _compute(self) -> dict[str, Any]:
        n = min(self.ticks, JITTER_WINDOW)
        window = self.jitter_us[:n] if n else np.zeros(1)
        p50, p99, top = percentiles(window, (50, 99, 100))
        elapsed = time.monotonic() - self.started_t
        return {
            "rate_hz": self.rate_hz,
            "measured_hz": round(self.ticks / elapsed, 2) if elapsed > 0 else 0.0,
            "ticks": self.ticks,
            "missed": self.missed,
            "overruns": self.overruns,
            "jitter_p50_us": round(p50, 1),
            "jitter_p99_us": round(p99, 1),
            "jitter_max_us": round(top, 1),
            "exec_p99_us": round(percentiles(self.exec_us[:n] if n else np.zeros(1), (99,))[0], 1),
            "gc_collections": self.gc_collections,
            "realtime": self.realtime,
        }


def try_realtime(priority: int = 50) -> str:
    """Ask for SCHED_FIFO for the calling thread; returns what was granted."""
    if not hasattr(os, "sched_setscheduler"):
        return "unsupported"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError) as err:
        log.warning("real-time priority refused (%s); the control loop runs at normal priority", err)
        return f"normal (SCHED_FIFO refused: {err.strerror or err})"
    # the GIL's default 5 ms switch interval would otherwise delay the loop thread (notes/performance.md §1)
    sys.setswitchinterval(5e-4)
    return f"SCHED_FIFO {priority}"


class Schedule:
    """Absolute deadlines, advanced one period at a time; a tick a whole period late skips (and
    counts) the deadlines it missed rather than bursting to catch up (ros2_control does the same).

    >>> s = Schedule(0.01, start=0.0)
    >>> s.due(0.0100), s.advance()
    ((0.0, 0.01, 0), None)
    >>> late, dt, skipped = s.due(0.0452)      # the deadline was 0.02: 25 ms late
    >>> round(late, 4), round(dt, 4), skipped
    (0.0252, 0.0352, 2)
    >>> s.advance(); round(s.next_t, 4)       # the next deadline after the skipped ones
    0.05
    """

    def __init__(self, period_s: float, start: float) -> None:
        self.period_s = period_s
        self.next_t = start + period_s
        self.last_t = start

    def due(self, now: float) -> tuple[float, float, int]:
        """(lateness of this tick, time since the previous tick, deadlines skipped)."""
        late = now - self.next_t
        skipped = 0
        if late >= self.period_s:
            skipped = int(late // self.period_s)
            self.next_t += skipped * self.period_s
        dt = now - self.last_t
        self.last_t = now
        return late, dt, skipped

    def advance(self) -> None:
        self.next_t += self.period_s


class GcPolicy:
    """Keep collections out of the tick.

    :meth:`freeze` (after start-up) moves everything alive to the permanent generation and
    turns automatic collection off; :meth:`collect` (loop thread, after a tick) collects the
    young generation when enough objects were allocated and at least half a period is left
    before the next deadline, and the older ones on a slow cadence. A 2-core VM measured a
    full collection of the start-up heap at ~10 ms: frozen, it is never scanned again.
    """

    def __init__(self, enabled: bool, young_threshold: int = 700, old_every_s: float = 10.0) -> None:
        self.enabled = enabled
        self.young_threshold = young_threshold
        self.old_every_s = old_every_s
        self._next_old_t = 0.0

    def freeze(self) -> None:
        if not self.enabled:
            return
        gc.collect()
        gc.freeze()
        gc.disable()

    def collect(self, now: float, slack_s: float, period_s: float) -> int:
        """Collect if it is due and fits in the slack; returns the generation collected, or -1."""
        if not self.enabled or slack_s < 0.5 * period_s:
            return -1
        if now >= self._next_old_t:
            self._next_old_t = now + self.old_every_s
            gc.collect(1)
            return 1
        if gc.get_count()[0] >= self.young_threshold:
            gc.collect(0)
            return 0
        return -1


class Stage(Protocol):
    """Per-tick processing of a frame in the control thread (estimators): adds derived channels
    to ``values`` in place, before the safety rules see them. Must be fast and never block.
    Optional: ``status() -> dict`` (in the snapshot under the stage's ``name``),
    ``sources(channels) -> set`` (the driver channels a derived one comes from) and
    ``sample_times: dict`` (the host times of values it adds that were sampled elsewhere,
    :mod:`server.runtime.external`: merged into the frame's, so they go stale like a sensor's)."""

    name: str

    def process(self, values: dict[str, float], dt_s: float, now: float) -> None: ...


class Behavior(Protocol):
    """An automatic motion (turn to a heading, a calibration run) that supplies the setpoint while
    the robot is ``running``. The supervisor's every trigger still applies."""

    name: str

    def update(self, values: dict[str, float], dt_s: float, now: float) -> Any | None:
        """The controller's setpoint for this tick, or ``None`` when finished."""

    def cancel(self, reason: str) -> None:
        """Called (under the lock) when the behavior is stopped before it finished."""

    # Optional: ``status() -> dict`` (``name``, ``progress``, ``target``, …) for the snapshot's
    # ``behavior`` field and the values of its end event; an ``outcome`` key in it replaces
    # "finished" in the end event's message (e.g. "failed: timeout").


def _behavior_status(b: Behavior | None) -> dict[str, Any] | None:
    if b is None:
        return None
    status = getattr(b, "status", None)
    if not callable(status):
        return {"name": b.name}
    try:
        return status()
    except Exception:  # a status bug must not break the tick
        log.exception("behavior status failed")
        return {"name": b.name}


class ControlLoop:
    """Owns the driver, the supervisor and the controller; every access goes through ``lock``."""

    def __init__(
        self,
        driver: Driver,
        supervisor: Supervisor,
        controller: Controller,
        rate_hz: float = 100.0,
        spin_s: float = 200e-6,
        realtime: bool = True,
        event_log_size: int = 500,
        on_event: Callable[[Event], None] | None = None,
        publish_every: int = 2,
        clock: Callable[[], float] = time.monotonic,
        gc_policy: GcPolicy | None = None,
    ) -> None:
        self.clock = clock  # monotonic seconds; injected by tests that drive ticks by hand
        self.driver = driver
        self.supervisor = supervisor
        self.controller = controller
        self.period_s = 1.0 / rate_hz
        self.spin_s = min(spin_s, self.period_s / 2)
        self.want_realtime = realtime
        self.gc = gc_policy or GcPolicy(False)
        self.lock = threading.Lock()
        self.stats = LoopStats(rate_hz)
        self.events: collections.deque[Event] = collections.deque(maxlen=event_log_size)
        self.on_event = on_event
        self.publish_every = max(1, publish_every)
        self.on_publish: Callable[[], None] | None = None
        self.stages: list[Stage] = []
        self.behavior: Behavior | None = None
        self.setpoint = controller.zero()
        # a controller may have events of its own (a platform saturating its legs): logged after its update
        self._controller_events: Callable[[], list] | None = getattr(controller, "take_events", None)
        self.setpoint_source: str | None = None  # "http", "websocket" or a behaviour's name
        self.seq = 0
        self.derived_sources: dict[str, tuple[str, ...]] = {}  # rule channels made by stages → their inputs
        self.halt_count = 0
        #: reopens a failed driver in a worker thread (server/runtime/reconnect.py); None: the driver cannot
        self.reconnector: Reconnector | None = None
        #: activates a device driver in a worker thread (its requests wait for the device); None: in the tick
        self.activator: Activator | None = None
        self._values: dict[str, float] | None = None
        self._truth: dict[str, Any] = {}
        self._record: dict[str, Any] | None = None
        self._pending_events: list[Event] = []  # events of the loop's own (behaviours, notes)
        self._cut_for: object | None = None  # the stop cause whose halt() was done
        self._activated_for = 0  # the supervisor's start count the driver was activated for
        self._last_frame_host_t = -math.inf
        self._stop = threading.Event()
        self._shut_down = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="control-loop", daemon=True)
        self._thread.start()

    def shutdown_halt(self) -> None:
        """Halt, latch the ``shutdown`` cause and record it (an event and a last snapshot), once."""
        self._halt()
        if self._shut_down:
            return
        self._shut_down = True
        with self.lock:
            now = self.clock()
            self.supervisor.request_shutdown(now)
            self._end_behavior(now, "server shutdown")
            self._set_setpoint(self.controller.zero(), None)
            self.controller.reset()
            self.seq += 1
            self._make_record()
            self._drain_events()

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Halt the robot first, then stop the thread (blocks up to ``timeout_s`` for the join)."""
        self.shutdown_halt()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.reconnector is not None:
            self.reconnector.stop()  # before the driver closes: no open racing the close
        self._halt()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _halt(self) -> None:
        self.halt_count += 1
        self.driver.halt()  # never raises (drivers.base)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        self.stats.realtime = try_realtime() if self.want_realtime else "normal (realtime disabled in config)"
        log.info("control loop at %.0f Hz, %s", 1.0 / self.period_s, self.stats.realtime)
        clock = self.clock
        schedule = Schedule(self.period_s, clock())
        self.stats.started_t = time.monotonic()
        while not self._stop.is_set():
            remaining = schedule.next_t - clock() - self.spin_s
            if remaining > 0:
                time.sleep(remaining)
            while clock() < schedule.next_t:
                pass
            now = clock()
            self.run_tick(now, *schedule.due(now))
            end = clock()
            schedule.advance()
            if self.gc.collect(end, schedule.next_t - end, self.period_s) >= 0:
                self.stats.gc_collections += 1

    def run_tick(self, now: float, late: float, dt: float, skipped: int) -> None:
        """One tick with its timing accounted (the thread's body; tests call it with an injected clock)."""
        if skipped:
            self.stats.missed += skipped
            self.stats.overruns += 1
        try:
            self._tick(now, dt, skipped > 0, late)
        except Exception:  # a bug in the tick must not leave the robot moving
            log.exception("control tick failed; halting")
            self._halt()
            with self.lock:
                self.supervisor.evaluate(Inputs(now, None, "control loop error (see log)"))
                self._drain_events()
        self.stats.record(late, self.clock() - now)

    def _tick(self, now: float, dt: float, overrun: bool, late: float = 0.0) -> None:
        with self.lock:
            sup = self.supervisor
            ctrl = self.controller
            values = None
            err = None
            truth: dict[str, Any] = {}
            sample_t: dict[str, float] | None = None
            guard = self.reconnector
            if guard is not None and guard.busy:
                err = guard.read_error()  # the driver is being reopened by a worker: not read meanwhile
            else:
                try:
                    frame = self.driver.read(dt)
                    values = frame.values
                    truth = frame.truth
                    sample_t = frame.sample_t
                    self._last_frame_host_t = now
                except DriverError as e:
                    err = f"{type(e).__name__}: {e}"
                except Exception as e:  # an unexpected driver bug is a fault too
                    err = f"unexpected {type(e).__name__}: {e}"
                if err is not None and guard is not None:
                    guard.start(err)  # the driver halted before raising; reconnect it (server/runtime/reconnect.py)
            if values is not None:
                for stage in self.stages:
                    stage.process(values, dt, now)
                    stamped = getattr(stage, "sample_times", None)  # values measured elsewhere, with their times
                    if stamped:
                        sample_t.update(stamped)
                for derived, sources in self.derived_sources.items():  # a derived value is as old as its oldest input
                    sample_t[derived] = min((sample_t.get(c, -math.inf) for c in sources), default=now)
            was = sup.state
            sup.evaluate(Inputs(now, values, err, self._last_frame_host_t, overrun, late, sample_t,
                                ctrl.motion(values or {}), ctrl.stopped))
            mode = sup.output_mode()
            if sup.state is not was and sup.state is State.RUNNING:
                ctrl.reset()
            if self.behavior is not None:
                if mode is OutputMode.TRACK and values is not None:
                    sp = self.behavior.update(values, dt, now)
                    if sp is None:
                        self._end_behavior(now, "finished", cancel=False)
                    else:
                        self._set_setpoint(sp, self.behavior.name)
                elif sup.state is not State.RUNNING:
                    self._end_behavior(now, f"robot {sup.state.value}")
            command = ctrl.update(dt, mode, self.setpoint)
            if self._controller_events is not None:
                for trigger, message, kind, ev_values in self._controller_events():
                    self.emit(trigger, message, kind, ev_values)
            self._apply_outputs(now, mode, command, values is not None)
            if sup.state is not State.RUNNING and self.setpoint_source is not None:
                self._set_setpoint(ctrl.zero(), None)
            self.seq += 1
            if values is not None:
                self._values, self._truth = values, truth
            # a tick that produced events publishes too, and before the events go out, so whoever
            # sees an event and then asks for the state sees the state after it
            publish = self.seq % self.publish_every == 0 or self._record is None or bool(
                sup.events or self._pending_events)
            if publish:
                self._make_record()
                if self.on_publish is not None:
                    self.on_publish()
            self._drain_events()

    def _apply_outputs(self, now: float, mode: OutputMode, command: dict[str, float], have_frame: bool) -> None:
        """The one place the outputs follow the supervisor's mode (called under the lock).

        CUT halts once per stop cause (a category-1 ramp becomes CUT once at zero); IDLE
        deactivates the driver; TRACK activates it once per accepted start (the simulator here,
        under the lock; a device driver in a worker, :class:`~server.runtime.reconnect.Activator`,
        writing nothing until it is done; a halt always wins); TRACK/RAMP/HOLD write the command."""
        sup = self.supervisor
        if mode is OutputMode.RAMP and self.controller.stopped and sup.state is State.ESTOP:
            mode = OutputMode.CUT  # category 1: cut once the ramp has reached zero
        if mode is OutputMode.CUT:
            if self._cut_for is not sup.cause:
                self._halt()
                self._cut_for = sup.cause
                self._outputs_zero_event()
            return
        self._cut_for = None
        if mode is OutputMode.IDLE:
            if self.driver.state is DriverState.ACTIVE:
                self.driver.deactivate()  # a controlled stop came to rest: outputs off
            return
        try:
            if mode is OutputMode.TRACK and self._activated_for != sup.starts:
                if self.activator is None:
                    self.driver.activate()
                elif not self.activator.poll(sup.starts):
                    return  # a device driver is being activated in a worker (it waits for the device)
                self._activated_for = sup.starts
            if have_frame:
                self.driver.write(command)
        except DriverError as e:
            self._halt()
            sup.evaluate(Inputs(now, None, f"write failed: {e}"))

    def _set_setpoint(self, setpoint: Any, source: str | None) -> None:
        self.setpoint = setpoint
        self.setpoint_source = source if setpoint != self.controller.zero() else None

    def _make_record(self) -> None:
        """Build the snapshot from this moment's state, under the lock, as one new dict.

        Called on publish ticks and after every operator request, so a snapshot never mixes two
        ticks (state, cause, setpoint and values all come from the same moment) and a reply to a
        request is never contradicted by an older snapshot. Readers on other threads only swap in
        the reference; the dict is never mutated after it is stored.
        """
        sup = self.supervisor
        cause = sup.cause
        last_command_t = sup.last_command_t
        now = self.clock()
        stale = sup.stale_channels(now) if self._values is not None else []
        self._record = {
            "seq": self.seq,
            "t": time.time(),
            "state": sup.state.value,
            "cause": cause.to_json() if cause else None,
            "setpoint": {**self.controller.setpoint_json(self.setpoint), "source": self.setpoint_source},
            "command": self.controller.command_json(),
            "values": self._values if self._values is not None else sup.last_values,
            "truth": self._truth,
            "stale": [ch for ch, _ in stale],
            "behavior": _behavior_status(self.behavior),
            "link": {
                "age_s": round(now - last_command_t, 4) if math.isfinite(last_command_t) else None,
                "timeout_s": sup.cfg.command_timeout_s,
            },
            "driver": {"state": self.driver.state.value, **self.driver.health(),
                       **lifecycle_status(self.reconnector, self.activator)},
            **{stage.name: stage.status() for stage in self.stages if callable(getattr(stage, "status", None))},
        }

    # ------------------------------------------------------------------ events (the loop owns the log)
    def emit(self, trigger: str, message: str, kind: str = "info", values: dict[str, Any] | None = None) -> None:
        """Log an event of the loop's own (behaviours, calibrations, notes); call under the lock."""
        st = self.supervisor.state.value
        self._pending_events.append(Event(self.clock(), trigger, message, st, st, kind=kind, values=values or {}))

    def emit_now(self, trigger: str, message: str, kind: str = "info", values: dict[str, Any] | None = None) -> None:
        """:meth:`emit` from outside the lock (takes it). Like a tick, it publishes a new record before the event
        goes out, so whoever sees the event and then asks for the state sees the state after it."""
        with self.lock:
            self.emit(trigger, message, kind, values)
            if self.seq:
                self._make_record()
                if self.on_publish is not None:
                    self.on_publish()
            self._drain_events()

    def _end_behavior(self, now: float, how: str, cancel: bool = True) -> None:
        """Stop the active behavior and zero the setpoint (called under the lock)."""
        b = self.behavior
        if b is None:
            return
        self.behavior = None
        self._set_setpoint(self.controller.zero(), None)
        if cancel:
            b.cancel(how)
        status = _behavior_status(b) or {}
        if not cancel and status.get("outcome"):
            how = str(status["outcome"])
        self.emit(f"behavior_{'end' if not cancel else 'cancel'}", f"{b.name}: {how}", values=status)

    def _outputs_zero_event(self) -> None:
        """Log when the outputs reached zero after a stop trigger (the stop latency, runtime side).

        ``after_trigger_s`` runs from the trigger (the tick that read the crossing sample,
        or the operator's request) to just after ``halt()`` returned."""
        cause = self.supervisor.cause
        if cause is None:
            return
        now = self.clock()
        self.emit("outputs_zero", f"outputs cut {now - cause.t:.4f} s after {cause.trigger}",
                  values={"after_trigger_s": round(now - cause.t, 6), "trigger": cause.trigger})

    def _drain_events(self) -> None:
        """Move new events (the supervisor's and the loop's own) to the log and the listener (under the lock)."""
        sup = self.supervisor
        if not sup.events and not self._pending_events:
            return
        new = sup.events + self._pending_events
        sup.events.clear()
        self._pending_events = []
        for ev in sorted(new, key=lambda e: e.t):
            ev.wall_t = time.time() - (self.clock() - ev.t)
            self.events.append(ev)
            (log.warning if ev.kind == "safety" else log.info)(
                "%s: %s (%s → %s)", ev.trigger, ev.message, ev.state_before, ev.state_after)
            if self.on_event is not None:
                try:
                    self.on_event(ev)
                except Exception:
                    log.exception("event listener failed")

    # ------------------------------------------------------------------ operator requests
    def _request(self, fn: Callable[[], Any]) -> str:
        with self.lock:
            try:
                fn()
            finally:
                if self.seq:
                    self._make_record()
                self._drain_events()
            return self.supervisor.state.value

    def start_robot(self) -> str:
        def go() -> None:
            self.supervisor.request_start(self.clock())
            self._set_setpoint(self.controller.zero(), None)
        return self._request(go)

    def stop_robot(self) -> str:
        def go() -> None:
            now = self.clock()
            self._end_behavior(now, "stop requested")
            self.supervisor.request_stop(now)
        return self._request(go)

    def estop(self, reason: str = "") -> str:
        def go() -> None:
            sup = self.supervisor
            sup.request_estop(self.clock(), reason)
            self._end_behavior(self.clock(), "e-stop")
            self._set_setpoint(self.controller.zero(), None)
            if sup.output_mode() is OutputMode.CUT and self._cut_for is not sup.cause:
                self._halt()  # do not wait for the next tick
                self._cut_for = sup.cause
                self.controller.reset()
                self._outputs_zero_event()
        return self._request(go)

    def note_estop_reason(self, reason: str) -> None:
        """Add the operator's reason to the e-stop latched a moment ago (it latches before the body is read)."""
        def go() -> None:
            cause = self.supervisor.cause
            if cause is not None and cause.trigger == "operator_estop" and "reason" not in cause.values:
                cause.values = {**cause.values, "reason": reason}
                cause.message = f"{cause.message}: {reason}"
            self.emit("estop_reason", f"e-stop reason: {reason}", values={"reason": reason})
        self._request(go)

    def reset(self) -> str:
        return self._request(lambda: self.supervisor.request_reset(self.clock()))

    def heartbeat(self) -> str:
        return self._request(lambda: self.supervisor.touch(self.clock()))

    def set_setpoint(self, setpoint: Any, ttl_s: float | None = None, source: str = "http") -> str:
        """A new operator setpoint (checked against the controller's limits and the rules)."""
        self.controller.check(setpoint)

        def go() -> None:
            now = self.clock()
            self.supervisor.check_motion(now, self.controller.motion_of(setpoint))
            self._end_behavior(now, "operator took over")
            self.supervisor.touch(now)
            self.supervisor.set_ttl(now, ttl_s)
            self._set_setpoint(setpoint, source)
        return self._request(go)

    def start_behavior(self, behavior: Behavior) -> str:
        """Hand the setpoint to ``behavior`` (409 unless running). Replaces any active one."""
        def go() -> None:
            now = self.clock()
            sup = self.supervisor
            if sup.state is not State.RUNNING:
                raise Refused(*sup.not_running_reason())
            self._end_behavior(now, "replaced")
            sup.touch(now)
            self.behavior = behavior
            self.emit("behavior_start", f"{behavior.name} started")
        return self._request(go)

    def cancel_behavior(self, reason: str = "cancelled by the operator") -> str:
        return self._request(lambda: self._end_behavior(self.clock(), reason))

    def set_acquisition(self, rate_hz: float, channels: list[str]):
        with self.lock:
            if self.reconnector is not None and self.reconnector.busy:
                raise DriverLinkError("the driver is reconnecting; change the acquisition once it is back")
            return self.driver.set_acquisition(rate_hz, channels)

    def driver_debug(self, command: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return self.driver.debug(command)

    def snapshot(self) -> dict[str, Any]:
        """The latest record plus the loop's timing figures (``{}`` before the first publish).

        NaN values stay NaN here; the serialiser writes them as null."""
        record = self._record
        if record is None:
            return {}
        return {**record, "loop": self.stats.to_json()}


__all__ = ["Behavior", "ControlLoop", "GcPolicy", "Schedule", "LoopConfig", "LoopStats", "Refused", "Stage", "try_realtime"]
