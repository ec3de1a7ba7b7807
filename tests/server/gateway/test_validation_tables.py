"""The validation tables of tests/server/test_bad_input.py, row by row, in process (issue 19 §7): the real gateway
app over real HTTP and websockets, its runtime a :class:`FakeRuntime` that records what reached it. Each bad
body gets its documented code and message and nothing but reads reaches the runtime (the real server keeps a
sample of these rows, the property test and what only the runtime decides)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from tests.server.gateway.fake_runtime import gateway
from tests.server.test_bad_input import HTTP_CASES, WS_CASES

pytestmark = pytest.mark.unit

#: what a bad command may still make the gateway ask the runtime (reads)
READS = {"state", "events", "acquisition", "loop_stats", "trajectory", "calibration", "control"}


@pytest.mark.parametrize("route, raw, status, code", HTTP_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(HTTP_CASES)])
async def test_fail__http_bad_body(tmp_path, route: str, raw: bytes, status: int, code: str) -> None:
    async with gateway(tmp_path) as (client, rt):
        r = await client.post(route, data=raw, headers={"Content-Type": "application/json"})
        body = await r.json()
        assert r.status == status, body
        assert body["error"]["code"] == code and body["error"]["message"]
        assert set(rt.methods()) <= READS, rt.calls


@pytest.mark.parametrize("text, code", WS_CASES, ids=[f"ws-{i}" for i in range(len(WS_CASES))])
async def test_fail__ws_bad_message(tmp_path, text: str, code: str) -> None:
    async with gateway(tmp_path) as (client, rt):
        async with client.ws_connect("/ws/telemetry") as ws:
            await ws.send_str(text)
            while True:
                msg = await asyncio.wait_for(ws.receive(), 10)
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                data = json.loads(msg.data)
                if data["type"] == "error":
                    break
            assert data["error"]["code"] == code and data["error"]["message"]
            assert not ws.closed  # errors never close the socket
        assert set(rt.methods()) <= READS, rt.calls
