"""The control loop: a dedicated thread at a fixed rate with absolute deadlines, robot-neutral.

Each tick is **read → update → write** (ros2_control's cycle), then publish:
:meth:`ControlLoop._read` reads the driver and runs the stages (estimators,
:mod:`server.runtime.stage`); :meth:`ControlLoop._update` runs the safety supervisor, the
active behaviour or the operator's setpoint and the profile's :class:`Controller`;
:meth:`ControlLoop._write` writes the driver (or halts it, as the supervisor's
:class:`OutputMode` says); every N ticks a snapshot is recorded and published. Timing
(deadlines, the spin tail, real-time priority, garbage collection, the figures) is
:mod:`server.runtime.timing`'s. The loop knows no robot: what a controller, a stage, a
behaviour or a driver can do, each declares (their base classes), nothing is probed.

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

import collections
import logging
import math
import threading
import time
from typing import Any, Callable, NamedTuple, Protocol


from drivers.base import Driver, DriverState
from drivers.errors import DriverError, DriverLinkError
from server.runtime.controllers.base import Controller
from server.runtime.freshness import Freshness, Governor, Stamp
from server.runtime.reconnect import Activator, Reconnector, lifecycle_status
from server.runtime.stage import Stage
from server.runtime.supervisor import Event, Inputs, OutputMode, Refused, State, Supervisor
from server.runtime.timing import GcPolicy, LoopStats, Schedule, try_realtime

log = logging.getLogger(__name__)


class Behavior(Protocol):
    """An automatic motion (turn to a heading, a calibration run) that supplies the setpoint while
    the robot is ``running``. The supervisor's every trigger still applies."""

    name: str

    def update(self, values: dict[str, float], dt_s: float, now: float) -> Any | None:
        """The controller's setpoint for this tick, or ``None`` when finished."""

    def cancel(self, reason: str) -> None:
        """Called (under the lock) when the behavior is stopped before it finished."""

    def status(self) -> dict[str, Any]:
        """``name``, ``progress``, ``target``, … for the snapshot's ``behavior`` field and the values of its
        end event; an ``outcome`` key in it replaces "finished" in the end event's message (e.g. "failed:
        timeout")."""


def _behavior_status(b: Behavior | None) -> dict[str, Any] | None:
    if b is None:
        return None
    try:
        return b.status()
    except Exception:  # a status bug must not break the tick
        log.exception("behavior status failed")
        return {"name": b.name}


class Reading(NamedTuple):
    """What a tick read: the frame's values with the stages' channels added (``None`` when the read
    failed, with ``error`` saying why), the simulator's truth and every value's sample time."""

    values: dict[str, float] | None
    truth: dict[str, Any]
    sample_t: dict[str, float] | None
    error: str | None


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
        #: whether the request being served comes from the holder of control (the runtime API server says;
        #: called in requests only, never in the tick; alone, without a server, every caller holds it)
        self.liveness: Callable[[], bool] = lambda: True
        self.stages: list[Stage] = []
        cfg = supervisor.cfg
        #: stamped commands: too old or out of order → dropped (issue 20; server.runtime.freshness)
        self.freshness = Freshness(cfg.max_command_age_s, cfg.command_timeout_s)
        self.governor = Governor(cfg.governor)
        self.behavior: Behavior | None = None
        self.setpoint = controller.zero()
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
            now = schedule.wait(clock, self.spin_s)
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
        """read → update → write, under the lock, then publish (ros2_control's cycle)."""
        with self.lock:
            reading = self._read(now, dt)
            mode, command = self._update(now, dt, overrun, late, reading)
            self._write(now, mode, command, reading.values is not None)
            self._publish(reading)

    def _read(self, now: float, dt: float) -> Reading:
        """The driver's frame (not while a reconnect runs: a failed read then), and every stage's channels."""
        guard = self.reconnector
        if guard is not None and guard.busy:
            # the driver is being reopened by a worker: not read meanwhile
            return Reading(None, {}, None, guard.read_error())
        try:
            frame = self.driver.read(dt)
        except DriverError as e:
            err = f"{type(e).__name__}: {e}"
        except Exception as e:  # an unexpected driver bug is a fault too
            err = f"unexpected {type(e).__name__}: {e}"
        else:
            self._last_frame_host_t = now
            values, sample_t = frame.values, frame.sample_t
            for stage in self.stages:
                stage.process(values, dt, now)
                if stage.sample_times:  # values measured elsewhere, with their times
                    sample_t.update(stage.sample_times)
                for trigger, message, kind, ev_values in stage.take_events():  # a compass disturbed …
                    self.emit(trigger, message, kind, ev_values)
            for derived, sources in self.derived_sources.items():  # a derived value is as old as its oldest input
                sample_t[derived] = min((sample_t.get(c, -math.inf) for c in sources), default=now)
            for trigger, message, kind, ev_values in self.driver.take_events():  # an autopilot's own words
                self.emit(trigger, message, kind, ev_values)
            return Reading(values, frame.truth, sample_t, None)
        if guard is not None:
            guard.start(err)  # the driver halted before raising; reconnect it (server/runtime/reconnect.py)
        return Reading(None, {}, None, err)

    def _update(self, now: float, dt: float, overrun: bool, late: float,
                reading: Reading) -> tuple[OutputMode, dict[str, float]]:
        """The supervisor's verdict on the reading, the behaviour's setpoint, the controller's command."""
        sup = self.supervisor
        ctrl = self.controller
        values = reading.values
        was = sup.state
        sup.evaluate(Inputs(now, values, reading.error, self._last_frame_host_t, overrun, late, reading.sample_t,
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
        for trigger, message, kind, ev_values in ctrl.take_events():  # a platform saturating its legs …
            self.emit(trigger, message, kind, ev_values)
        return mode, command

    def _publish(self, reading: Reading) -> None:
        """After the write: the setpoint zeroed out of ``running``, the record on publish ticks (and on any tick
        that produced events, before the events go out, so whoever sees an event and then asks for the state
        sees the state after it), then the events."""
        sup = self.supervisor
        if sup.state is not State.RUNNING and self.setpoint_source is not None:
            self._set_setpoint(self.controller.zero(), None)
        self.seq += 1
        if reading.values is not None:
            self._values, self._truth = reading.values, reading.truth
        if self.seq % self.publish_every == 0 or self._record is None or sup.events or self._pending_events:
            self._make_record()
            if self.on_publish is not None:
                self.on_publish()
        self._drain_events()

    def _write(self, now: float, mode: OutputMode, command: dict[str, float], have_frame: bool) -> None:
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
        record = {
            "seq": self.seq,
            "t": time.time(),
            "mono_t": round(now, 6),  # the machine's monotonic clock (an NTP step moves t, never this)
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
                **self.freshness.to_json(),
                "governor": self.governor.to_json(),
            },
            "driver": {"state": self.driver.state.value, **self.driver.health(),
                       **lifecycle_status(self.reconnector, self.activator)},
        }
        for stage in self.stages:
            status = stage.status()
            if status is not None:
                record[stage.name] = status
        self._record = record

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
    def _touch(self, now: float) -> None:
        """An operator's command keeps the link alive only if it came from the holder of control
        (:attr:`liveness`; issue 19: any client of the runtime's socket used to)."""
        if self.liveness():
            self.supervisor.touch(now)

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
            self.supervisor.request_start(self.clock(), self.liveness())
            self.governor.reset_stop()  # the stop is spent; the cap stays until the link recovers
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

    def heartbeat(self, stamp: Stamp | None = None) -> tuple[str, str | None]:
        """Keeps the link alive; a stamped one only if it is fresh (younger than ``command_timeout_s``) and in
        order. Returns the state and why it was dropped (None: it counted)."""
        dropped: list[str | None] = [None]

        def go() -> None:
            now = self.clock()
            dropped[0] = self._admit(now, stamp, heartbeat=True)
            if dropped[0] is None:
                self._touch(now)  # on arrival: a fresh heartbeat counts as a plain one (see Freshness)
        return self._request(go), dropped[0]

    def set_setpoint(self, setpoint: Any, ttl_s: float | None = None, source: str = "http") -> str:
        """A new operator setpoint (checked against the controller's limits and the rules)."""
        return self.command(setpoint, ttl_s, source)[0]

    def command(self, setpoint: Any, ttl_s: float | None = None, source: str = "http",
                stamp: Stamp | None = None) -> tuple[str, str | None]:
        """:meth:`set_setpoint` for a possibly stamped command: dropped when too old or out of order (the state
        and why; nothing applied), else capped by the latency governor and applied, its ``ttl_s`` counted from
        when it was sent."""
        self.controller.check(setpoint)
        dropped: list[str | None] = [None]

        def go() -> None:
            now = self.clock()
            dropped[0] = self._admit(now, stamp)
            if dropped[0] is not None:
                return
            self.supervisor.check_motion(now, self.controller.motion_of(setpoint))
            self._end_behavior(now, "operator took over")
            self._touch(now)
            self.supervisor.set_ttl(self._sent_t(now, stamp), ttl_s)
            self._set_setpoint(self.controller.scaled(setpoint, self.governor.scale), source)
        return self._request(go), dropped[0]

    @staticmethod
    def _sent_t(now: float, stamp: Stamp | None) -> float:
        return now if stamp is None or stamp.sent_t is None else min(now, stamp.sent_t)

    def _admit(self, now: float, stamp: Stamp | None, heartbeat: bool = False) -> str | None:
        """Freshness first (why it is dropped, or None); an admitted command of the holder feeds the governor."""
        if stamp is None:
            return None
        dropped = self.freshness.admit(now, stamp, heartbeat)
        if dropped is None and self.liveness():
            delays = [d for d in ((None if stamp.sent_t is None else now - stamp.sent_t), stamp.rtt_s)
                      if d is not None]
            if delays:
                self._govern(now, max(delays))
        return dropped

    def _govern(self, now: float, delay: float) -> None:
        """The latency governor's step (under the lock): its events, its cap on the setpoint in force, its stop."""
        gov = self.governor
        change = gov.update(now, delay)
        self.controller.govern(gov.scale)
        if change == "capped":
            self.emit("governor_capped", f"speed capped: link {delay * 1000:.0f} ms (to {gov.scale:.0%})",
                      kind="safety", values=gov.to_json())
        elif change == "lifted":
            self.emit("governor_lifted", f"speed cap lifted: link {delay * 1000:.0f} ms", values=gov.to_json())
        if gov.state == "stop":  # until a new start (or the link recovers)
            self.supervisor.latency_stop(now, delay)

    def start_behavior(self, behavior: Behavior) -> str:
        """Hand the setpoint to ``behavior`` (409 unless running). Replaces any active one."""
        def go() -> None:
            now = self.clock()
            sup = self.supervisor
            if sup.state is not State.RUNNING:
                raise Refused(*sup.not_running_reason())
            self._end_behavior(now, "replaced")
            self._touch(now)
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

    @property
    def truth(self) -> dict[str, Any]:
        """The latest frame's ground truth (the simulator's; ``{}`` from hardware). Read it in the control thread
        (a behaviour's ``update``: the previous tick's frame) or under :attr:`lock`; the dict is never mutated."""
        return self._truth

    def snapshot(self) -> dict[str, Any]:
        """The latest record plus the loop's timing figures (``{}`` before the first publish).

        NaN values stay NaN here; the serialiser writes them as null."""
        record = self._record
        if record is None:
            return {}
        return {**record, "loop": self.stats.to_json()}


__all__ = ["Behavior", "ControlLoop", "GcPolicy", "LoopStats", "Reading", "Refused", "Schedule", "Stage",
           "try_realtime"]
