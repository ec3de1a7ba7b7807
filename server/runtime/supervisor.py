"""The safety supervisor: the robot's states and every trigger that stops it.

Pure logic: no threads, no I/O, no clock of its own (``now`` is passed in).
The control loop calls :meth:`Supervisor.evaluate` once per tick, in its own
thread, so that nothing here waits on the network, the operator or the event
loop. Operator requests (start, stop, e-stop, reset, speed, heartbeat) call the
``request_*`` methods under the control loop's lock.

States (DESIGN.md): ``idle`` → ``running`` → ``stopping`` → ``idle``;
any → ``estop`` (latched) → reset → ``idle``; any → ``fault`` on driver failure.

Stop categories (IEC 60204-1 §9.2.2 naming): 0 = cut outputs at once,
1 = controlled ramp to zero then cut, 2 = controlled stop holding position
(outputs stay energised at zero).

This is a *protective* stop in software. It sits above, never replaces, the
robot's hardware emergency stop.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NamedTuple

import msgspec
from msgspec import Meta

from server.config import Table
from server.runtime.freshness import GovernorConfig


class State(str, enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    STOPPING = "stopping"
    ESTOP = "estop"
    FAULT = "fault"


class Trigger(str, enum.Enum):
    OPERATOR = "operator_estop"
    LINK_LOSS = "link_loss"
    RULE = "rule"
    DRIVER_FAULT = "driver_fault"
    OVERRUN = "overruns"
    STALL = "stall"
    SENSOR_STALE = "sensor_stale"
    SHUTDOWN = "shutdown"
    LATENCY = "latency"  # the latency governor's controlled stop (server.runtime.freshness)


class Refused(Exception):
    """The request is not allowed in the current state; ``code`` and message go to the client (409)."""

    def __init__(self, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass
class Cause:
    trigger: str
    message: str
    t: float
    category: int
    values: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger, "message": self.message, "t": self.t,
            "category": self.category, "values": self.values, "rule": self.rule,
        }


@dataclass
class Event:
    t: float
    trigger: str
    message: str
    state_before: str
    state_after: str
    kind: str = "safety"
    values: dict[str, Any] = field(default_factory=dict)
    wall_t: float | None = None  # unix time, stamped by the control loop (``t`` is monotonic)

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t, "wall_t": self.wall_t, "trigger": self.trigger, "message": self.message, "values": self.values,
            "state_before": self.state_before, "state_after": self.state_after, "kind": self.kind,
        }


class Motion(NamedTuple):
    """How the robot moves, for rules gated on motion: the controller says (commanded or measured,
    whichever is larger); ``forward`` is the signed speed along the robot's forward axis (0 for
    robots without one)."""

    moving: bool = False
    forward: float = 0.0


STILL = Motion()

When = Literal["always", "moving", "moving_forward", "moving_backward", "running"]


class Rule(Table):
    """A critical condition on one channel, from ``[[safety.rules]]``."""

    name: str
    channel: str
    below: float | None = None
    above: float | None = None
    when: When = "always"
    category: Literal[0, 1, 2] = 0
    message: str = ""

    def __post_init__(self) -> None:
        if (self.below is None) == (self.above is None):
            raise ValueError("needs exactly one of 'below' or 'above'")
        if not self.message:
            op, thr = ("<", self.below) if self.below is not None else (">", self.above)
            self.message = f"{self.channel} {op} {thr:g}"

    def crossed(self, value: float | None) -> bool:
        """True when ``value`` is on the wrong side of the threshold (a missing value is not a crossing;
        staleness is checked separately)."""
        if value is None or not math.isfinite(value):
            return False
        if self.below is not None and value < self.below:
            return True
        return self.above is not None and value > self.above

    def applies(self, state: State, motion: Motion) -> bool:
        """Whether the rule's ``when`` condition holds in ``state`` for ``motion``."""
        eps = 1e-3
        if self.when == "always":
            return True
        if self.when == "running":
            return state in (State.RUNNING, State.STOPPING)
        if self.when == "moving":
            return motion.moving
        if self.when == "moving_forward":
            return motion.forward > eps
        return motion.forward < -eps  # moving_backward


class SafetyConfig(Table):
    """The ``[safety]`` table."""

    command_timeout_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 0.5
    link_loss_category: Literal[0, 1, 2] = 1
    operator_estop_category: Literal[0, 1, 2] = 0
    overrun_category: Literal[0, 1, 2] = 0
    sensor_stale_s: Annotated[float, Meta(ge=0.001, le=60.0)] = 0.5
    #: a stamped setpoint older than this (from its sender's ``sent_t``) is dropped, never applied (issue 20)
    max_command_age_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 0.3
    governor: GovernorConfig = msgspec.field(default_factory=GovernorConfig)
    rules: list[Rule] = []


class OutputMode(enum.Enum):
    """How the outputs must be driven; the supervisor owns the choice, the loop applies it."""

    TRACK = "track"  # follow the setpoint
    RAMP = "ramp"  # controlled stop: ramp to zero (category 1 cuts once at zero)
    HOLD = "hold"  # zero, energised (category 2)
    CUT = "cut"  # halt the outputs (category 0, faults)
    IDLE = "idle"  # nothing to drive: outputs off


@dataclass
class Inputs:
    """What the supervisor sees each tick."""

    now: float
    values: dict[str, float] | None  # None when the read failed
    read_error: str | None = None
    frame_t: float | None = None  # host time of the last good frame
    overrun: bool = False
    late_s: float = 0.0  # how late this tick started after its deadline
    sample_t: dict[str, float] | None = None  # host time each value was sampled (derived channels: oldest input)
    motion: Motion = STILL  # from the controller: commanded or measured, whichever is larger
    stopped: bool = True  # the ramped command has reached zero


def _age_text(age_s: float) -> str:
    return f"{age_s:.3g} s old" if math.isfinite(age_s) else "no sample yet"


class Supervisor:
    """Owns the state; decides when to stop. Not thread-safe: callers hold the control loop's lock."""

    def __init__(self, config: SafetyConfig, max_consecutive_overruns: int = 10, max_stall_s: float = 0.1) -> None:
        self.cfg = config
        self.max_consecutive_overruns = max_consecutive_overruns
        self.max_stall_s = max_stall_s
        self.state = State.IDLE
        self.cause: Cause | None = None
        self.last_command_t = -math.inf
        self.command_expiry_t = math.inf  # from a command's ttl_s
        self.consecutive_overruns = 0
        self.driver_ok = True
        self.driver_error: str | None = None
        self.last_values: dict[str, float] = {}
        self.last_frame_t = -math.inf
        # host time of the newest finite sample of each rule channel: a held, missing or NaN value
        # does not refresh it, so a channel that stops delivering goes stale (fail safe)
        self.fresh_t: dict[str, float] = {}
        self.rule_channels = tuple(dict.fromkeys(r.channel for r in config.rules))
        self.events: list[Event] = []  # drained by the control loop after each call
        self.starts = 0  # counts accepted starts: the control loop activates the driver once per start

    # ------------------------------------------------------------------ helpers
    def _transition(self, now: float, new: State, trigger: str, message: str, kind: str = "safety",
                    values: dict[str, Any] | None = None) -> None:
        before = self.state
        self.state = new
        self.events.append(Event(now, trigger, message, before.value, new.value, kind, dict(values or {})))

    def _latch(self, now: float, trigger: Trigger, message: str, category: int,
               values: dict[str, Any] | None = None, rule: str | None = None) -> None:
        if self.state is State.ESTOP and self.cause is not None:
            return  # already latched: keep the first cause
        self.cause = Cause(trigger.value, message, now, category, dict(values or {}), rule)
        self._transition(now, State.ESTOP, trigger.value, message, values=values)

    def active_rules(self, motion: Motion = STILL, values: dict[str, float] | None = None,
                     state: State | None = None) -> list[tuple[Rule, float]]:
        vals = self.last_values if values is None else values
        st = self.state if state is None else state
        out = []
        for rule in self.cfg.rules:
            v = vals.get(rule.channel)
            if rule.applies(st, motion) and rule.crossed(v):
                out.append((rule, v))
        return out

    def link_deadline(self) -> float:
        return min(self.last_command_t + self.cfg.command_timeout_s, self.command_expiry_t)

    # ------------------------------------------------------------------ requests
    def touch(self, now: float) -> None:
        """A command or heartbeat from the operator keeps the link alive (``now``: when it was sent, for a
        stamped one: never earlier than what counted already)."""
        self.last_command_t = max(self.last_command_t, now)

    def request_start(self, now: float, live: bool = True) -> None:
        """``live``: the start came from the holder of control (a start from anyone else runs the robot only
        until the link-loss watchdog sees no command from the holder)."""
        if self.state is State.RUNNING:
            if live:
                self.touch(now)
            return
        if self.state is not State.IDLE:
            raise Refused("conflict", f"cannot start while {self.state.value}"
                          + (f" ({self.cause.message}); reset first" if self.cause else ""))
        failed = self.prestart_failures(now)
        if failed:
            raise Refused("prestart_failed", "pre-start checks failed: " + "; ".join(failed), failed)
        if live:
            self.touch(now)
        self.command_expiry_t = math.inf
        self.starts += 1
        self._transition(now, State.RUNNING, "start", "started by the operator", kind="command")

    def prestart_failures(self, now: float) -> list[str]:
        failed = []
        if not self.driver_ok:
            failed.append(f"driver not healthy: {self.driver_error}")
        age = now - self.last_frame_t
        if age > self.cfg.sensor_stale_s:
            failed.append(f"sensor data stale ({age:.3g} s old, limit {self.cfg.sensor_stale_s:g} s)")
        for channel, ch_age in self.stale_channels(now):
            failed.append(f"rule channel {channel} is stale ({_age_text(ch_age)}, limit {self.cfg.sensor_stale_s:g} s)")
        for rule, v in self.active_rules(state=State.RUNNING):
            failed.append(f"rule {rule.name} active: {rule.message} ({rule.channel}={v:.4g})")
        return failed

    def request_stop(self, now: float) -> None:
        if self.state is State.RUNNING:
            self._transition(now, State.STOPPING, "stop", "stop requested by the operator", kind="command")

    def latency_stop(self, now: float, delay_s: float) -> None:
        """The latency governor's controlled stop: the operator's link is too slow to drive on."""
        if self.state is State.RUNNING:
            self._transition(now, State.STOPPING, Trigger.LATENCY.value,
                             f"link too slow to drive: {delay_s * 1000:.0f} ms (governor stop at "
                             f"{self.cfg.governor.stop_delay_s * 1000:.0f} ms); start again once it recovers",
                             values={"delay_s": round(delay_s, 4)})

    def request_estop(self, now: float, reason: str = "") -> None:
        msg = "e-stop by the operator" + (f": {reason}" if reason else "")
        if self.state is State.ESTOP:
            return
        self._latch(now, Trigger.OPERATOR, msg, self.cfg.operator_estop_category)

    def request_shutdown(self, now: float) -> None:
        """The server is going down: latch (category 0) so the last snapshot says so, and log it."""
        msg = "server shutting down: robot halted"
        if self.state in (State.ESTOP, State.FAULT):
            self.events.append(Event(now, Trigger.SHUTDOWN.value, msg, self.state.value, self.state.value))
            return
        self.cause = Cause(Trigger.SHUTDOWN.value, msg, now, 0)
        self._transition(now, State.ESTOP, Trigger.SHUTDOWN.value, msg)

    def request_reset(self, now: float) -> None:
        if self.state not in (State.ESTOP, State.FAULT):
            if self.state is State.IDLE:
                return
            raise Refused("conflict", f"nothing to reset while {self.state.value}")
        persists = self.cause_persists(now)
        if persists:
            raise Refused("cause_persists", f"cannot reset: {persists}")
        before = self.cause
        self.cause = None
        self.consecutive_overruns = 0
        self._transition(now, State.IDLE, "reset",
                         "reset by the operator" + (f" (was: {before.message})" if before else ""), kind="command")

    def stale_channels(self, now: float) -> list[tuple[str, float]]:
        """Rule channels whose newest finite sample is older than ``sensor_stale_s``, with their ages."""
        limit = self.cfg.sensor_stale_s
        out = []
        for ch in self.rule_channels:
            age = now - self.fresh_t.get(ch, -math.inf)
            if age > limit:
                out.append((ch, age))
        return out

    def cause_persists(self, now: float) -> str | None:
        """Why a reset must be refused now, or None."""
        if not self.driver_ok:
            return f"driver fault: {self.driver_error}"
        if now - self.last_frame_t > self.cfg.sensor_stale_s:
            return "sensor data stale"
        for channel, age in self.stale_channels(now):
            return f"rule channel {channel} is stale ({_age_text(age)})"
        if self.cause is not None and self.cause.trigger == Trigger.RULE.value:
            for rule, v in self.active_rules(state=State.RUNNING):
                return f"rule {rule.name} still active: {rule.message} ({rule.channel}={v:.4g})"
        return None

    def not_running_reason(self) -> tuple[str, str]:
        """The 409 code and message for a motion command while not ``running``: what to do next."""
        if self.state is State.ESTOP:
            return "estop_latched", f"e-stop latched ({self.cause.message if self.cause else ''}); reset, then start"
        if self.state is State.FAULT:
            return "conflict", f"driver fault ({self.driver_error}); reset, then start"
        return "not_running", f"robot is {self.state.value}; start it first"

    def check_motion(self, now: float, motion: Motion) -> None:
        """Refuse a setpoint the state forbids, or one whose ``motion`` would trip a rule at once."""
        if self.state is not State.RUNNING:
            raise Refused(*self.not_running_reason())
        for rule, v in self.active_rules(motion):
            raise Refused("conflict", f"refused: rule {rule.name} would trip: {rule.message} ({rule.channel}={v:.4g})")
        for rule in self.cfg.rules:
            age = now - self.fresh_t.get(rule.channel, -math.inf)
            if age > self.cfg.sensor_stale_s and rule.applies(self.state, motion):
                raise Refused("conflict", f"refused: rule {rule.name} cannot be checked: {rule.channel} is stale "
                              f"({_age_text(age)})")

    def set_ttl(self, now: float, ttl_s: float | None) -> None:
        self.command_expiry_t = math.inf if ttl_s is None else now + ttl_s

    # ------------------------------------------------------------------ per tick
    def evaluate(self, inp: Inputs) -> State:
        """Run every automatic trigger once; returns the state after."""
        now = inp.now
        if inp.values is None:
            self.driver_ok = False
            self.driver_error = inp.read_error or "read failed"
            if self.state is not State.FAULT:
                self.cause = Cause(Trigger.DRIVER_FAULT.value, f"driver fault: {self.driver_error}", now, 0)
                self._transition(now, State.FAULT, Trigger.DRIVER_FAULT.value, self.cause.message)
            return self.state
        self.driver_ok = True
        self.driver_error = None
        self.last_values = inp.values
        self.last_frame_t = inp.frame_t if inp.frame_t is not None else now
        sample_t = inp.sample_t or {}
        for ch in self.rule_channels:
            v = inp.values.get(ch)
            if v is not None and math.isfinite(v):
                t = sample_t.get(ch, now)
                if t > self.fresh_t.get(ch, -math.inf):
                    self.fresh_t[ch] = t
        moving = self.state in (State.RUNNING, State.STOPPING)

        # loop overruns, and one long stall (a frozen process, a page fault storm) on its own
        self.consecutive_overruns = self.consecutive_overruns + 1 if inp.overrun else 0
        if moving and inp.late_s > self.max_stall_s:
            self._latch(now, Trigger.STALL, f"control loop stalled: a tick {inp.late_s:.3f} s late "
                        f"(limit {self.max_stall_s:g} s)", self.cfg.overrun_category,
                        {"late_s": round(inp.late_s, 4)})
        if self.consecutive_overruns >= self.max_consecutive_overruns and moving:
            self._latch(now, Trigger.OVERRUN, f"{self.consecutive_overruns} consecutive control-loop overruns",
                        self.cfg.overrun_category, {"consecutive": self.consecutive_overruns})

        # a rule that cannot be checked counts as violated (fail safe)
        if self.state in (State.RUNNING, State.STOPPING):
            for rule in self.cfg.rules:
                age = now - self.fresh_t.get(rule.channel, -math.inf)
                if age > self.cfg.sensor_stale_s and rule.applies(self.state, inp.motion):
                    self._latch(now, Trigger.SENSOR_STALE,
                                f"{rule.channel} is stale ({_age_text(age)}, limit {self.cfg.sensor_stale_s:g} s): "
                                f"rule {rule.name} cannot be checked",
                                rule.category, {"channel": rule.channel,
                                                "age_s": round(age, 4) if math.isfinite(age) else None},
                                rule.name)
                    break

        # critical rules
        if self.state is not State.FAULT:
            for rule, v in self.active_rules(inp.motion, inp.values):
                if self.state is State.ESTOP:
                    break
                if self.state is State.IDLE:
                    continue  # nothing moves: an active rule blocks start (pre-start check) instead
                self._latch(now, Trigger.RULE, f"{rule.name}: {rule.message} ({rule.channel}={v:.4g})",
                            rule.category, {rule.channel: v, "forward": inp.motion.forward}, rule.name)

        # link loss
        if self.state is State.RUNNING and now > self.link_deadline():
            expired_by_ttl = self.command_expiry_t < self.last_command_t + self.cfg.command_timeout_s
            msg = ("command time-to-live expired" if expired_by_ttl else
                   f"no command or heartbeat for {now - self.last_command_t:.3f} s "
                   f"(timeout {self.cfg.command_timeout_s:g} s)")
            self._latch(now, Trigger.LINK_LOSS, msg, self.cfg.link_loss_category,
                        {"age_s": round(now - self.last_command_t, 4)})

        if self.state is State.STOPPING and inp.stopped:
            self._transition(now, State.IDLE, "stopped", "controlled stop complete", kind="command")
        return self.state

    def output_mode(self) -> OutputMode:
        """How the outputs must be driven now (see :class:`OutputMode`)."""
        if self.state is State.RUNNING:
            return OutputMode.TRACK
        if self.state is State.STOPPING:
            return OutputMode.RAMP
        if self.state is State.ESTOP:
            cat = self.cause.category if self.cause else 0
            return (OutputMode.CUT, OutputMode.RAMP, OutputMode.HOLD)[cat]
        if self.state is State.FAULT:
            return OutputMode.CUT
        return OutputMode.IDLE
