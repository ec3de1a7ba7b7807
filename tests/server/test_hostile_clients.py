"""Hostile clients cannot starve the server, hold its slots or grow its memory (issue 8, items 3, 7–9).

Each test plays the attacker with raw sockets where a well-behaved client library would hide
the attack (a websocket that never reads, headers sent one byte at a time).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time

import aiohttp
import pytest

from tests.conftest import ServerProc, wait_until

pytestmark = pytest.mark.timeout(120)

#: with only 2 or 3 slots, none kept for operators or the lease holder (local mode has neither anyway)
NO_RESERVES = {"reserved_for_lease": 0, "reserved_for_operators": 0}


# ---------------------------------------------------------------- a raw websocket that never reads
class RawWebSocket:
    """A websocket client on a bare socket: it sends masked frames and reads nothing after the
    handshake, with a tiny receive buffer, so the server's sends back up."""

    def __init__(self, port: int, path: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            head += chunk
        self.status = int(head.split(b" ", 2)[1])

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.frame(text))

    @staticmethod
    def frame(text: str) -> bytes:
        """A masked text frame (several of them joined go out in one write: no gap between them)."""
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            header = bytes([0x81, 0x80 | n])
        elif n < 65536:
            header = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return header + mask + masked

    def closed_by_server(self) -> bool:
        """True once the server has dropped the connection (a send fails)."""
        try:
            self.send_text('{"type": "ping", "t": 0}')
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------- item 3: command floods
def test_flooding_client_is_rate_limited_then_closed_with_1008(server: ServerProc) -> None:
    async def go() -> tuple[int, int]:
        refused = 0
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(server.ws_url + "/ws/telemetry") as ws:
                for _ in range(5000):
                    await ws.send_str('{"type": "speed", "linear": 0.1, "angular": 0}')
                while True:
                    msg = await asyncio.wait_for(ws.receive(), 10)
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        data = json.loads(msg.data)
                        if data["type"] == "error" and data["error"]["code"] == "rate_limited":
                            refused = max(refused, data["error"]["refused"])
                    elif msg.type == aiohttp.WSMsgType.CLOSE:
                        return msg.data, refused
                    elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                        return ws.close_code, refused

    code, refused = asyncio.run(go())
    assert code == 1008, code
    assert refused > 0
    assert server.get("/api/state")[0] == 200  # everyone else is served


def test_client_within_its_rate_is_never_refused(server: ServerProc) -> None:
    async def go() -> list[str]:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(server.ws_url + "/ws/telemetry") as ws:
                for i in range(150):  # inside the burst of 200
                    await ws.send_str(json.dumps({"type": "ping", "id": i, "t": i}))
                kinds = []
                while len([k for k in kinds if k == "pong"]) < 150:
                    data = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
                    kinds.append(data["type"] if data["type"] != "error" else data["error"]["code"])
                return kinds

    assert "rate_limited" not in asyncio.run(go())


# ---------------------------------------------------------------- item 8: slots held by clients that never read
def test_telemetry_slots_of_clients_that_never_read_are_freed(server_factory) -> None:
    srv = server_factory({"telemetry": {"max_clients": 3, "send_buffer_bytes": 4096, **NO_RESERVES},
                          "server": {"writer_stall_s": 1.0}})
    hogs = [RawWebSocket(srv.port, "/ws/telemetry") for _ in range(3)]
    try:
        assert all(h.status == 101 for h in hogs)

        def dashboard_connects() -> bool:
            for h in hogs:  # they keep talking (an empty pong every few seconds in the report)
                try:
                    h.send_text('{"type": "ping", "t": 1}')
                except OSError:
                    pass
            probe = RawWebSocket(srv.port, "/ws/telemetry")
            probe.close()
            return probe.status == 101

        wait_until(dashboard_connects, 30, "a new dashboard gets a telemetry slot", interval_s=0.5)
        assert srv.get("/api/telemetry")[1]["closed_stalled"] >= 1
    finally:
        for h in hogs:
            h.close()


# ---------------------------------------------------------------- item 7: video queues and viewers
VIDEO_ON = {"video": {"enabled": True, "width": 160, "height": 120, "fps": 10, "max_viewers": 2, **NO_RESERVES},
            "server": {"writer_stall_s": 1.0}}


def test_video_junk_flood_is_closed_and_memory_stays_bounded(server_factory) -> None:
    srv = server_factory(VIDEO_ON)
    flooders = [RawWebSocket(srv.port, "/ws/video") for _ in range(2)]
    try:
        deadline = time.monotonic() + 20
        closed = [False, False]
        while not all(closed) and time.monotonic() < deadline:
            for i, f in enumerate(flooders):
                if closed[i]:
                    continue
                try:
                    for _ in range(200):
                        f.send_text('{"junk": "' + "j" * 64 + '"}')
                except OSError:
                    closed[i] = True
        assert all(closed), "the server closed both flooding viewers"
        wait_until(lambda: srv.get("/api/video")[1]["clients"] == [], 10, "viewer slots freed")
    finally:
        for f in flooders:
            f.close()


def test_video_viewers_are_capped_with_a_clear_refusal(server_factory) -> None:
    srv = server_factory(VIDEO_ON)

    async def go() -> tuple[int, dict, int]:
        async with aiohttp.ClientSession() as session:
            a = await session.ws_connect(srv.ws_url + "/ws/video")
            b = await session.ws_connect(srv.ws_url + "/ws/video")
            try:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(srv.ws_url + "/ws/video")
                async with session.get(srv.url + "/api/video/snapshot.jpg") as r:
                    assert r.status in (200, 503)  # snapshots are not viewers
                async with session.get(srv.url + "/video.mjpeg") as r:
                    body = await r.json()
                    return refused.value.status, body, r.status
            finally:
                await a.close()
                await b.close()

    ws_status, mjpeg_body, mjpeg_status = asyncio.run(go())
    assert ws_status == 503
    assert mjpeg_status == 503 and mjpeg_body["error"]["code"] == "busy" and "max 2" in mjpeg_body["error"]["message"]


def test_video_viewer_that_never_acks_is_closed(server_factory) -> None:
    srv = server_factory(VIDEO_ON)
    lazy = RawWebSocket(srv.port, "/ws/video")
    try:
        wait_until(lambda: len(srv.get("/api/video")[1]["clients"]) == 1, 10, "viewer registered")
        wait_until(lambda: srv.get("/api/video")[1]["clients"] == [], 15, "a viewer that never acks is closed")
    finally:
        lazy.close()


# ---------------------------------------------------------------- item 9: slow headers and connection caps
def test_slow_header_connection_is_closed(server_factory) -> None:
    srv = server_factory({"server": {"request_timeout_s": 1.0}})
    with socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(b"GET /api/state HTTP/1.1\r\nHo")  # and never the rest
        sock.settimeout(15)
        assert sock.recv(1024) == b""  # the server hung up


def test_a_connection_beyond_the_cap_evicts_the_oldest_silent_one(server_factory) -> None:
    srv = server_factory({"server": {"max_connections": 10, "reserved_connections": 0, "request_timeout_s": 60.0}})
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(10)]  # they never send a byte
    try:
        wait_until(lambda: srv.get("/api/state", timeout_s=5)[0] == 200, 20, "served while 10 silent sockets are open")
        socks[0].settimeout(10)
        try:
            got = socks[0].recv(1024)
        except ConnectionResetError:
            got = b""
        assert got == b"", "the oldest silent socket made room"
    finally:
        for s in socks:
            s.close()
