"""The /api/recordings routes on a real aiohttp server (ephemeral port) with a real recorder."""

from __future__ import annotations

import asyncio
import csv
import io

import aiohttp
import pytest
from aiohttp import web
from mcap.reader import make_reader

from server.gateway.http import error_middleware
from server.gateway.recording import Recorder, RecordingConfig
from server.gateway.recording.reader import has_footer
from server.gateway.recording.routes import setup_recording_routes
from tests.server.gateway.recording.synthetic import ROBOT, record_run

T0 = 1_800_000_000.0


@pytest.fixture
async def served(tmp_path):
    rec = Recorder(RecordingConfig(dir=str(tmp_path), flush_s=0.05, queue_size=100_000), robot=ROBOT)
    rec.start()

    async def admin_only(request: web.Request) -> None:
        if request.headers.get("X-Role") != "admin":
            raise web.HTTPForbidden(reason="admin only")

    app = web.Application(middlewares=[error_middleware])
    setup_recording_routes(app, tmp_path, rec, authorize_admin=admin_only)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        yield session, rec, tmp_path
    await runner.cleanup()
    await rec.aclose()


async def start_and_record(session, rec, name="run1", n=200):
    r = await session.post("/api/recordings/start", json={"name": name})
    assert r.status == 200
    file = (await r.json())["file"]
    record_run(rec, n, T0)
    r = await session.post("/api/recordings/stop")
    assert r.status == 200
    for _ in range(1000):  # the stop is done when the file has its footer
        if has_footer(rec.dir / file) and rec.status()["state"] == "idle":
            break
        await asyncio.sleep(0.01)
    assert rec.status()["state"] == "idle"
    return file


async def test_start_list_download_csv_report_delete(served):
    session, rec, d = served
    file = await start_and_record(session, rec)
    r = await session.get("/api/recordings")
    body = await r.json()
    (item,) = body["recordings"]
    assert item["file"] == file and item["name"] == "run1" and item["counts"]["/teleop/telemetry"] == 200
    assert body["status"]["state"] == "idle"

    r = await session.get(f"/api/recordings/{file}")
    assert r.status == 200 and r.headers["Content-Disposition"] == f'attachment; filename="{file}"'
    data = await r.read()
    reader = make_reader(io.BytesIO(data))
    assert reader.get_summary().statistics.message_count == item["counts"]["/teleop/telemetry"] + 6

    r = await session.get(f"/api/recordings/{file}/csv", params={"columns": "battery_v,state",
                                                                 "start_t": str(T0), "end_t": str(T0 + 1)})
    assert r.status == 200 and r.content_type == "text/csv"
    rows = list(csv.reader(io.StringIO(await r.text())))
    assert rows[0] == ["t", "battery_v", "state"] and len(rows) == 51

    r = await session.get(f"/api/recordings/{file}/report", params={"channels": "battery_v,linear_m_s"})
    rep = await r.json()
    assert set(rep["stats"]) == {"battery_v", "linear_m_s"} and rep["plots"] == {}
    assert {t["name"] for t in rep["tracking"] if t["samples"]} >= {"left wheel speed", "linear speed"}

    r = await session.get(f"/api/recordings/{file}/report.html")
    assert r.status == 200 and "<svg" in await r.text()

    r = await session.get(f"/api/recordings/{file}/events")
    assert len((await r.json())["events"]) == 2

    r = await session.delete(f"/api/recordings/{file}")
    assert r.status == 403
    r = await session.delete(f"/api/recordings/{file}", headers={"X-Role": "admin"})
    assert r.status == 200 and not (d / file).exists()


async def test_deleting_the_active_recording_is_refused(served):
    session, rec, d = served
    r = await session.post("/api/recordings/start", json={"name": "active"})
    file = (await r.json())["file"]
    record_run(rec, 10, T0)
    for _ in range(500):
        if rec.status()["state"] == "recording" and (d / file).exists():
            break
        await asyncio.sleep(0.01)
    r = await session.get("/api/recordings")
    (item,) = (await r.json())["recordings"]
    assert item["active"] is True
    r = await session.delete(f"/api/recordings/{file}", headers={"X-Role": "admin"})
    assert r.status == 409 and (await r.json())["error"]["code"] == "recording_active"
    assert (d / file).exists()


@pytest.mark.parametrize("path,status,code", [
    ("/api/recordings/nope.mcap", 404, "not_found"),
    ("/api/recordings/..%2F..%2Fetc%2Fpasswd", 422, "invalid"),
    ("/api/recordings/.recorder.lock", 422, "invalid"),
    ("/api/recordings/x.txt/csv?columns=a", 422, "invalid"),
])
async def test_bad_file_names_are_refused(served, path, status, code):
    session, _rec, _d = served
    r = await session.get(path)
    assert r.status == status
    assert (await r.json())["error"]["code"] == code


@pytest.mark.parametrize("params,code,fragment", [
    ({}, "missing_field", "columns is required"),
    ({"columns": "nope"}, "invalid", "unknown channel 'nope'"),
    ({"columns": "battery_v", "start_t": "soon"}, "wrong_type", "start_t"),
    ({"columns": "battery_v", "start_t": "nan"}, "not_finite", "start_t"),
    ({"columns": ",".join(["battery_v"] * 65)}, "out_of_limits", "at most 64"),
])
async def test_bad_csv_requests_name_what_was_wrong(served, params, code, fragment):
    session, rec, _d = served
    file = await start_and_record(session, rec, "csv", 20)
    r = await session.get(f"/api/recordings/{file}/csv", params=params)
    assert r.status == 422
    err = (await r.json())["error"]
    assert err["code"] == code and fragment in err["message"]


@pytest.mark.parametrize("body,status,code", [({"name": "../x"}, 422, "invalid"),
                                              ({"name": "ok", "extra": 1}, 422, "unknown_field"),
                                              ([1, 2], 400, "malformed")])
async def test_bad_start_requests_change_nothing(served, body, status, code):
    session, rec, d = served
    r = await session.post("/api/recordings/start", json=body)
    assert r.status == status and (await r.json())["error"]["code"] == code
    assert rec.status()["state"] == "idle" and list(d.glob("*.mcap")) == []


@pytest.fixture
async def replay_served(tmp_path):
    from server.gateway.recording.replay import FakeClock, ReplaySource
    from server.gateway.recording.routes import setup_replay_routes
    rec = Recorder(RecordingConfig(dir=str(tmp_path), queue_size=100_000), robot=ROBOT)
    rec.start()
    rec.start_recording("replay")
    record_run(rec, 500, T0)
    rec.close()
    (path,) = tmp_path.glob("*.mcap")
    clock = FakeClock()
    source = ReplaySource(path, clock=clock)
    app = web.Application(middlewares=[error_middleware])
    setup_replay_routes(app, source)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        yield session, source, clock
    await runner.cleanup()
    source.close()


async def test_replay_controls(replay_served):
    session, source, clock = replay_served
    st = await (await session.get("/api/replay")).json()
    assert st["playing"] is False and st["start_t"] == pytest.approx(T0)
    assert (await (await session.post("/api/replay/play")).json())["playing"] is True
    clock.advance(2.0)
    st = await (await session.post("/api/replay/pause")).json()
    assert st["playing"] is False and st["position_t"] == pytest.approx(T0 + 2.0)
    st = await (await session.post("/api/replay/seek", json={"offset_s": 5.0})).json()
    assert st["position_t"] == pytest.approx(T0 + 5.0)
    st = await (await session.post("/api/replay/speed", json={"speed": 4})).json()
    assert st["speed"] == 4.0


@pytest.mark.parametrize("route,body,status,code", [
    ("seek", {}, 422, "missing_field"),
    ("seek", {"t": "x"}, 422, "wrong_type"),
    ("seek", {"t": 1, "offset_s": 2}, 422, "unknown_field"),
    ("speed", {"speed": 0}, 422, "out_of_limits"),
    ("speed", {"speed": 1e9}, 422, "out_of_limits"),
    ("speed", {"speed": 1, "x": 2}, 422, "unknown_field"),
    ("speed", [1], 400, "malformed"),
])
async def test_bad_replay_requests_change_nothing(replay_served, route, body, status, code):
    session, source, _clock = replay_served
    before = source.status()
    r = await session.post(f"/api/replay/{route}", json=body)
    assert r.status == status and (await r.json())["error"]["code"] == code
    assert source.status() == before


def test_replay_refusal_is_a_409():
    from server.gateway.recording.routes import replay_refusal
    err = replay_refusal("speed")
    assert err.status == 409 and err.code == "replay" and "speed refused" in err.message
