"""Foxglove live view: a real Foxglove-protocol websocket client subscribes and receives snapshots,
directly on the loopback server and through the gateway's authenticated relay."""

from __future__ import annotations

import asyncio
import json
import os
import struct

import pytest
import websockets
from aiohttp import web

from server.gateway.recording.live import SUBPROTOCOL, FoxgloveLive, proxy_handler
from tests.server.gateway.recording.synthetic import ROBOT, snapshot_bytes

T0 = 1_800_000_000.0


async def subscribe_and_receive(url: str, live: FoxgloveLive, headers=None) -> tuple[dict, bytes, int, int]:
    """Speak the Foxglove protocol: read serverInfo and advertise, subscribe to /teleop/telemetry,
    publish until a message frame arrives (the subscription takes effect asynchronously)."""
    async with websockets.connect(url, subprotocols=[SUBPROTOCOL], additional_headers=headers or {}) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        channels = {}
        server_info = None
        while "/teleop/telemetry" not in channels:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if msg["op"] == "serverInfo":
                server_info = msg
            elif msg["op"] == "advertise":
                channels.update({c["topic"]: c for c in msg["channels"]})
        assert server_info is not None
        tele = channels["/teleop/telemetry"]
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 42, "channelId": tele["id"]}]}))
        data = snapshot_bytes(7, T0)
        for _ in range(200):
            live.publish_snapshot(data, T0)
            try:
                frame = await asyncio.wait_for(ws.recv(), 0.05)
            except asyncio.TimeoutError:
                continue
            if isinstance(frame, bytes):
                opcode, sub_id, log_time = struct.unpack_from("<BIQ", frame)
                assert opcode == 0x01 and sub_id == 42
                return channels, frame[13:], log_time, live.subscriptions
        pytest.fail("no message data frame received")


@pytest.fixture
def live():
    srv = FoxgloveLive("127.0.0.1", 0, robot=ROBOT)
    srv.start()
    yield srv
    srv.stop()


async def test_a_foxglove_client_subscribes_and_receives_snapshots(live):
    channels, payload, log_time, subscriptions = await subscribe_and_receive(f"ws://127.0.0.1:{live.port}", live)
    assert subscriptions == 1
    assert payload == snapshot_bytes(7, T0)
    assert log_time == int(T0 * 1e9)
    tele = channels["/teleop/telemetry"]
    assert tele["encoding"] == "json" and tele["schemaName"] == "teleop.Telemetry"
    assert tele["schemaEncoding"] == "jsonschema"
    assert "battery_v" in json.loads(tele["schema"])["properties"]["values"]["properties"]
    assert set(channels) >= {"/teleop/events", "/teleop/state", "/teleop/commands", "/camera/image"}
    assert channels["/camera/image"]["schemaName"] == "foxglove.CompressedImage"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.org", "::"])
def test_non_loopback_hosts_are_refused(host):
    with pytest.raises(ValueError, match="loopback"):
        FoxgloveLive(host, 0)


async def test_the_relay_applies_the_gateway_auth(live):
    async def authorize(request: web.Request) -> None:
        if request.headers.get("Authorization") != "Bearer good":
            raise web.HTTPUnauthorized(reason="token required")

    app = web.Application()
    app.router.add_get("/foxglove", proxy_handler(live, authorize))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(websockets.exceptions.InvalidStatus) as err:
            async with websockets.connect(f"ws://127.0.0.1:{port}/foxglove", subprotocols=[SUBPROTOCOL]):
                pass
        assert err.value.response.status_code == 401
        _channels, payload, _t, subscriptions = await subscribe_and_receive(
            f"ws://127.0.0.1:{port}/foxglove", live, headers={"Authorization": "Bearer good"})
        assert payload == snapshot_bytes(7, T0) and subscriptions == 1
    finally:
        await runner.cleanup()


def test_the_live_servers_connections_do_not_wait_for_nagle(live):
    """foxglove-sdk never sets TCP_NODELAY: every few 50 Hz snapshots waited for the relay's delayed ACK
    (20–30 ms, bench_core's foxglove peer). The listener carries it, so every accepted socket does."""
    import socket

    accepted = []
    with socket.create_connection(("127.0.0.1", live.port), timeout=5) as client:
        for fd in os.listdir("/proc/self/fd"):
            try:
                sock = socket.socket(fileno=int(fd))
            except OSError:
                continue
            try:
                if sock.type == socket.SOCK_STREAM and sock.family == socket.AF_INET \
                        and sock.getsockname()[1] == live.port:
                    accepted.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            except OSError:
                pass
            finally:
                sock.detach()
        assert client.fileno() >= 0
    assert accepted and all(accepted), f"TCP_NODELAY on the live server's sockets: {accepted}"
