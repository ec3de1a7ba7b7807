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
from typing import Any


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


@dataclass(frozen=True)
class Rule:
    """A critical condition on one channel, from ``[[safety.rules]]``."""

    name: str
    channel: str
    below: float | None
    above: float | None
    when: str
    category: int
    message: str

    @classmethod
    def from_config(cls, d: dict[str, Any]) -> "Rule":
        return cls(d["name"], d["channel"], d["below"], d["above"], d["when"], d["category"], d["message"])

    def crossed(self, value: float | None) -> bool:
        """True when ``value`` is on the wrong side of the threshold (a missing value is not a crossing;
        staleness is checked separately)."""
        if value is None or not math.isfinite(value):
            return False
        if self.below is not None and value < self.below:
            return True
        return self.above is not None and value > self.above

    def applies(self, state: State, linear: float, angular: float) -> bool:
        """Whether the rule's ``when`` condition holds for the motion ``linear`` m/s, ``angular`` rad/s."""
        eps = 1e-3
        if self.when == "always":
            return True
        if self.when == "running":
            return state in (State.RUNNING, State.STOPPING)
        if self.when == "moving":
            return abs(linear) > eps or abs(angular) > eps
        if self.when == "moving_forward":
            return linear > eps
        if self.when == "moving_backward":
            return linear < -eps
        return True


@dataclass
class SafetyConfig:
    command_timeout_s: float = 0.5
    link_loss_category: int = 1
    operator_estop_category: int = 0
    overrun_category: int = 0
    sensor_stale_s: float = 0.5
    max_consecutive_overruns: int = 10
    rules: tuple[Rule, ...] = ()

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "SafetyConfig":
        s = cfg["safety"]
        return cls(
            command_timeout_s=s["command_timeout_s"],
            link_loss_category=s["link_loss_category"],
            operator_estop_category=s["operator_estop_category"],
            overrun_category=s["overrun_category"],
            sensor_stale_s=s["sensor_stale_s"],
            max_consecutive_overruns=cfg["loop"]["max_consecutive_overruns"],
            rules=tuple(Rule.from_config(r) for r in s["rules"]),
        )


@dataclass
class Inputs:
    """What the supervisor sees each tick."""

    now: float
    values: dict[str, float] | None  # None when the read failed
    read_error: str | None = None
    frame_t: float | None = None  # host time of the last good frame
    overrun: bool = False
    linear: float = 0.0  # motion measured or commanded, whichever is larger in magnitude
    angular: float = 0.0
    stopped: bool = True  # the ramped command has reached zero


class Supervisor:
    """Owns the state; decides when to stop. Not thread-safe: callers hold the control loop's lock."""

    def __init__(self, config: SafetyConfig) -> None:
        self.cfg = config
        self.state = State.IDLE
        self.cause: Cause | None = None
        self.last_command_t = -math.inf
        self.command_expiry_t = math.inf  # from a command's ttl_s
        self.consecutive_overruns = 0
        self.driver_ok = True
        self.driver_error: str | None = None
        self.last_values: dict[str, float] = {}
        self.last_frame_t = -math.inf
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

    def active_rules(self, linear: float = 0.0, angular: float = 0.0, values: dict[str, float] | None = None,
                     state: State | None = None) -> list[tuple[Rule, float]]:
        vals = self.last_values if values is None else values
        st = self.state if state is None else state
        out = []
        for rule in self.cfg.rules:
            v = vals.get(rule.channel)
            if rule.applies(st, linear, angular) and rule.crossed(v):
                out.append((rule, v))
        return out

    def link_deadline(self) -> float:
        return min(self.last_command_t + self.cfg.command_timeout_s, self.command_expiry_t)

    # ------------------------------------------------------------------ requests
    def touch(self, now: float) -> None:
        """A command or heartbeat from the operator keeps the link alive."""
        self.last_command_t = now

    def request_start(self, now: float) -> None:
        if self.state is State.RUNNING:
            self.touch(now)
            return
        if self.state is not State.IDLE:
            raise Refused("conflict", f"cannot start while {self.state.value}"
                          + (f" ({self.cause.message}); reset first" if self.cause else ""))
        failed = self.prestart_failures(now)
        if failed:
            raise Refused("prestart_failed", "pre-start checks failed: " + "; ".join(failed), failed)
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
        missing = sorted({r.channel for r in self.cfg.rules} - set(self.last_values))
        if missing and self.last_values:
            failed.append(f"no data from rule channel(s): {', '.join(missing)}")
        for rule, v in self.active_rules(0.0, 0.0, state=State.RUNNING):
            failed.append(f"rule {rule.name} active: {rule.message} ({rule.channel}={v:.4g})")
        return failed

    def request_stop(self, now: float) -> None:
        if self.state is State.RUNNING:
            self._transition(now, State.STOPPING, "stop", "stop requested by the operator", kind="command")

    def request_estop(self, now: float, reason: str = "") -> None:
        msg = "e-stop by the operator" + (f": {reason}" if reason else "")
        if self.state is State.ESTOP:
            return
        self._latch(now, Trigger.OPERATOR, msg, self.cfg.operator_estop_category)

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

    def cause_persists(self, now: float) -> str | None:
        """Why a reset must be refused now, or None."""
        if not self.driver_ok:
            return f"driver fault: {self.driver_error}"
        if now - self.last_frame_t > self.cfg.sensor_stale_s:
            return "sensor data stale"
        if self.cause is not None and self.cause.trigger == Trigger.RULE.value:
            for rule, v in self.active_rules(0.0, 0.0, state=State.RUNNING):
                return f"rule {rule.name} still active: {rule.message} ({rule.channel}={v:.4g})"
        return None

    def check_speed(self, now: float, linear: float, angular: float) -> None:
        """Refuse a setpoint the state forbids, or one that would trip a rule at once."""
        if self.state is State.ESTOP:
            raise Refused("estop_latched", f"e-stop latched ({self.cause.message if self.cause else ''}); reset, then start")
        if self.state is State.FAULT:
            raise Refused("conflict", f"driver fault ({self.driver_error}); reset, then start")
        if self.state is not State.RUNNING:
            raise Refused("not_running", f"robot is {self.state.value}; start it first")
        for rule, v in self.active_rules(linear, angular):
            raise Refused("conflict", f"refused: rule {rule.name} would trip: {rule.message} ({rule.channel}={v:.4g})")

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

        # loop overruns
        self.consecutive_overruns = self.consecutive_overruns + 1 if inp.overrun else 0
        if self.consecutive_overruns >= self.cfg.max_consecutive_overruns and self.state in (State.RUNNING, State.STOPPING):
            self._latch(now, Trigger.OVERRUN, f"{self.consecutive_overruns} consecutive control-loop overruns",
                        self.cfg.overrun_category, {"consecutive": self.consecutive_overruns})

        # critical rules
        if self.state is not State.FAULT:
            for rule, v in self.active_rules(inp.linear, inp.angular, inp.values):
                if self.state is State.ESTOP:
                    break
                if self.state is State.IDLE:
                    continue  # nothing moves: an active rule blocks start (pre-start check) instead
                self._latch(now, Trigger.RULE, f"{rule.name}: {rule.message} ({rule.channel}={v:.4g})",
                            rule.category, {rule.channel: v, "linear": inp.linear}, rule.name)

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

    def output_mode(self) -> str:
        """How the controller must drive outputs: ``track`` setpoints, ``ramp`` to zero, ``hold`` zero
        energised, or ``cut`` (halt)."""
        if self.state is State.RUNNING:
            return "track"
        if self.state is State.STOPPING:
            return "ramp"
        if self.state is State.ESTOP:
            cat = self.cause.category if self.cause else 0
            return {0: "cut", 1: "ramp", 2: "hold"}[cat]
        if self.state is State.FAULT:
            return "cut"
        return "idle"
