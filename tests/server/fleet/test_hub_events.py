"""The fleet's events as MCAP on the real hub (issue 22): each robot's events in its own file for the UTC day,
listed and downloaded through the hub (admin, or the robot's view permission), readable to the last flush after
the hub is killed with ``kill -9``, repaired (summary and index) when it starts again."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from mcap.reader import make_reader
from mcap.records import Channel, Message

from server.gateway.recording.reader import stream_records
from tests.server.fleet.fleetkit import hub_config, hub_keys, hub_proc, login, wait
from tests.server.fleet.test_hub import FLEET, cards, robot

#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def events_of(data: bytes) -> list[dict]:
    """The ``/teleop/events`` messages of an MCAP stream that may be cut (up to its last complete chunk)."""
    topics, out = {}, []
    for r in stream_records(io.BytesIO(data)):
        if isinstance(r, Channel):
            topics[r.id] = r.topic
        elif isinstance(r, Message) and topics.get(r.channel_id) == "/teleop/events":
            out.append(json.loads(r.data))
    return out


def test_events_per_robot_per_day_survive_a_killed_hub(server_factory, router, tmp_path) -> None:
    private, public = hub_keys(tmp_path)
    r1 = robot(server_factory, router, public, "r1")
    robot(server_factory, router, public, "r2")
    cfg = hub_config(tmp_path, router, FLEET, private, users={"alice": "operator", "val": "viewer", "root": "admin"},
                     robots={"r2": {"view": ["alice"]}})
    hub = hub_proc(cfg).start()
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    events_dir = tmp_path / "fleet-events"
    try:
        alice, val, root = login(hub, "alice"), login(hub, "val"), login(hub, "root")
        wait(lambda: all(cards(hub, alice).get(r, {}).get("online") for r in ("r1", "r2")), 120, "both online")
        assert hub.post("/api/fleet/r1/estop", {"reason": "mcap test"}, headers=alice)[0] == 200
        wait(lambda: r1.state()["state"] == "estop", 30, "r1 e-stopped")

        def r1_file() -> list[dict]:
            status, body = hub.get("/api/fleet/r1/events/files", headers=alice)
            assert status == 200, body
            if not body["files"]:
                return []
            status, data = hub.get(f"/api/fleet/r1/events/files/{body['files'][0]['name']}", headers=alice)
            assert status == 200 and isinstance(data, bytes), (status, data)
            return events_of(data)

        got = wait(lambda: (ev := r1_file()) and any(e["trigger"] == "operator_estop" for e in ev) and ev, 60,
                   "r1's e-stop in its event file, read through the hub")
        assert {e["robot"] for e in got} == {"r1"} and any(e["trigger"] == "online" for e in got)
        # r2's events are in r2's file only; r2's files need the view permission (or admin)
        assert hub.get("/api/fleet/r2/events/files", headers=val)[0] == 403
        status, body = hub.get("/api/fleet/r2/events/files", headers=root)
        assert status == 200 and [f["name"] for f in body["files"]] == [f"{day}.mcap"], body
        # bad names: a clear refusal
        assert hub.get("/api/fleet/r1/events/files/..%2Fr2.mcap", headers=alice)[0] in (404, 422)
        status, body = hub.get("/api/fleet/r1/events/files/passwd", headers=alice)
        assert status == 422 and body["error"]["code"] == "bad_name", body
        assert hub.get("/api/fleet/r1/events/files/1999-01-01.mcap", headers=alice)[0] == 404

        # kill -9: the files read to their last flush, straight from the disk
        hub.kill()
        cut = (events_dir / "r1" / f"{day}.mcap").read_bytes()
        assert any(e["trigger"] == "operator_estop" for e in events_of(cut))
        assert {e["robot"] for e in events_of((events_dir / "r2" / f"{day}.mcap").read_bytes())} == {"r2"}
        # the hub again: the cut file is repaired (the seeking reader opens it), today goes on in <day>.1.mcap
        hub.start()
        alice = login(hub, "alice")
        wait(lambda: [f["name"] for f in hub.get("/api/fleet/r1/events/files", headers=alice)[1]["files"]]
             == [f"{day}.mcap", f"{day}.1.mcap"], 120, "the repaired file and today's new one")
        with open(events_dir / "r1" / f"{day}.mcap", "rb") as f:
            triggers = [json.loads(m.data)["trigger"] for _s, ch, m in make_reader(f).iter_messages()
                        if ch.topic == "/teleop/events"]
        assert "operator_estop" in triggers
    finally:
        hub.kill()
