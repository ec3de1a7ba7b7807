"""The e-stop is never refused (issue 8, item 2): any body, any content type, any size, over HTTP
and over the websocket, even from a client that is over its rate limit.

Before: ``{"foo": 1}`` → 422, a 201-character reason → 422, a malformed body → 400, 20 KiB →
413, 5000-deep nesting → 500, and each time the robot kept moving.
"""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest

from tests.conftest import ServerProc, wait_until
from tests.server.test_stop_paths import events

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    import tomllib

    import tomli_w

    from tests.conftest import REPO, TEST_DEFAULTS, deep_merge

    base = tomllib.loads((REPO / "config/rover-sim.toml").read_text())
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), {"safety": {"command_timeout_s": 60.0}})
    path = tmp_path_factory.mktemp("cfg") / "estop.toml"
    path.write_text(tomli_w.dumps(cfg))
    proc = ServerProc(path).start()
    yield proc
    proc.kill()


def running(srv: ServerProc) -> None:
    """Reset whatever latched and drive slowly again."""
    if srv.state()["state"] in ("estop", "fault"):
        wait_until(lambda: srv.post("/api/reset")[0] == 200, 5, "reset")
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/speed", {"linear": 0.05, "angular": 0.0})[0] == 200
    assert srv.state()["state"] == "running"


def latched_by_operator(srv: ServerProc) -> None:
    s = srv.state()
    assert s["state"] == "estop" and s["cause"]["trigger"] == "operator_estop", s["cause"]
    assert s["setpoint"]["linear"] == 0.0 and s["command"]["linear"] == 0.0
    zero = events(srv, "outputs_zero")[-1]
    assert zero["values"]["trigger"] == "operator_estop"


HTTP_BODIES = [
    ("no body", b"", {}),
    ("unknown field", b'{"foo": 1}', {}),
    ("reason too long", json.dumps({"reason": "r" * 201}).encode(), {}),
    ("reason not a string", b'{"reason": 5}', {}),
    ("malformed", b"{not json", {}),
    ("20 KiB", json.dumps({"reason": "x", "pad": "p" * 20480}).encode(), {}),
    ("5000-deep nesting", b"[" * 5000 + b"]" * 5000, {}),
    ("huge integer", b'{"reason": 1' + b"0" * 400 + b"}", {}),
    ("text/plain", b'{"reason": "plain"}', {"content-type": "text/plain"}),
    ("form", b"reason=form", {"content-type": "application/x-www-form-urlencoded"}),
    ("garbage bytes", bytes(range(256)) * 4, {"content-type": "application/octet-stream"}),
]


@pytest.mark.parametrize("name, raw, headers", HTTP_BODIES, ids=[b[0] for b in HTTP_BODIES])
def test_http_estop_latches_whatever_the_body(srv: ServerProc, name: str, raw: bytes, headers: dict) -> None:
    running(srv)
    status, body = srv.request("POST", "/api/estop", raw=raw, headers=headers)
    assert status == 200, body
    assert body["ok"] is True and body["state"] == "estop"
    latched_by_operator(srv)
    if name not in ("no body", "text/plain"):
        assert body.get("warning"), body  # the answer says what was ignored or replaced


def test_http_estop_keeps_a_good_reason(srv: ServerProc) -> None:
    running(srv)
    status, body = srv.post("/api/estop", {"reason": "dog on the track"})
    assert status == 200 and "warning" not in body
    assert srv.state()["cause"]["message"].endswith("dog on the track")
    assert events(srv, "estop_reason")[-1]["values"]["reason"] == "dog on the track"


def test_http_estop_latches_before_a_slow_body_arrives(srv: ServerProc) -> None:
    """Headers announce a body that never comes: the stop does not wait for it."""
    running(srv)
    with socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(b"POST /api/estop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"reason\"")
        wait_until(lambda: srv.state()["state"] == "estop", 3, "e-stop latched while the body is pending")
    latched_by_operator(srv)


WS_MESSAGES = [
    ('{"type": "estop"}', False),
    ('{"type": "estop", "foo": 1}', True),
    ('{"type": "estop", "reason": 5}', True),
    ('{"type": "estop", "reason": "' + "r" * 201 + '"}', True),
    ('{"type": "estop", "id": {"nested": true}}', False),
    ('{"type": "estop", "reason": "x",', True),  # truncated: not JSON, still an e-stop
    ('{"type": "estop", "pad": "' + "p" * 20480 + '"}', True),  # over the 16 KiB command limit
]


async def _ws_send(url: str, text: str) -> dict:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url + "/ws/telemetry") as ws:
            await ws.send_str(text)
            while True:
                msg = await asyncio.wait_for(ws.receive(), 5)
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                data = json.loads(msg.data)
                if data["type"] in ("ack", "error"):
                    return data


@pytest.mark.parametrize("text, warned", WS_MESSAGES, ids=[f"ws-{i}" for i in range(len(WS_MESSAGES))])
def test_ws_estop_latches_whatever_else_it_carries(srv: ServerProc, text: str, warned: bool) -> None:
    running(srv)
    reply = asyncio.run(_ws_send(srv.ws_url, text))
    assert reply["type"] == "ack" and reply["command"] == "estop" and reply["state"] == "estop", reply
    assert bool(reply.get("warning")) == warned, reply
    latched_by_operator(srv)


def test_ws_estop_gets_through_a_rate_limited_client(srv: ServerProc) -> None:
    """A client that spent its whole burst is refused everything but the e-stop."""
    running(srv)

    async def go() -> dict:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(srv.ws_url + "/ws/telemetry") as ws:
                for _ in range(300):  # over the default burst of 200
                    await ws.send_str('{"type": "heartbeat"}')
                await ws.send_str('{"type": "estop", "id": "stop-now"}')
                refused = False
                while True:
                    data = json.loads((await asyncio.wait_for(ws.receive(), 5)).data)
                    if data["type"] == "error" and data["error"]["code"] == "rate_limited":
                        refused = True
                    if data["type"] == "ack" and data.get("id") == "stop-now":
                        assert refused, "the flood was rate limited"
                        return data

    assert asyncio.run(go())["state"] == "estop"
    latched_by_operator(srv)
