"""The gateway's event log: bounded, deduplicated, merged with the runtime's by wall time."""

from __future__ import annotations

import asyncio
import doctest

import server.gateway.recording.events
from server.errors import RuntimeDownError
from server.gateway.recording.events import EventLog


def ev(k: int, wall_t: float | None = None, trigger: str = "t") -> dict:
    return {"t": float(k), "wall_t": 1000.0 + k if wall_t is None else wall_t, "trigger": trigger,
            "message": f"m{k}", "values": {}, "state_before": "idle", "state_after": "idle", "kind": "info"}


def test_doctests():
    assert doctest.testmod(server.gateway.recording.events).failed == 0


def test_the_oldest_go_and_can_come_back():
    log = EventLog(maxlen=3)
    for k in range(5):
        assert log.add(ev(k))
    assert [e["t"] for e in log.merged([], 10)] == [2.0, 3.0, 4.0]
    assert log.add(ev(0))  # evicted, so its key went too: not a duplicate any more
    assert len(log) == 3


def test_merge_orders_by_wall_time_and_limits():
    log = EventLog()
    log.seed([ev(1), ev(3)])
    merged = log.merged([ev(2), ev(3), ev(0, wall_t=float("nan"))], 3)
    assert [e["t"] for e in merged] == [1.0, 2.0, 3.0]  # the NaN-timed one sorts first and falls off
    assert log.merged([ev(2)], 0) == []


def test_junk_is_ignored():
    log = EventLog()
    assert not log.add(None)  # type: ignore[arg-type]
    assert not log.add([1, 2])  # type: ignore[arg-type]
    assert log.add({"trigger": {"nested": "dict"}})  # odd but harmless: keyed by its text
    assert len(log.merged(["x", 3, None], 10)) == 1


class DownRuntime:
    connected = True

    async def request(self, method, params):
        raise RuntimeDownError("down")


class UpRuntime:
    connected = True

    def __init__(self, events):
        self.events = events

    async def request(self, method, params):
        assert method == "events"
        return {"events": self.events[-params["limit"]:]}


def test_recent_answers_without_the_runtime_and_merges_with_it():
    log = EventLog()
    log.add(ev(1))
    assert asyncio.run(log.recent(DownRuntime(), 10)) == [ev(1)]
    got = asyncio.run(log.recent(UpRuntime([ev(0), ev(1)]), 10))
    assert [e["t"] for e in got] == [0.0, 1.0]
