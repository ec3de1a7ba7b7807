"""One viewer session cannot take every stream slot (issue 18, item 5): telemetry sockets, video viewers
and vision overlays, through one admission policy (``server/gateway/admission.py``), on the real server.

Until then 100 sockets from one viewer session took every telemetry slot (and the 20 video and 20
overlay ones) and the operators' dashboards got 503 ``busy`` until it let go. Here: a viewer session
opens 100 of each and gets its per-session share; an operator still gets telemetry, video and
overlays; the per-address limit counts within a tier; the reserves keep slots for operators and for
the lease holder; a closed socket frees its slot; and in local mode (no sessions) only the total holds.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.conftest import ServerProc, wait_until
from tests.server.gateway.auth.client import Client, Creds, make_users

pytestmark = pytest.mark.timeout(240)


def start(server_factory, tmp_path, users: dict[str, str], **tables: Any) -> ServerProc:
    path = make_users(tmp_path / "users.json", users)
    return server_factory({"auth": {"users_file": str(path)}, "server": {"state_dir": str(tmp_path / "state")},
                           **tables})


async def open_many(client: Client, creds: Creds | None, path: str, n: int) -> tuple[list, list[int]]:
    """Try ``n`` sockets on ``path``: (the open ones, the refused statuses)."""
    held, refused = [], []
    for _ in range(n):
        ws = await client.ws(creds, path=path)
        (refused if isinstance(ws, int) else held).append(ws)
    return held, refused


async def refusal(client: Client, creds: Creds | None, path: str = "/ws/telemetry") -> dict:
    """The JSON body of a refused upgrade (a plain GET with the upgrade headers)."""
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    status, body, _ = await client.request("GET", path, creds, origin=client.origin, headers=headers)
    assert status == 503, (status, body)
    return body["error"]


async def first_message(ws: aiohttp.ClientWebSocketResponse, want) -> Any:
    async with asyncio.timeout(30):
        while True:
            msg = await ws.receive()
            assert msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), msg
            if want(msg):
                return msg


def kind(name: str):
    return lambda msg: msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == name


async def close_all(sockets) -> None:
    for ws in sockets:
        await ws.close()


VISION = {"video": {"enabled": True, "width": 160, "height": 120, "fps": 5, "render_process": False},
          "vision": {"enabled": True}}


async def test_one_viewer_session_with_100_sockets_leaves_the_operator_telemetry_video_and_overlays(
        server_factory, tmp_path) -> None:
    srv = start(server_factory, tmp_path, {"vera": "viewer", "otto": "operator"}, **VISION)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        client = Client(srv.url, http)
        vera, otto = await client.login("vera"), await client.login("otto")
        wait_until(lambda: srv.get("/api/vision", headers={"Cookie": vera.cookie})[1]["running"], 60,
                   "the vision pipeline running")
        crowd = []
        try:
            for path, share in (("/ws/telemetry", 8), ("/ws/video", 4), ("/ws/vision", 4)):
                held, refused = await open_many(client, vera, path, 100)
                crowd += held
                assert len(held) == share and set(refused) == {503}, (path, len(held), set(refused))
            assert "max_per_session" in (await refusal(client, vera))["message"]
            mine = [await client.ws(otto, path=p) for p in ("/ws/telemetry", "/ws/video", "/ws/vision")]
            assert not [ws for ws in mine if isinstance(ws, int)], mine
            telemetry, video, overlay = mine
            await first_message(telemetry, kind("telemetry"))
            await first_message(video, lambda msg: msg.type == aiohttp.WSMsgType.BINARY)  # a JPEG frame
            await first_message(overlay, kind("vision_status"))
            await close_all(mine)
        finally:
            await close_all(crowd)


TIGHT = {"telemetry": {"max_clients": 10, "max_per_session": 3, "max_per_address": 5, "reserved_for_lease": 1,
                       "reserved_for_operators": 2}}


async def test_limits_per_session_per_address_within_a_tier_and_reserves_for_operators_and_the_holder(
        server_factory, tmp_path) -> None:
    srv = start(server_factory, tmp_path, {"vera": "viewer", "otto": "operator", "olga": "operator"}, **TIGHT)
    other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http, \
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), connector=other) as http2:
        here, there = Client(srv.url, http), Client(srv.url, http2)
        vera_a, vera_b, vera_c = [await here.login("vera") for _ in range(3)]
        vera_d = await there.login("vera")  # the same viewer from another address
        otto, olga = await here.login("otto"), await here.login("olga")
        held = []
        try:
            got, _ = await open_many(here, vera_a, "/ws/telemetry", 3)
            held += got
            assert "telemetry.max_per_session" in (await refusal(here, vera_a))["message"]
            got, _ = await open_many(here, vera_b, "/ws/telemetry", 2)
            held += got
            assert len(held) == 5
            why = (await refusal(here, vera_c))["message"]  # 5 viewer sockets from 127.0.0.1
            assert "telemetry.max_per_address" in why and "viewers" in why, why
            got, _ = await open_many(there, vera_d, "/ws/telemetry", 2)  # viewers may hold 10 - 1 - 2 = 7
            held += got
            assert len(held) == 7
            why = (await refusal(there, vera_d))["message"]
            assert "open to viewers are taken" in why and "kept for operators and the lease holder" in why, why
            got, _ = await open_many(here, otto, "/ws/telemetry", 2)  # the address's viewers do not count for him
            held += got
            assert len(held) == 9
            why = (await refusal(here, olga))["message"]  # operators may hold 10 - 1 = 9
            assert "open to operators are taken" in why and "kept for the lease holder" in why, why
            assert (await here.request("POST", "/api/lease/take", olga, json_body={}))[0] == 200
            got, _ = await open_many(here, olga, "/ws/telemetry", 1)  # the holder gets the last slot
            held += got
            assert len(held) == 10
            assert "all 10 telemetry sockets are taken" in (await refusal(here, olga))["message"]
            await held.pop(0).close()  # a closed socket frees its slot (once the server has seen the close)
            async with asyncio.timeout(20):
                while True:
                    ws = await here.ws(olga)
                    if not isinstance(ws, int):
                        break
                    await asyncio.sleep(0.05)
            held.append(ws)
        finally:
            await close_all(held)


async def test_in_local_mode_only_the_total_applies(server_factory, tmp_path) -> None:
    """Without sessions every loopback client is the one admin: nobody to tell apart, so the per-session
    and per-address limits do not apply; the total does, as before."""
    srv = server_factory({"telemetry": {"max_clients": 5, "max_per_session": 1, "max_per_address": 1,
                                        "reserved_for_lease": 0, "reserved_for_operators": 0}})
    async with aiohttp.ClientSession() as http:
        client = Client(srv.url, http)
        held, refused = await open_many(client, None, "/ws/telemetry", 7)
        try:
            assert len(held) == 5 and refused == [503, 503]
            why = (await refusal(client, None))["message"]
            assert "all 5 telemetry sockets are taken (max 5: telemetry.max_clients)" in why, why
            slots = srv.get("/api/telemetry")[1]["slots"]["telemetry"]
            assert slots["held"] == 5 and slots["holders"] == 5
        finally:
            await close_all(held)
