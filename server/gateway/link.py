"""One message socket's link as the gateway measures it: the client's clock offset and the round trip
(NTP-style, from a ping exchange the server drives), and the command stream's ``seq``/``sent_t`` (issue 20 §2).

Why: on a thin link a command can sit in a TCP retransmit queue or a 250 ms bottleneck queue and still be
applied as if new (``ttl_s`` counted from arrival; nothing told a fresh command from a delayed one). A client
now stamps each motion command and heartbeat with ``seq`` (strictly increasing per socket) and ``sent_t``
(its own clock, seconds); this module turns ``sent_t`` into the gateway's monotonic clock, which is the
runtime's too (the runtime is a child process on the same host: ``CLOCK_MONOTONIC`` is system-wide), so the
runtime sees each command's age on its own clock and drops what is too old or out of order
(:mod:`server.runtime.freshness`).

**The exchange.** Every :data:`SYNC_EVERY_S` (faster for the first :data:`SYNC_FAST` samples) the server sends
``{"type": "sync", "t1": <server monotonic>}``; the client answers ``{"type": "sync", "t1", "t2", "t3"}`` with
its clock when it received the message (``t2``) and when it answered (``t3``); the server reads ``t4`` on
arrival. ``rtt = (t4 - t1) - (t3 - t2)``, ``offset = ((t2 - t1) + (t3 - t4)) / 2`` (client − server), and the
sample with the smallest round trip among the last :data:`SAMPLES` is used (the one least inflated by a
queue: Spot's SDK and NTP do the same). The estimate's error is at most half that sample's round trip minus
its asymmetry; on the emulator's ``4g`` link (60 ± 20 ms each way) the minimum-RTT sample of 8 is within a few
ms of the truth. A socket with fewer than :data:`MIN_SAMPLES` samples is *not synced*: its ``sent_t`` is
ignored and its commands keep arrival-time rules (the dashboard shows "clock not synced").

A client that never stamps (curl, plain HTTP, old scripts) keeps today's rules: ``ttl_s`` from arrival, a
heartbeat fresh on arrival.
"""

from __future__ import annotations

import collections
import itertools
import math
import statistics
import time
from typing import Any

from server.errors import ValidationError

#: round-trip samples kept; the minimum-RTT one gives the offset
SAMPLES = 8
#: samples before a socket counts as synced
MIN_SAMPLES = 2
#: seconds between sync pings once synced; the first SYNC_FAST go out every SYNC_FAST_EVERY_S
SYNC_EVERY_S = 1.0
SYNC_FAST = 4
SYNC_FAST_EVERY_S = 0.2
#: the largest seq a client may send (a JSON number stays exact up to 2**53)
MAX_SEQ = 2 ** 53
#: a sync reply's stamps must be within this of each other (seconds): a reply that is not one is refused
MAX_SYNC_SPAN_S = 60.0

_ids = itertools.count(1)


def check_stamps(body: dict[str, Any]) -> tuple[int | None, float | None]:
    """The envelope's ``seq`` and ``sent_t``, checked (a wrong type, a negative or too-large ``seq``, a NaN or
    infinite ``sent_t`` is refused with the field named, and nothing is done)."""
    seq = body.get("seq")
    if seq is not None:
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise ValidationError("seq must be an integer", code="wrong_type")
        if not 0 <= seq < MAX_SEQ:
            raise ValidationError(f"seq={seq} is outside [0, 2**53)", code="out_of_limits")
    sent_t = body.get("sent_t")
    if sent_t is not None:
        if isinstance(sent_t, bool) or not isinstance(sent_t, (int, float)):
            raise ValidationError("sent_t must be a number (the client's clock, seconds)", code="wrong_type")
        if not math.isfinite(sent_t):
            raise ValidationError("sent_t must be finite", code="out_of_limits")
        sent_t = float(sent_t)
    return seq, sent_t


class LinkClock:
    """One socket's clock offset and round trip (see the module docstring)."""

    def __init__(self, clock: Any = time.monotonic, lossy: bool = False) -> None:
        """``lossy``: the exchange runs on a path that loses messages (a data channel with no retransmission):
        pings go out on time whatever is in flight, and an answer to any of the last few counts."""
        self.clock = clock
        self.lossy = lossy
        self.samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=SAMPLES)  # (rtt, offset)
        self.count = 0
        self.last_ping_t = -math.inf
        self.pending: float | None = None  # t1 of the ping in flight (the last one)
        self._recent: collections.deque[float] = collections.deque(maxlen=8)  # t1 of the last pings (lossy)

    @property
    def synced(self) -> bool:
        return len(self.samples) >= MIN_SAMPLES

    @property
    def best(self) -> tuple[float, float] | None:
        return min(self.samples) if self.samples else None

    @property
    def offset_s(self) -> float | None:
        """Client clock − server monotonic clock, seconds (None: not synced)."""
        best = self.best
        return best[1] if best is not None and self.synced else None

    @property
    def rtt_s(self) -> float | None:
        """The newest round trip (what the operator lives with now), seconds."""
        return self.samples[-1][0] if self.samples else None

    @property
    def rtt_median_s(self) -> float | None:
        """The median of the recent round trips (the latency governor's measure: one retransmitted sync does not
        make a slow link)."""
        return statistics.median(r for r, _ in self.samples) if self.samples else None

    @property
    def rtt_min_s(self) -> float | None:
        best = self.best
        return best[0] if best is not None else None

    @property
    def jitter_s(self) -> float | None:
        """Standard deviation of the recent round trips."""
        if len(self.samples) < 2:
            return None
        return statistics.pstdev(r for r, _ in self.samples)

    def due(self, now: float | None = None) -> bool:
        """Whether a sync ping should go out now."""
        now = self.clock() if now is None else now
        every = SYNC_FAST_EVERY_S if self.count < SYNC_FAST else SYNC_EVERY_S
        if not self.lossy and self.pending is not None and now - self.pending < max(5.0, every):
            return False  # one in flight (a lost one is given up after 5 s)
        return now - self.last_ping_t >= every

    def ping(self, now: float | None = None) -> dict[str, Any]:
        """The sync message to send (and remember its ``t1``)."""
        now = self.clock() if now is None else now
        self.last_ping_t = self.pending = now
        self._recent.append(now)
        return {"type": "sync", "t1": now}

    def answer(self, body: dict[str, Any], now: float | None = None) -> None:
        """A client's sync reply (refused: a reply to no ping of ours, or stamps that are not numbers)."""
        t4 = self.clock() if now is None else now
        stamps = []
        for key in ("t1", "t2", "t3"):
            v = body.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValidationError(f"sync: {key} must be a finite number", code="wrong_type")
            stamps.append(float(v))
        t1, t2, t3 = stamps
        if self.lossy and t1 in self._recent:
            self._recent.remove(t1)  # each ping answered once
        elif self.pending is None or t1 != self.pending:
            raise ValidationError("sync: t1 is not the stamp of the server's last sync", code="invalid")
        if not 0 <= t3 - t2 <= MAX_SYNC_SPAN_S:
            raise ValidationError("sync: t3 must follow t2", code="invalid")
        self.pending = None
        rtt = (t4 - t1) - (t3 - t2)
        if rtt < 0:
            rtt = 0.0
        self.samples.append((rtt, ((t2 - t1) + (t3 - t4)) / 2))
        self.count += 1

    def to_server(self, sent_t: float) -> float | None:
        """A client stamp on the server's monotonic clock (None: not synced)."""
        off = self.offset_s
        return None if off is None else sent_t - off

    def to_client(self, t: float) -> float | None:
        """A stamp of the server's clock on the client's (None: not synced)."""
        off = self.offset_s
        return None if off is None else t + off

    def to_json(self) -> dict[str, Any]:
        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 2)
        return {"synced": self.synced, "offset_ms": ms(self.offset_s), "rtt_ms": ms(self.rtt_s),
                "rtt_min_ms": ms(self.rtt_min_s), "jitter_ms": ms(self.jitter_s), "samples": self.count}


class CommandStream:
    """A socket's commands as the runtime sees them: its id (``stream``: the runtime keeps the last ``seq``
    applied per stream), its :class:`LinkClock`, and the counts of what the runtime dropped."""

    def __init__(self, clock: LinkClock | None = None, name: str | None = None,
                 totals: dict[str, int] | None = None) -> None:
        self.name = name or f"s{next(_ids)}"
        self.totals = totals if totals is not None else {}  # the gateway's, for /metrics
        self.clock = clock or LinkClock()
        self.stale_dropped = 0
        self.reordered_dropped = 0
        self.unsynced = 0  # stamped commands taken by arrival-time rules (not synced yet)
        self.last_age_s: float | None = None

    def params(self, seq: int | None, sent_t: float | None) -> dict[str, Any]:
        """The runtime call's ``seq``/``sent_t``/``stream``/``rtt_s`` (the median recent round trip) for a stamped
        command (``{}``: none)."""
        out: dict[str, Any] = {}
        if seq is not None:
            out["seq"] = seq
        if sent_t is not None:
            server_t = self.server_time(sent_t)
            if server_t is None:
                self.unsynced += 1
            else:
                out["sent_t"] = server_t
                self.last_age_s = self.clock.clock() - server_t
        if out:
            out["stream"] = self.name
            rtt = self.round_trip_s()
            if rtt is not None:
                out["rtt_s"] = rtt
        return out

    def server_time(self, sent_t: float) -> float | None:
        """``sent_t`` on this server's monotonic clock (None: the socket's clock is not synced yet)."""
        return self.clock.to_server(sent_t)

    def round_trip_s(self) -> float | None:
        return self.clock.rtt_median_s

    def note(self, result: dict[str, Any] | None) -> None:
        """Count what the runtime dropped (its reply's ``dropped``)."""
        dropped = (result or {}).get("dropped")
        if dropped == "stale":
            self.stale_dropped += 1
        elif dropped == "reordered":
            self.reordered_dropped += 1
        else:
            return
        self.totals[dropped] = self.totals.get(dropped, 0) + 1

    def to_json(self, runtime_counts: dict[str, Any] | None = None) -> dict[str, Any]:
        """``runtime_counts``: the snapshot's ``link.dropped_by_stream`` — the runtime's own per-stream counts,
        dropped heartbeats included (one-way: no ack tells this stream of them); the larger of each count wins
        (the runtime's forgets the oldest streams)."""
        mine = (runtime_counts or {}).get(self.name) or {}
        stale = max(self.stale_dropped, int(mine.get("stale", 0)))
        reordered = max(self.reordered_dropped, int(mine.get("reordered", 0)))
        return {"stream": self.name, "stale_dropped": stale, "reordered_dropped": reordered,
                "unsynced_commands": self.unsynced,
                "command_age_ms": None if self.last_age_s is None else round(self.last_age_s * 1000, 1),
                **self.clock.to_json()}


class RelayedStream(CommandStream):
    """The commands of one operator socket that a relay (the fleet hub) forwards: the relay measured that socket's
    clock and its own clock to this robot's, and sends ``sent_t`` already on this robot's monotonic clock, with the
    whole path's round trip (``rtt_s``). So nothing is converted here; ``seq`` and ``sent_t`` are checked by the
    command path as a socket's are, and the runtime keeps this stream's ``seq`` and counts its drops."""

    def __init__(self, name: str, totals: dict[str, int] | None = None) -> None:
        super().__init__(name=name, totals=totals)
        self.rtt_s: float | None = None

    def server_time(self, sent_t: float) -> float | None:
        return sent_t  # the relay sent it on this robot's clock

    def round_trip_s(self) -> float | None:
        return self.rtt_s


__all__ = ["CommandStream", "LinkClock", "MAX_SEQ", "RelayedStream", "check_stamps"]
