"""The telemetry websocket with two independent clients: aiohttp's and the `websockets` library."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import aiohttp
import pytest
import websockets

from tests.conftest import ServerProc, module_server, next_of, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory) -> ServerProc:
    """One idle server for the tests that only read and ping (none starts the robot or stops the server)."""
    srv = module_server(tmp_path_factory)
    yield srv
    srv.kill()


def test_hello_then_snapshots_with_increasing_seq(idle_server: ServerProc) -> None:
    server = idle_server
    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            hello = await next_of(ws, "hello")
            assert hello["robot"]["profile"] == "rover" and hello["robot"]["channels"]
            seqs, times = [], []
            for _ in range(10):
                t = await next_of(ws, "telemetry")
                seqs.append(t["data"]["seq"])
                times.append(t["data"]["t"])
                assert "loop" in t["data"] and "values" in t["data"]
            assert seqs == sorted(seqs) and len(set(seqs)) == 10
            assert times == sorted(times)
    asyncio.run(go())


def test_plain_and_compressed_clients_get_the_same_snapshots(idle_server: ServerProc) -> None:
    """An idle client without compression gets the shared frame written to its socket; one that negotiated
    permessage-deflate gets its own compressed messages from its writer task. Both must read valid telemetry
    in order, with the control messages (hello, acks) never cut into a frame."""
    server = idle_server

    async def read(ws, n: int) -> list[int]:
        seqs = []
        while len(seqs) < n:
            t = await next_of(ws, "telemetry")
            assert t["dropped"] >= 0 and "values" in t["data"]
            seqs.append(t["data"]["seq"])
        return seqs

    async def go() -> None:
        async with aiohttp.ClientSession() as s, \
                s.ws_connect(server.ws_url + "/ws/telemetry") as plain, \
                s.ws_connect(server.ws_url + "/ws/telemetry", compress=15) as deflated:
            assert not plain.compress and deflated.compress == 15
            for ws in (plain, deflated):
                await next_of(ws, "hello")
            a, b = await asyncio.gather(read(plain, 30), read(deflated, 30))
            for seqs in (a, b):
                assert seqs == sorted(seqs) and len(set(seqs)) == 30
            await plain.send_str(json.dumps({"type": "ping", "id": 7, "t": 1.5}))
            assert (await next_of(plain, "pong"))["t"] == 1.5
            assert (await next_of(plain, "telemetry"))["data"]["seq"] > a[-1]
            _, stats = server.get("/api/telemetry")
            by_compression = {c["compressed"]: c for c in stats["per_client"]}
            assert by_compression[False]["direct"] > 0  # the shared frame
            assert by_compression[True]["direct"] == 0 and by_compression[True]["sent"] >= 30  # its own
    asyncio.run(go())


def test_commands_over_ws_with_acks_and_pong(server: ServerProc) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            await ws.send_str(json.dumps({"type": "start", "id": 1}))
            ack = await next_of(ws, "ack")
            assert ack["id"] == 1 and ack["state"] == "running"
            await ws.send_str(json.dumps({"type": "speed", "id": "s1", "linear": 0.3, "angular": 0.0}))
            ack = await next_of(ws, "ack")
            assert ack["id"] == "s1"
            await ws.send_str(json.dumps({"type": "ping", "t": 123.5}))
            pong = await next_of(ws, "pong")
            assert pong["t"] == 123.5 and pong["server_t"] > 1e9
            for _ in range(200):  # keep the link alive over the socket until the rover moves
                await ws.send_str(json.dumps({"type": "heartbeat"}))
                t = await next_of(ws, "telemetry")
                if (t["data"]["values"]["linear_m_s"] or 0) > 0.1:
                    break
            else:
                raise AssertionError("rover did not move")
            await ws.send_str(json.dumps({"type": "estop", "id": 9}))
            seen: dict[str, dict] = {}
            while not ("ack" in seen and "event" in seen):  # the event may come first: the state changed, then the reply
                msg = json.loads((await asyncio.wait_for(ws.receive(), 5)).data)
                seen.setdefault(msg["type"], msg)
            assert seen["ack"]["state"] == "estop"
            assert seen["event"]["data"]["trigger"] in ("operator_estop", "outputs_zero")
    asyncio.run(go())


def test_independent_websockets_client(idle_server: ServerProc) -> None:
    server = idle_server
    async def go() -> None:
        async with websockets.connect(server.ws_url + "/ws/telemetry") as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert hello["type"] == "hello"
            await ws.send(json.dumps({"type": "speed", "linear": 0.1, "angular": 0.0, "id": 3}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if msg["type"] == "error":
                    assert msg["id"] == 3 and msg["error"]["code"] == "not_running"
                    break
            snap = None
            while snap is None:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                snap = msg["data"] if msg["type"] == "telemetry" else None
            assert snap["state"] == "idle"
        # clean close: the server saw a normal close and dropped the client
    asyncio.run(go())
    wait_until(lambda: server.get("/api/telemetry")[1]["clients"] == 0, 5, "client removed")


def test_stuck_client_does_not_delay_others(server: ServerProc) -> None:
    """A client that never reads fills its socket; another client keeps receiving every snapshot."""
    stuck = socket.create_connection(("127.0.0.1", server.port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(
        b"GET /ws/telemetry HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )

    async def fast_client() -> tuple[int, int, int]:
        """Read every snapshot until the server reports drops for the stuck client."""
        received = 0
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            first = (await next_of(ws, "telemetry"))["dropped"]
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                t = await next_of(ws, "telemetry")
                received += 1
                if received % 25 == 0:
                    async with s.get(server.url + "/api/telemetry") as r:
                        stats = await r.json()
                    if max(c["dropped"] for c in stats["per_client"]) > 20:
                        return first, t["dropped"], received
        raise AssertionError("the stuck client never dropped a snapshot")

    try:
        wait_until(lambda: server.get("/api/telemetry")[1]["clients"] >= 1, 5, "stuck client registered")
        first, last, received = asyncio.run(fast_client())
        assert received > 0
        assert last - first <= 5, (first, last)  # the reading client lost (almost) nothing meanwhile
    finally:
        stuck.close()


def test_server_shutdown_closes_with_going_away(server: ServerProc) -> None:
    async def go() -> int:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            await next_of(ws, "hello")
            server.proc.send_signal(15)
            while True:
                msg = await asyncio.wait_for(ws.receive(), 10)
                if msg.type == aiohttp.WSMsgType.CLOSE:
                    # the code the server sent (ws.close_code may turn into 1006 when the server has
                    # gone before our close reply reaches it)
                    return msg.data
                if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    return ws.close_code
    assert asyncio.run(go()) == 1001
    assert server.proc.wait(10) == 0
