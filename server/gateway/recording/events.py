"""The gateway's event log: ``/api/events`` that survives a restart of either process.

The runtime keeps the events of its own lifetime in memory; a restarted runtime starts
with none, and the gateway's own ``runtime_down`` events were never in it. The gateway
therefore keeps a log of its own: seeded at start-up from the recordings
(:func:`server.gateway.recording.reader.recent_events`, so what was recorded before a
restart of the whole server is there again), appended with every event it forwards,
and merged on each request with the runtime's log (which holds the events from before
the gateway connected, e.g. after the gateway alone was restarted). The same event
reaches the gateway by several paths (pushed, recorded, in the runtime's log): it is
the same JSON each time, so ``(wall_t, t, trigger, message)`` identifies it.

>>> log = EventLog(maxlen=3)
>>> log.seed([{"t": 1.0, "wall_t": 100.0, "trigger": "a", "message": ""}])
>>> log.add({"t": 1.0, "wall_t": 100.0, "trigger": "a", "message": ""})   # a duplicate
False
>>> log.add({"t": 2.0, "wall_t": 101.0, "trigger": "b", "message": ""})
True
>>> [e["trigger"] for e in log.merged([{"t": 0.5, "wall_t": 99.0, "trigger": "z", "message": ""}], 10)]
['z', 'a', 'b']
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Any, Iterable

from server.errors import ApiError

log = logging.getLogger(__name__)

#: events kept by the gateway (the dashboard asks for 100)
DEFAULT_MAXLEN = 1000
#: events read back from the recordings at start-up
SEED_EVENTS = 200


def event_key(ev: dict[str, Any]) -> tuple[Any, ...]:
    return (_num(ev.get("wall_t")), _num(ev.get("t")), str(ev.get("trigger")), str(ev.get("message")))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _order(ev: dict[str, Any]) -> float:
    wall = _num(ev.get("wall_t"))
    return wall if wall is not None else -math.inf


class EventLog:
    """A bounded, deduplicated event log, oldest first. Touched on the event loop only."""

    def __init__(self, maxlen: int = DEFAULT_MAXLEN) -> None:
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._keys: set[tuple[Any, ...]] = set()
        self.maxlen = maxlen

    def __len__(self) -> int:
        return len(self._events)

    def add(self, ev: dict[str, Any]) -> bool:
        """Append ``ev`` unless it is already there; returns whether it was new."""
        if not isinstance(ev, dict):
            return False
        k = event_key(ev)
        if k in self._keys:
            return False
        self._keys.add(k)
        self._events.append(ev)
        while len(self._events) > self.maxlen:
            self._keys.discard(event_key(self._events.popleft()))
        return True

    def seed(self, events: Iterable[dict[str, Any]]) -> None:
        """Events from before this process (the recordings), oldest first."""
        for ev in events:
            self.add(ev)

    def merged(self, others: Iterable[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
        """This log merged with ``others`` (the runtime's), without duplicates, by wall time; the newest ``limit``."""
        out = list(self._events)
        keys = set(self._keys)
        for ev in others:
            if isinstance(ev, dict) and (k := event_key(ev)) not in keys:
                keys.add(k)
                out.append(ev)
        out.sort(key=_order)  # stable: events of one wall time keep their order
        return out[-limit:] if limit > 0 else []

    async def recent(self, runtime: Any, limit: int) -> list[dict[str, Any]]:
        """``GET /api/events``: the runtime's log (when it is up) merged with this one."""
        theirs: list[dict[str, Any]] = []
        if runtime.connected:
            try:
                theirs = (await runtime.request("events", {"limit": limit})).get("events") or []
            except ApiError as err:  # down or slow: what the gateway has is still the answer
                log.info("event log served without the runtime's part: %s", err.message)
        return self.merged(theirs, limit)


__all__ = ["EventLog", "SEED_EVENTS", "event_key"]
