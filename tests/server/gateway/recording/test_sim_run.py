"""Record a run driven in the simulator: the real server (a child process) streams telemetry and
events over its websocket; everything received is handed to the recorder as the gateway will,
and the MCAP file is checked against it with the mcap reader, then reported on."""

from __future__ import annotations

import asyncio
import json

import orjson
import websockets
from mcap.reader import make_reader

from server.gateway.recording import Recorder, RecordingConfig
from server.gateway.reports import run_report


async def test_a_driven_sim_run_round_trips_and_reports(server, tmp_path):
    _status, robot = server.get("/api/robot")
    rec = Recorder(RecordingConfig(dir=str(tmp_path / "rec"), queue_size=100_000), robot=robot)
    rec.start()
    file = rec.start_recording("sim-run")
    snapshots: list[bytes] = []
    events: list[dict] = []
    async with websockets.connect(server.ws_url + "/ws/telemetry") as ws:
        async def receive_until(pred, timeout_s=10.0):
            async def loop():
                while True:
                    msg = json.loads(await ws.recv())
                    if msg["type"] == "telemetry":
                        data = orjson.dumps(msg["data"])  # the gateway will hand over its own bytes
                        snapshots.append(data)
                        rec.record_snapshot(data, msg["data"]["t"])
                    elif msg["type"] == "event":
                        events.append(msg["data"])
                        rec.record_event(msg["data"])
                    if pred(msg):
                        return msg
            return await asyncio.wait_for(loop(), timeout_s)

        await receive_until(lambda m: m["type"] == "hello")
        for command in ({"type": "start", "id": 1}, {"type": "speed", "id": 2, "linear": 0.3, "angular": 0.2}):
            await ws.send(json.dumps(command))
            reply = await receive_until(lambda m, i=command["id"]: m.get("id") == i)
            rec.record_command(command["type"], command, accepted=reply["type"] == "ack", principal=None,
                               source="ws", state=reply.get("state"))
        # drive for a while with heartbeats, then e-stop
        for _ in range(30):
            await ws.send(json.dumps({"type": "heartbeat"}))
            await receive_until(lambda m: m["type"] == "telemetry")
        await ws.send(json.dumps({"type": "speed", "id": 3, "linear": 5.0, "angular": 0.0}))  # over the limit
        refused = await receive_until(lambda m: m.get("id") == 3)
        rec.record_command("speed", {"linear": 5.0, "angular": 0.0}, accepted=False, source="ws",
                           error=refused.get("error"))
        await ws.send(json.dumps({"type": "estop", "id": 4}))
        await receive_until(lambda m: m["type"] == "event" and m["data"]["state_after"] == "estop")
        await receive_until(lambda m: m["type"] == "telemetry" and m["data"]["state"] == "estop")
    await rec.aclose()
    assert rec.status()["dropped"] == 0 and rec.status()["error"] is None
    await asyncio.to_thread(check_file, tmp_path / "rec" / file, snapshots, events)


def read_back(path):
    with open(path, "rb") as f:
        reader = make_reader(f)
        return [(ch.topic, m.data) for _s, ch, m in reader.iter_messages(log_time_order=False)]


def check_file(path, snapshots, events):
    got = read_back(path)
    assert [d for t, d in got if t == "/teleop/telemetry"] == snapshots
    assert [json.loads(d) for t, d in got if t == "/teleop/events"] == events
    assert any(e["trigger"] == "operator" or e["state_after"] == "estop" for e in events)
    commands = [json.loads(d) for t, d in got if t == "/teleop/commands"]
    assert [(c["command"], c["accepted"]) for c in commands] == [("start", True), ("speed", True), ("speed", False)]
    assert commands[-1]["error"]["code"]

    report = run_report(path, channels=["wheel_left_rad_s", "battery_v"], plots=False)
    tracking = {t["name"]: t for t in report["tracking"]}
    assert tracking["left wheel speed"]["samples"] > 20
    assert tracking["linear speed"]["rms"] is not None and tracking["linear speed"]["rms"] < 0.3
    assert report["stats"]["battery_v"]["samples"] == len(snapshots)
