"""The routes behind a robot's dashboard on the hub (``/fleet/{id}/…``, server/hub/dashboard.py) on real
processes: an unknown robot is 404, a user the hub does not let view it 403 (page, API and socket), a robot
offline a clear 503, a GET the hub does not relay 404 ``not_relayed``; the lease answer names the user's hub
session so the page knows it drives; the robot's own checks (its lease) still decide."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.server.fleet.fleetkit import hub_config, hub_keys, hub_proc, login, wait
from tests.server.fleet.test_hub import FLEET, cards, robot

#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def ws_status(hub, path: str, headers: dict[str, str]) -> int | str:
    """The websocket upgrade's answer: its HTTP status when refused, ``"open"`` with a hello first."""
    async def go() -> int | str:
        async with aiohttp.ClientSession() as s:
            try:
                async with s.ws_connect(hub.url.replace("http", "ws") + path, headers=headers) as ws:
                    msg = await asyncio.wait_for(ws.receive_json(), 30)
                    return "open" if msg.get("type") == "hello" and msg.get("robot") else f"got {msg}"
            except aiohttp.WSServerHandshakeError as err:
                return err.status
    return asyncio.run(go())


def close_code_after_logout(hub, path: str, headers: dict[str, str]) -> int | None:
    """Open the socket, log the session out, and return the close code the hub sends (None: not closed). The code
    is read from the close frame itself: aiohttp's client, replying to it on its own (``autoclose``), reports 1006
    when the server has already dropped the connection by then (a race at load, seen in a fresh-clone run)."""
    async def go() -> int | None:
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(hub.url.replace("http", "ws") + path, headers=headers, autoclose=False) as ws:
                first = await asyncio.wait_for(ws.receive(), 30)  # hello, or /ws/fleet/{id}'s first snapshot
                assert first.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), first
                status, _ = await asyncio.to_thread(hub.post, "/api/auth/logout", {}, headers=headers)
                assert status == 200
                deadline = asyncio.get_running_loop().time() + 30
                while asyncio.get_running_loop().time() < deadline:
                    msg = await asyncio.wait_for(ws.receive(), 30)
                    if msg.type == aiohttp.WSMsgType.CLOSE:
                        return msg.data  # the server's own code
                    if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR):
                        return ws.close_code
                return None
    return asyncio.run(go())


def test_relayed_routes_check_the_robot_the_user_and_the_link(server_factory, router, tmp_path) -> None:
    private, public = hub_keys(tmp_path)
    r1 = robot(server_factory, router, public, "r1")
    cfg = hub_config(tmp_path, router, FLEET, private, users={"alice": "operator", "val": "viewer"},
                     robots={"r1": {"view": ["alice"]}})
    hub = hub_proc(cfg).start()
    try:
        alice, val = login(hub, "alice"), login(hub, "val")
        wait(lambda: cards(hub, alice).get("r1", {}).get("online"), 120, "r1 on the hub")
        # unknown robot: 404 everywhere
        for path in ("/fleet/r9/", "/fleet/r9/api/state", "/fleet/r9/api/auth/me"):
            status, body = hub.get(path, headers=alice)
            assert status == 404 and body["error"]["code"] == "unknown_robot", (path, body)
        assert hub.post("/fleet/r9/api/start", {}, headers=alice)[0] == 404
        assert ws_status(hub, "/fleet/r9/ws/telemetry", alice) == 404
        # no view permission for r1: 403 on the page, the API and the socket
        for path in ("/fleet/r1/", "/fleet/r1/api/state", "/fleet/r1/api/robot"):
            status, body = hub.get(path, headers=val)
            assert status == 403 and body["error"]["code"] == "forbidden", (path, body)
        assert ws_status(hub, "/fleet/r1/ws/telemetry", val) == 403
        # nobody unauthenticated
        assert hub.get("/fleet/r1/api/state")[0] == 401
        # alice: the page (the robot's own dashboard with the hub's base path), the relayed reads and socket
        status, html = hub.get("/fleet/r1/", headers=alice)
        assert status == 200 and b'<meta name="api-base" content="/fleet/r1">' in html, html[:400]
        status, state = hub.get("/fleet/r1/api/state", headers=alice)
        assert status == 200 and state["state"] == "idle", state
        status, desc = hub.get("/fleet/r1/api/robot", headers=alice)
        assert status == 200 and desc["profile"], desc
        status, me = hub.get("/fleet/r1/api/auth/me", headers=alice)
        assert status == 200 and me["user"] == "alice" and me["role"] == "operator" and not me["local_mode"], me
        status, body = hub.get("/fleet/r1/api/recordings", headers=alice)
        assert status == 404 and body["error"]["code"] == "not_relayed", body
        assert ws_status(hub, "/fleet/r1/ws/telemetry", alice) == "open"
        # commands: the robot's own lease decides; the lease answer names alice's hub session as the holder
        status, body = hub.post("/fleet/r1/api/start", {}, headers=alice)
        assert status == 409 and body["error"]["code"] == "lease_required", body
        status, body = hub.post("/fleet/r1/api/lease/fly", {}, headers=alice)
        assert status == 422 and body["error"]["code"] == "unknown_op", body
        status, lease = hub.post("/fleet/r1/api/lease/take", {}, headers=alice)
        assert status == 200 and lease["you"] == "holder" and lease["holder"]["session"] == me["session"], lease
        assert r1.get("/api/lease")[1]["holder"]["user"] == "alice@hub"
        status, body = hub.post("/fleet/r1/api/speed", {"linear": float("nan"), "angular": 0}, headers=alice)
        assert status in (400, 422), body
        status, body = hub.post("/fleet/r1/api/estop", {"reason": "test"}, headers=alice)
        assert status == 200, body
        wait(lambda: r1.state()["state"] == "estop", 30, "r1 e-stopped through its relayed route")
        # a hub session that ends closes its robot sockets (4401: the page goes to the login page)
        assert close_code_after_logout(hub, "/fleet/r1/ws/telemetry", login(hub, "alice")) == 4401
        assert close_code_after_logout(hub, "/ws/fleet/r1", login(hub, "alice")) == 4401
        # the robot goes offline: a clear 503, not a timeout
        r1.kill()
        wait(lambda: cards(hub, alice)["r1"]["online"] is False, 120, "r1 offline on the hub")
        status, body = hub.get("/fleet/r1/api/state", headers=alice)
        assert status == 503 and body["error"]["code"] == "robot_offline" and "offline" in body["error"]["message"]
        assert hub.post("/fleet/r1/api/start", {}, headers=alice)[0] == 503
        assert ws_status(hub, "/fleet/r1/ws/telemetry", alice) == 503
    finally:
        hub.kill()
