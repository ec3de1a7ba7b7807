"""The fleet's events as MCAP, one file per robot per UTC day (server/hub/events.py), in process: two robots' events
land in their own files, readable with the ``mcap`` reader and with the recording's JSON schemas; the file reads to
its last flush while still open (what a ``kill -9`` leaves; the hub process test kills it for real); the UTC day
rolls over by the injected clock; a restart the same day continues in ``<day>.1.mcap`` and repairs the cut file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mcap.reader import make_reader

from server.gateway.recording.reader import stream_records
from server.hub.events import QUEUE_MAX, FleetEventLog
from tests.server.fleet.fleetkit import wait

pytestmark = pytest.mark.unit

DAY1_END = 1_780_000_000.0 - (1_780_000_000.0 % 86400) + 86400 - 0.5  # 23:59:59.5 UTC of some day


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def read(path: Path) -> list[tuple[str, dict]]:
    """Every message of a finished file, with the seeking reader (summary and index)."""
    with open(path, "rb") as f:
        reader = make_reader(f)
        schemas = {s.name for s in reader.get_summary().schemas.values()}
        assert {"teleop.Event", "teleop.StateChange"} <= schemas, schemas
        return [(ch.topic, json.loads(m.data)) for _s, ch, m in reader.iter_messages()]


def streamed(path: Path) -> list[dict]:
    """The events of a file that may be cut (the stream reader, up to the last complete chunk)."""
    from mcap.records import Message

    with open(path, "rb") as f:
        return [json.loads(r.data) for r in stream_records(f) if isinstance(r, Message)]


def event(trigger: str, t: float, before: str = "idle", after: str = "idle") -> dict:
    return {"trigger": trigger, "wall_t": t, "kind": "safety", "message": trigger, "state_before": before,
            "state_after": after}


def test_two_robots_their_own_files_readable_with_the_mcap_reader(tmp_path) -> None:
    clock = Clock(DAY1_END - 100)
    log = FleetEventLog(tmp_path, "lab", flush_s=0.05, clock=clock)
    log.start()
    try:
        log.record("r1", event("estop", clock.t, "running", "estop"))
        log.record("r2", event("start", clock.t, "idle", "running"))
        log.record("r1", {"trigger": "online", "kind": "fleet", "message": "r1 online"})  # no wall_t: now
    finally:
        log.close()
    day = "2026-05-28"
    assert sorted(p.name for p in (tmp_path / "r1").iterdir()) == [f"{day}.mcap"]
    r1, r2 = read(tmp_path / "r1" / f"{day}.mcap"), read(tmp_path / "r2" / f"{day}.mcap")
    assert [(t, m["trigger"] if t == "/teleop/events" else m["state"]) for t, m in r1] == [
        ("/teleop/events", "estop"), ("/teleop/state", "estop"), ("/teleop/events", "online")]
    assert all(m.get("robot", "r1") == "r1" for t, m in r1 if t == "/teleop/events")
    assert [m["trigger"] for t, m in r2 if t == "/teleop/events"] == ["start"] and r2[0][1]["robot"] == "r2"
    assert log.files("r1")[0]["name"] == f"{day}.mcap" and log.written == 3 and log.dropped == 0


def test_an_open_file_reads_to_its_last_flush_and_a_restart_repairs_it(tmp_path) -> None:
    clock = Clock(DAY1_END - 100)
    log = FleetEventLog(tmp_path, "lab", flush_s=0.05, clock=clock)
    log.start()
    path = tmp_path / "r1" / "2026-05-28.mcap"
    for i in range(5):
        log.record("r1", event(f"e{i}", clock.t + i))
    # never closed (as after kill -9): the stream reader gets every flushed event
    wait(lambda: path.exists() and len(streamed(path)) == 5, 30, "the five events flushed")
    log._files.clear()  # as a killed process: the writer ends without finishing the file (no summary, no footer)
    log.close()
    assert not (path.read_bytes().endswith(b"\x89MCAP0\r\n") and len(path.read_bytes()) > 8 + 8)
    log2 = FleetEventLog(tmp_path, "lab", flush_s=0.05, clock=clock)
    log2.start()
    log2.record("r1", event("after", clock.t + 10))
    log2.close()
    assert [r["file"] for r in log2.recovered] == ["2026-05-28.mcap"]
    assert [m["trigger"] for _t, m in read(path)] == [f"e{i}" for i in range(5)]
    assert [m["trigger"] for _t, m in read(path.with_name("2026-05-28.1.mcap"))] == ["after"]


def test_the_utc_day_rolls_over_by_the_clock(tmp_path) -> None:
    clock = Clock(DAY1_END)
    log = FleetEventLog(tmp_path, "lab", flush_s=0.05, clock=clock)
    log.start()
    try:
        log.record("r1", event("before_midnight", clock.t))
        wait(lambda: (tmp_path / "r1" / "2026-05-28.mcap").exists(), 30, "the first day's file")
        clock.t += 1.0  # 00:00:00.5 the next day
        log.record("r1", event("after_midnight", clock.t))
        wait(lambda: (tmp_path / "r1" / "2026-05-29.mcap").exists(), 30, "the next day's file")
        # yesterday's file is finished at once (summary, index): the seeking reader opens it
        assert [m["trigger"] for _t, m in read(tmp_path / "r1" / "2026-05-28.mcap")] == ["before_midnight"]
    finally:
        log.close()
    assert [m["trigger"] for _t, m in read(tmp_path / "r1" / "2026-05-29.mcap")] == ["after_midnight"]


def test_a_flood_is_bounded(tmp_path) -> None:
    log = FleetEventLog(tmp_path, "lab", flush_s=60.0)
    log._thread = object()  # type: ignore[assignment] - accepting, with no writer draining
    for i in range(QUEUE_MAX + 50):
        log.record("r1", event("x", time.time()))
    assert len(log._queue) == QUEUE_MAX and log.dropped == 50
