"""The control loop: a dedicated thread at a fixed rate with absolute deadlines.

Each tick: read the driver → run the safety supervisor → compute the command
(setpoint, ramps, kinematics) → write the driver → publish a snapshot.

It runs off the asyncio event-loop thread so that a stalled event loop cannot
stall it (notes/performance.md: asyncio timers cannot hold 1 kHz; a thread with
``SCHED_FIFO``, a 0.5 ms GIL switch interval and a sleep-then-spin tail can).
Real-time priority is tried and reported; when the OS refuses it the loop runs
at normal priority and says so.

Deadlines advance by one period; when a tick lands a whole period late the
missed deadlines are skipped and counted (ros2_control does the same), and the
tick is an *overrun*. N consecutive overruns e-stop the robot.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Protocol

import numpy as np

from drivers.base import Driver, DriverState
from drivers.errors import DriverError
from server.controller import RoverController
from server.safety import Event, Inputs, Refused, State, Supervisor

log = logging.getLogger(__name__)

JITTER_WINDOW = 2048


class LoopStats:
    """Tick timing, written by the loop thread; read (approximately) by others."""

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz
        self.ticks = 0
        self.missed = 0
        self.overruns = 0
        self.realtime = "not started"
        self.jitter_us = np.zeros(JITTER_WINDOW)
        self.exec_us = np.zeros(JITTER_WINDOW)
        self.started_t = time.monotonic()

    def record(self, late_s: float, exec_s: float) -> None:
        i = self.ticks % JITTER_WINDOW
        self.jitter_us[i] = late_s * 1e6
        self.exec_us[i] = exec_s * 1e6
        self.ticks += 1

    def to_json(self) -> dict[str, Any]:
        """Figures over the last ticks; percentiles are recomputed at most every 0.5 s (they cost ~0.1 ms)."""
        now = time.monotonic()
        if now - self._cached_at < 0.5 and self._cached is not None:
            return {**self._cached, "ticks": self.ticks, "missed": self.missed, "overruns": self.overruns}
        self._cached_at = now
        self._cached = self._compute()
        return self._cached

    _cached_at = -1.0
    _cached: dict[str, Any] | None = None

    def _compute(self) -> dict[str, Any]:
        n = min(self.ticks, JITTER_WINDOW)
        window = self.jitter_us[:n] if n else np.zeros(1)
        elapsed = time.monotonic() - self.started_t
        return {
            "rate_hz": self.rate_hz,
            "measured_hz": round(self.ticks / elapsed, 2) if elapsed > 0 else 0.0,
            "ticks": self.ticks,
            "missed": self.missed,
            "overruns": self.overruns,
            "jitter_p50_us": round(float(np.percentile(window, 50)), 1),
            "jitter_p99_us": round(float(np.percentile(window, 99)), 1),
            "jitter_max_us": round(float(window.max()), 1),
            "exec_p99_us": round(float(np.percentile(self.exec_us[:n] if n else np.zeros(1), 99)), 1),
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


class Stage(Protocol):
    """Per-tick processing of a frame in the control thread (estimators): adds derived channels
    to ``values`` in place, before the safety rules see them. Must be fast and never block."""

    def process(self, values: dict[str, float], dt_s: float, now: float) -> None: ...


class Behavior(Protocol):
    """An automatic motion (turn to a heading, a calibration run) that supplies the setpoint while
    the robot is ``running``. The supervisor's every trigger still applies."""

    name: str

    def update(self, values: dict[str, float], dt_s: float, now: float) -> tuple[float, float] | None:
        """The (linear, angular) setpoint for this tick, or ``None`` when finished."""

    def cancel(self, reason: str) -> None:
        """Called (under the lock) when the behavior is stopped before it finished."""

    # Optional: ``status() -> dict`` (``name``, ``progress``, ``target``, …) for ``/api/state``'s
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
        controller: RoverController,
        rate_hz: float = 100.0,
        spin_s: float = 200e-6,
        realtime: bool = True,
        event_log_size: int = 500,
        on_event: Callable[[Event], None] | None = None,
        publish_every: int = 2,
    ) -> None:
        self.driver = driver
        self.supervisor = supervisor
        self.controller = controller
        self.period_s = 1.0 / rate_hz
        self.spin_s = min(spin_s, self.period_s / 2)
        self.want_realtime = realtime
        self.lock = threading.Lock()
        self.stats = LoopStats(rate_hz)
        self.events: collections.deque[Event] = collections.deque(maxlen=event_log_size)
        self.on_event = on_event
        self.publish_every = max(1, publish_every)
        self.on_publish: Callable[[], None] | None = None
        self.stages: list[Stage] = []
        self.behavior: Behavior | None = None
        self.setpoint = (0.0, 0.0)
        self.seq = 0
        self._tick_state: tuple[int, float, dict[str, float], dict[str, Any]] | None = None
        self.halt_count = 0
        self._cut_for: object | None = None  # the stop cause whose halt() was done
        self._activated_for = 0  # the supervisor's start count the driver was activated for
        self._last_frame_host_t = -math.inf
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consecutive_late = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="control-loop", daemon=True)
        self._thread.start()

    async def shutdown_async(self, timeout_s: float = 2.0) -> None:
        """:meth:`shutdown` for coroutines: the halt happens at once, the thread join off the event loop."""
        self._halt()
        await asyncio.to_thread(self.shutdown, timeout_s)

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Halt the robot first, then stop the thread (blocks up to ``timeout_s`` for the join)."""
        self._halt()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._halt()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _halt(self) -> None:
        self.halt_count += 1
        try:
            self.driver.halt()
        except Exception:  # halt() must never raise; if a driver's does, stay safe anyway
            log.exception("driver.halt() raised")

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        self.stats.realtime = try_realtime() if self.want_realtime else "normal (realtime disabled in config)"
        log.info("control loop at %.0f Hz, %s", 1.0 / self.period_s, self.stats.realtime)
        period = self.period_s
        clock = time.monotonic
        next_t = clock() + period
        last_t = clock() - period
        self.stats.started_t = clock()
        while not self._stop.is_set():
            remaining = next_t - clock() - self.spin_s
            if remaining > 0:
                time.sleep(remaining)
            while clock() < next_t:
                pass
            now = clock()
            late = now - next_t
            overrun = False
            if late >= period:
                skipped = int(late // period)
                self.stats.missed += skipped
                self.stats.overruns += 1
                next_t += skipped * period
                overrun = True
            dt = now - last_t
            last_t = now
            try:
                self._tick(now, dt, overrun)
            except Exception:  # a bug in the tick must not leave the robot moving
                log.exception("control tick failed; halting")
                self._halt()
                with self.lock:
                    self.supervisor.evaluate(Inputs(now, None, "control loop error (see log)"))
                    self._drain_events()
            self.stats.record(late, clock() - now)
            next_t += period

    def _tick(self, now: float, dt: float, overrun: bool) -> None:
        with self.lock:
            sup = self.supervisor
            values = None
            err = None
            truth: dict[str, Any] = {}
            try:
                frame = self.driver.read(dt)
                values = frame.values
                truth = frame.truth
                self._last_frame_host_t = now
            except DriverError as e:
                err = f"{type(e).__name__}: {e}"
            except Exception as e:  # an unexpected driver bug is a fault too
                err = f"unexpected {type(e).__name__}: {e}"
            if values is not None:
                for stage in self.stages:
                    stage.process(values, dt, now)
            measured = values.get("linear_m_s", 0.0) if values else 0.0
            ctrl = self.controller
            lin = ctrl.linear if abs(ctrl.linear) >= abs(measured) else measured
            was = sup.state
            sup.evaluate(Inputs(now, values, err, self._last_frame_host_t, overrun, lin,
                                ctrl.angular, ctrl.stopped))
            mode = sup.output_mode()
            if sup.state is not was and sup.state is State.RUNNING:
                ctrl.reset()
            if self.behavior is not None:
                if mode == "track" and values is not None:
                    sp = self.behavior.update(values, dt, now)
                    if sp is None:
                        self._end_behavior(now, "finished", cancel=False)
                    else:
                        self.setpoint = sp
                elif sup.state is not State.RUNNING:
                    self._end_behavior(now, f"cancelled: robot {sup.state.value}")
            lin_sp, ang_sp = self.setpoint if mode == "track" else (0.0, 0.0)
            command = ctrl.update(dt, mode, lin_sp, ang_sp)
            if mode == "ramp" and ctrl.stopped and sup.state is State.ESTOP:
                mode = "cut"  # category 1: cut once the ramp has reached zero
            if mode == "cut":
                if self._cut_for is not sup.cause:  # halt once per stop cause
                    self._halt()
                    self._cut_for = sup.cause
                    self._outputs_zero_event(now)
            elif mode == "idle":
                self._cut_for = None
                if self.driver.state is DriverState.ACTIVE:
                    self.driver.deactivate()  # a controlled stop came to rest: outputs off
            else:
                self._cut_for = None
                try:
                    if mode == "track" and self._activated_for != sup.starts:
                        self.driver.activate()  # once per start, under the lock: a halt always wins after it
                        self._activated_for = sup.starts
                    if values is not None:
                        self.driver.write(command)
                except DriverError as e:
                    self._halt()
                    sup.evaluate(Inputs(now, None, f"write failed: {e}"))
            if sup.state is not State.RUNNING:
                self.setpoint = (0.0, 0.0)
            self.seq += 1
            # one tuple per tick, swapped whole (atomic for readers on other threads); the JSON-shaped
            # snapshot is built by snapshot() at the telemetry rate, off this thread
            self._tick_state = (self.seq, time.time(), values if values is not None else sup.last_values, truth)
            self._drain_events()
        if self.on_publish is not None and self.seq % self.publish_every == 0:
            self.on_publish()

    def _end_behavior(self, now: float, how: str, cancel: bool = True) -> None:
        """Stop the active behavior and zero the setpoint (called under the lock)."""
        b = self.behavior
        if b is None:
            return
        self.behavior = None
        self.setpoint = (0.0, 0.0)
        if cancel:
            b.cancel(how)
        status = _behavior_status(b) or {}
        if not cancel and status.get("outcome"):
            how = str(status["outcome"])
        state = self.supervisor.state.value
        self.supervisor.events.append(Event(now, f"behavior_{'end' if not cancel else 'cancel'}",
                                            f"{b.name}: {how}", state, state, kind="info", values=status))

    def start_behavior(self, behavior: Behavior) -> str:
        """Hand the setpoint to ``behavior`` (409 unless running). Replaces any active one."""
        def go() -> None:
            now = time.monotonic()
            sup = self.supervisor
            if sup.state is not State.RUNNING:
                raise Refused("not_running", f"robot is {sup.state.value}; start it first")
            self._end_behavior(now, "replaced")
            sup.touch(now)
            self.behavior = behavior
            sup.events.append(Event(now, "behavior_start", f"{behavior.name} started",
                                    sup.state.value, sup.state.value, kind="info"))
        return self._request(go)

    def cancel_behavior(self, reason: str = "cancelled by the operator") -> str:
        return self._request(lambda: self._end_behavior(time.monotonic(), reason))

    def _outputs_zero_event(self, tick_t: float) -> None:
        """Log when the outputs reached zero after a stop trigger (the stop latency, server side).

        ``after_trigger_s`` runs from the trigger (the tick that read the crossing sample,
        or the operator's request) to just after ``halt()`` returned."""
        cause = self.supervisor.cause
        if cause is None:
            return
        now = time.monotonic()
        self.supervisor.events.append(Event(
            now, "outputs_zero", f"outputs cut {now - cause.t:.4f} s after {cause.trigger}",
            self.supervisor.state.value, self.supervisor.state.value, kind="info",
            values={"after_trigger_s": round(now - cause.t, 6), "trigger": cause.trigger},
        ))

    def _drain_events(self) -> None:
        """Move the supervisor's new events to the log and the listener (called under the lock)."""
        sup = self.supervisor
        if not sup.events:
            return
        for ev in sup.events:
            ev.wall_t = time.time() - (time.monotonic() - ev.t)
            self.events.append(ev)
            (log.warning if ev.kind == "safety" else log.info)(
                "%s: %s (%s → %s)", ev.trigger, ev.message, ev.state_before, ev.state_after)
            if self.on_event is not None:
                try:
                    self.on_event(ev)
                except Exception:
                    log.exception("event listener failed")
        sup.events.clear()

    # ------------------------------------------------------------------ operator requests
    def _request(self, fn: Callable[[], Any]) -> str:
        with self.lock:
            try:
                fn()
            finally:
                self._drain_events()
            return self.supervisor.state.value

    def start_robot(self) -> str:
        def go() -> None:
            self.supervisor.request_start(time.monotonic())
            self.setpoint = (0.0, 0.0)
        return self._request(go)

    def stop_robot(self) -> str:
        def go() -> None:
            now = time.monotonic()
            self._end_behavior(now, "stop requested")
            self.supervisor.request_stop(now)
        return self._request(go)

    def estop(self, reason: str = "") -> str:
        def go() -> None:
            self.supervisor.request_estop(time.monotonic(), reason)
            self._end_behavior(time.monotonic(), "e-stop")
            self.setpoint = (0.0, 0.0)
            if self.supervisor.output_mode() == "cut" and self._cut_for is not self.supervisor.cause:
                self._halt()  # do not wait for the next tick
                self._cut_for = self.supervisor.cause
                self.controller.reset()
                self._outputs_zero_event(time.monotonic())
        return self._request(go)

    def reset(self) -> str:
        return self._request(lambda: self.supervisor.request_reset(time.monotonic()))

    def heartbeat(self) -> str:
        return self._request(lambda: self.supervisor.touch(time.monotonic()))

    def set_speed(self, linear: float, angular: float, ttl_s: float | None = None) -> str:
        def go() -> None:
            now = time.monotonic()
            self.supervisor.check_speed(now, linear, angular)
            self._end_behavior(now, "operator took over")
            self.supervisor.touch(now)
            self.supervisor.set_ttl(now, ttl_s)
            self.setpoint = (linear, angular)
        return self._request(go)

    def set_acquisition(self, rate_hz: float, channels: list[str]):
        with self.lock:
            return self.driver.set_acquisition(rate_hz, channels)

    def driver_debug(self, command: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return self.driver.debug(command)

    def snapshot(self) -> dict[str, Any]:
        """The state as JSON-ready data (``{}`` before the first tick). Called on the event loop.

        Channel values and ground truth are those of the last tick; state, cause, setpoint,
        command and behaviour are read live, so a reply to a request is never contradicted by
        an older snapshot. NaN values stay NaN here; the serialiser writes them as null.
        """
        tick = self._tick_state
        if tick is None:
            return {}
        seq, wall_t, values, truth = tick
        sup = self.supervisor
        cause = sup.cause
        linear, angular = self.setpoint
        last_command_t = sup.last_command_t
        return {
            "seq": seq,
            "t": wall_t,
            "state": sup.state.value,
            "cause": cause.to_json() if cause else None,
            "setpoint": {"linear": linear, "angular": angular},
            "command": {"linear": self.controller.linear, "angular": self.controller.angular},
            "values": values,
            "truth": truth,
            "behavior": _behavior_status(self.behavior),
            "link": {
                "age_s": round(time.monotonic() - last_command_t, 4) if math.isfinite(last_command_t) else None,
                "timeout_s": sup.cfg.command_timeout_s,
            },
            "loop": self.stats.to_json(),
        }


__all__ = ["ControlLoop", "LoopStats", "Refused", "try_realtime"]
