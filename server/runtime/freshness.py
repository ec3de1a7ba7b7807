"""Commands that cannot go stale, and the latency governor (issue 20 §2-3): the runtime's side.

**Freshness.** A stamped command carries ``sent_t`` (already on the runtime's monotonic clock: the gateway
converted the client's stamp with its measured offset, :mod:`server.gateway.link`), ``seq`` and ``stream`` (one
per socket). :meth:`Freshness.admit` drops a setpoint older than ``safety.max_command_age_s`` (default 0.3 s)
and a heartbeat older than ``command_timeout_s``, and anything whose ``seq`` is not newer than the last one
admitted from its stream — a command that sat in a retransmit queue or a blackout is never applied late
(late twists made a robot take off: teleop_twist_joy#27; queued clicks ran after a reconnect:
stretch_web_teleop#3). A dropped command is counted (``stale_dropped``, ``reordered_dropped`` in the
snapshot's ``link``) and answered ``{"ok": true, "dropped": ...}``: no error storm at 20 Hz. An admitted
command's liveness counts from ``sent_t`` (the operator was there then), and its ``ttl_s`` too. Unstamped
commands (curl, HTTP, old scripts) keep arrival-time rules.

**The governor.** Operators' performance degrades from 200–300 ms of delay and plateaus above 400 ms
(arXiv 2508.18074; camera lane keeping collapses between 150 and 225 ms one-way, arXiv 2603.06850). The
governor watches the controlling operator's delay — the larger of the stamped command's age and the socket's
measured round trip — and when it stays above ``delay_s`` for ``hold_s`` it caps the speed: a scale from 1 at
``delay_s`` down to ``floor`` at ``floor_delay_s``, applied to every setpoint the controller scales (the
rover's linear and angular speed). The cap lifts only once the delay stays under ``recover_delay_s`` for
``recover_s`` (hysteresis: a link that flaps does not flap the speed). Past ``stop_delay_s`` for ``hold_s``
it asks for a controlled stop (``latency`` trigger): driving on a picture a second old is not driving.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta

from server.config import Table

#: streams whose last seq is kept (a gateway makes one per socket; old ones are forgotten first)
MAX_STREAMS = 64


class GovernorConfig(Table):
    """``[safety.governor]``: see the module docstring (defaults: docs/safety.md, "The latency governor")."""

    enabled: bool = True
    delay_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 0.25
    hold_s: Annotated[float, Meta(ge=0.0, le=60.0)] = 1.0
    floor_delay_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 0.6
    floor: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.3
    recover_delay_s: Annotated[float, Meta(ge=0.0, le=60.0)] = 0.15
    recover_s: Annotated[float, Meta(ge=0.0, le=600.0)] = 2.0
    stop_delay_s: Annotated[float, Meta(ge=0.01, le=60.0)] = 1.0

    def __post_init__(self) -> None:
        if not self.recover_delay_s <= self.delay_s < self.floor_delay_s <= self.stop_delay_s:
            raise ValueError("safety.governor: need recover_delay_s <= delay_s < floor_delay_s <= stop_delay_s, got "
                             f"{self.recover_delay_s:g}, {self.delay_s:g}, {self.floor_delay_s:g}, "
                             f"{self.stop_delay_s:g}")


@dataclass
class Stamp:
    """A command's stamps as the runtime got them (all None: an unstamped command); the runtime API's
    ``Stamped`` params have the same fields and stand in for it."""

    sent_t: float | None = None
    seq: int | None = None
    stream: str | None = None
    rtt_s: float | None = None


class Freshness:
    """Per-stream ``seq`` and the drop counters (see the module docstring)."""

    def __init__(self, max_command_age_s: float, command_timeout_s: float) -> None:
        self.max_command_age_s = max_command_age_s
        self.command_timeout_s = command_timeout_s
        self.last_seq: dict[str, int] = {}
        self.stale_dropped = 0
        self.reordered_dropped = 0
        self.last_age_s: float | None = None
        #: per stream that had drops: [stale, reordered], heartbeats included (the gateway never hears of a
        #: dropped heartbeat otherwise: it is one-way); the last MAX_STREAMS streams
        self.dropped_by_stream: dict[str, list[int]] = {}

    def _count(self, stream: str | None, reason: str) -> None:
        if reason == "stale":
            self.stale_dropped += 1
        else:
            self.reordered_dropped += 1
        if stream is None:
            return
        counts = self.dropped_by_stream.pop(stream, None) or [0, 0]
        counts[0 if reason == "stale" else 1] += 1
        self.dropped_by_stream[stream] = counts
        while len(self.dropped_by_stream) > MAX_STREAMS:
            self.dropped_by_stream.pop(next(iter(self.dropped_by_stream)))

    def admit(self, now: float, stamp: Stamp, heartbeat: bool = False) -> str | None:
        """None: apply the command; else why it is dropped (``stale``, ``reordered``)."""
        if stamp.seq is not None and stamp.stream is not None:
            last = self.last_seq.get(stamp.stream)
            if last is not None and stamp.seq <= last:
                self._count(stamp.stream, "reordered")
                return "reordered"
        if stamp.sent_t is not None:
            age = now - stamp.sent_t
            self.last_age_s = age
            if age > (self.command_timeout_s if heartbeat else self.max_command_age_s):
                self._count(stamp.stream, "stale")
                return "stale"
        if stamp.seq is not None and stamp.stream is not None:
            self.last_seq.pop(stamp.stream, None)
            self.last_seq[stamp.stream] = stamp.seq
            while len(self.last_seq) > MAX_STREAMS:
                self.last_seq.pop(next(iter(self.last_seq)))
        return None

    def to_json(self) -> dict[str, Any]:
        return {"stale_dropped": self.stale_dropped, "reordered_dropped": self.reordered_dropped,
                "command_age_s": None if self.last_age_s is None else round(self.last_age_s, 4),
                "max_command_age_s": self.max_command_age_s,
                "dropped_by_stream": {k: {"stale": v[0], "reordered": v[1]} for k, v in self.dropped_by_stream.items()}}


class Governor:
    """The latency governor's state machine (see the module docstring). ``update`` is called with each of the
    holder's stamped commands; ``scale`` is the cap in force (1: none)."""

    def __init__(self, cfg: GovernorConfig) -> None:
        self.cfg = cfg
        self.scale = 1.0
        self.state = "ok"  # ok, capped, stop
        self.delay_s: float | None = None
        self._above_since: float | None = None  # delay above delay_s since
        self._stop_since: float | None = None  # above stop_delay_s since
        self._below_since: float | None = None  # under recover_delay_s since (while capped)
        self.caps = 0
        self.stops = 0

    def target(self, delay: float) -> float:
        c = self.cfg
        if delay <= c.delay_s:
            return 1.0
        frac = min(1.0, (delay - c.delay_s) / (c.floor_delay_s - c.delay_s))
        return 1.0 - frac * (1.0 - c.floor)

    def update(self, now: float, delay: float) -> str | None:
        """A new delay measurement; returns an event kind on a change (``capped``, ``lifted``, ``stop``)."""
        c = self.cfg
        if not c.enabled or not math.isfinite(delay):
            return None
        self.delay_s = delay
        event = None
        if delay > c.delay_s:
            self._above_since = now if self._above_since is None else self._above_since
            self._below_since = None
            if now - self._above_since >= c.hold_s:
                target = self.target(delay)
                if self.state == "ok":
                    self.state, self.scale, event = "capped", target, "capped"
                    self.caps += 1
                elif target < self.scale:
                    self.scale = target  # down at once, up only on recovery
        else:
            self._above_since = None
        if delay >= c.stop_delay_s:
            self._stop_since = now if self._stop_since is None else self._stop_since
            if now - self._stop_since >= c.hold_s and self.state != "stop":
                self.state, event = "stop", "stop"
                self.stops += 1
        else:
            self._stop_since = None
        if self.state != "ok" and delay <= c.recover_delay_s:
            self._below_since = now if self._below_since is None else self._below_since
            if now - self._below_since >= c.recover_s:
                self.state, self.scale, event = "ok", 1.0, "lifted"
                self._below_since = None
        elif delay > c.recover_delay_s:
            self._below_since = None
        return event

    def reset_stop(self) -> None:
        """A new start after a governor stop: the cap stays (the link did not recover), the stop is spent."""
        if self.state == "stop":
            self.state = "capped"
            self._stop_since = None

    def to_json(self) -> dict[str, Any]:
        return {"enabled": self.cfg.enabled, "state": self.state, "scale": round(self.scale, 3),
                "delay_s": None if self.delay_s is None else round(self.delay_s, 4)}


__all__ = ["Freshness", "Governor", "GovernorConfig", "MAX_STREAMS", "Stamp"]
