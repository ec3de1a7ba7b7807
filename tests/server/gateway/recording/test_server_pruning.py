"""Pruning and who may fill the disk, on the real server, logged in (issue 18, item 9).

Pruning deleted automatic recordings first, so 25 s of a named recording by an operator without
the lease evicted the always-on file that held an incident e-stop. Now: starting (or stopping) a
recording needs the control lease; files holding safety events are kept over files that do not,
named ones going first; and a deletion by pruning is audited like one by hand (a log line and an
event in ``/api/events``, naming the file and who or what deleted it).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.server.gateway.auth.client import Client, make_users
from tests.server.gateway.recording.synthetic import write_long_recording

pytestmark = pytest.mark.timeout(240)
MiB = 1024 * 1024


async def test_an_incident_outlives_named_recordings_and_every_deletion_is_audited(server_factory, tmp_path):
    rec_dir = tmp_path / "recordings"
    # before this server: the always-on file of a run with an e-stop in it, and an older named recording
    plain = write_long_recording(rec_dir, 12, t0=1.7e9, name="left-turns")
    incident = write_long_recording(rec_dir, 30, t0=1.7e9 + 100, name=None, safety_at_s=(10.0,))
    assert plain.stat().st_size + incident.stat().st_size > MiB > incident.stat().st_size
    users = make_users(tmp_path / "users.json")
    srv = server_factory({"auth": {"users_file": str(users)}, "server": {"state_dir": str(tmp_path / "state")},
                          "recording": {"dir": str(rec_dir), "always_on": True, "budget_bytes": MiB,
                                        "flush_s": 0.2}})
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        c = Client(srv.url, http)
        olga, otto, vera, ada = [await c.login(u) for u in ("olga", "otto", "vera", "ada")]

        async def status() -> dict:
            return (await c.request("GET", "/api/recordings/status", vera))[1]

        async def events() -> list[dict]:
            return (await c.request("GET", "/api/events?limit=1000", vera))[1]["events"]

        assert (await c.request("POST", "/api/lease/take", olga, json_body={}))[0] == 200
        # an operator without the lease (and a viewer) may not start or stop a recording
        for who, code in ((otto, 409), (vera, 403)):
            for route in ("start", "stop"):
                status_code, body, _ = await c.request("POST", f"/api/recordings/{route}", who,
                                                       json_body={"name": "fill"} if route == "start" else {})
                assert status_code == code, body
        st = await status()
        assert st["state"] == "recording" and st["name"] is None      # the always-on recording goes on

        # the lease holder may: starting finishes the automatic file, and pruning makes room
        status_code, body, _ = await c.request("POST", "/api/recordings/start", olga, json_body={"name": "fill"})
        assert status_code == 200, body
        fill = body["file"]
        pruned = await wait_for_event(events, "recording_pruned")
        assert incident.exists(), "pruning deleted the recording of the incident"
        assert not plain.exists()
        assert pruned["values"]["file"] == plain.name and pruned["values"]["by"] == "pruning"
        assert pruned["values"]["named"] is True and pruned["values"]["safety_events"] == 0
        assert pruned["values"]["bytes"] > 0 and plain.name in pruned["message"]
        await asyncio.to_thread(srv.log_line, "pruned " + plain.name)

        # deleting by hand: the same trail, naming the admin
        assert (await c.request("POST", "/api/recordings/stop", olga, json_body={}))[0] == 200
        await wait_for(lambda: status(), lambda st: st["state"] == "recording" and st["file"] != fill)
        status_code, body, _ = await c.request("DELETE", f"/api/recordings/{fill}", ada)
        assert status_code == 200, body
        deleted = await wait_for_event(events, "recording_deleted")
        assert deleted["values"]["file"] == fill and deleted["values"]["by"] == "ada" and "ada" in deleted["message"]
        await asyncio.to_thread(srv.log_line, lambda line: f"recording {fill}" in line and "deleted by ada" in line)
        assert incident.exists()


async def wait_for(get, ok, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = await get()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"timed out; last: {value}"
        await asyncio.sleep(0.1)


async def wait_for_event(events, trigger: str) -> dict:
    found = await wait_for(events, lambda evs: any(e["trigger"] == trigger for e in evs))
    return next(e for e in found if e["trigger"] == trigger)
