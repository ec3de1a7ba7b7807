"""Bad input gets a clear error and changes nothing: HTTP and websocket, table-driven and property-based."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ServerProc

pytestmark = pytest.mark.timeout(120)

BIG = "x" * (17 * 1024)

# (route, raw body, status, error code)
HTTP_CASES = [
    ("/api/speed", b"", 400, "malformed"),
    ("/api/speed", b"not json", 400, "malformed"),
    ("/api/speed", b"[1, 2]", 400, "malformed"),
    ("/api/speed", b'"speed"', 400, "malformed"),
    ("/api/speed", b'{"linear": NaN, "angular": 0}', 400, "malformed"),
    ("/api/speed", b'{"linear": Infinity, "angular": 0}', 400, "malformed"),
    ("/api/speed", b'{"linear": 1e999, "angular": 0}', 422, "not_finite"),
    ("/api/speed", b'{"linear": "fast", "angular": 0}', 422, "wrong_type"),
    ("/api/speed", b'{"linear": true, "angular": 0}', 422, "wrong_type"),
    ("/api/speed", b'{"linear": null, "angular": 0}', 422, "wrong_type"),
    ("/api/speed", b'{"linear": [0.1], "angular": 0}', 422, "wrong_type"),
    ("/api/speed", b'{"angular": 0}', 422, "missing_field"),
    ("/api/speed", b'{"linear": 0.1}', 422, "missing_field"),
    ("/api/speed", b'{"linear": 0.6, "angular": 0}', 422, "out_of_limits"),
    ("/api/speed", b'{"linear": -0.6, "angular": 0}', 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": 99}', 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": 0, "ttl_s": 0}', 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": 0, "ttl_s": 1e6}', 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": 0, "turbo": 1}', 422, "unknown_field"),
    ("/api/speed", ('{"linear": 0.1, "angular": 0, "pad": "%s"}' % BIG).encode(), 413, "too_large"),
    ("/api/start", b'{"now": true}', 422, "unknown_field"),
    ("/api/start", b"{", 400, "malformed"),
    ("/api/reset", b"[]", 400, "malformed"),
    ("/api/heartbeat", b'{"x": 1}', 422, "unknown_field"),
    ("/api/fly", b"{}", 404, "not_found"),
    # integers of hundreds of digits and JSON nested thousands deep (were 500s)
    ("/api/speed", b'{"linear": 1' + b"0" * 400 + b', "angular": 0}', 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": -1' + b"0" * 400 + b"}", 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": 0, "ttl_s": 9' + b"9" * 400 + b"}", 422, "out_of_limits"),
    ("/api/speed", b'{"linear": 0.1, "angular": 0, "ttl_s": 1' + b"0" * 5000 + b"}", 400, "malformed"),
    ("/api/speed", b"[" * 5000 + b"]" * 5000, 400, "malformed"),
    ("/api/speed", b'{"linear": ' + b'{"a":' * 2500 + b"1" + b"}" * 2501, 400, "malformed"),
    ("/api/heading", b'{"heading_deg": 1' + b"0" * 400 + b"}", 422, "out_of_limits"),
]

PUT_ACQ_CASES = [
    (b'{"rate_hz": 0, "channels": ["battery_v"]}', 422),
    (b'{"rate_hz": -5, "channels": []}', 422),
    (b'{"rate_hz": 5000, "channels": []}', 422),
    (b'{"rate_hz": "fast", "channels": []}', 422),
    (b'{"rate_hz": 50, "channels": "battery_v"}', 422),
    (b'{"rate_hz": 50, "channels": ["nope"]}', 422),
    (b'{"rate_hz": 50, "channels": [1, 2]}', 422),
    (b'{"rate_hz": 50}', 422),
    (b'{"rate_hz": 50, "channels": [], "extra": 1}', 422),
    (b'{"rate_hz": 50, "channels": ["battery_v"]}', 422),  # drops channels that feed safety rules
    (b"nope", 400),
    (b'{"rate_hz": 1' + b"0" * 400 + b', "channels": []}', 422),
    (b"{" * 5000, 400),
]


def robot_state(srv: ServerProc) -> dict:
    s = srv.state()
    return {k: s[k] for k in ("state", "cause", "setpoint")}


@pytest.fixture(scope="module")
def running_server(tmp_path_factory):
    """One server for the whole table, running, with a long link timeout so it stays running."""
    from tests.conftest import module_server

    srv = module_server(tmp_path_factory, {"safety": {"command_timeout_s": 60.0}})
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/speed", {"linear": 0.05, "angular": 0.0})[0] == 200
    yield srv
    srv.kill()


#: the rows the real server answers too (every row runs in process: tests/server/gateway/test_validation_tables.py)
REAL_SAMPLE = [HTTP_CASES[i] for i in (1, 6, 13, 19, 20, len(HTTP_CASES) - 1)]


@pytest.mark.parametrize("route, raw, status, code", REAL_SAMPLE, ids=[f"{c[0]}-{i}" for i, c in enumerate(REAL_SAMPLE)])
def test_fail__http_bad_body(running_server: ServerProc, route: str, raw: bytes, status: int, code: str) -> None:
    before = robot_state(running_server)
    got, body = running_server.request("POST", route, raw=raw)
    assert got == status, body
    assert body["error"]["code"] == code and body["error"]["message"]
    assert robot_state(running_server) == before


@pytest.mark.parametrize("raw, status", PUT_ACQ_CASES)
def test_fail__acquisition_bad_body(running_server: ServerProc, raw: bytes, status: int) -> None:
    before = running_server.get("/api/acquisition")[1]
    got, body = running_server.request("PUT", "/api/acquisition", raw=raw)
    assert got == status and body["error"]["message"], body
    assert running_server.get("/api/acquisition")[1] == before


def test_ok__acquisition_change_is_applied(server: ServerProc) -> None:
    status, acq = server.get("/api/acquisition")
    assert status == 200
    keep = [c for c in acq["available"] if not c.startswith("encoder")]
    status, body = server.put("/api/acquisition", {"rate_hz": 50, "channels": keep})
    assert status == 200, body
    assert body["rate_hz"] == 50 and body["channels"] == keep
    from tests.conftest import wait_until

    wait_until(lambda: "encoder_left_ticks" not in server.state()["values"], 5, "encoder channel inactive")


def test_fail__wrong_method_and_unknown_route(running_server: ServerProc) -> None:
    status, body = running_server.get("/api/start")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"
    status, body = running_server.get("/api/nothing-here")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = running_server.get("/api/events?limit=abc")
    assert status == 422


WS_CASES = [
    ("not json", "malformed"),
    ("[]", "malformed"),
    ('{"linear": 0.1}', "missing_field"),
    ('{"type": 5}', "missing_field"),
    ('{"type": "fly"}', "unknown_command"),
    ('{"type": "speed", "linear": NaN, "angular": 0}', "malformed"),
    ('{"type": "speed", "linear": "x", "angular": 0}', "wrong_type"),
    ('{"type": "speed", "linear": 3, "angular": 0}', "out_of_limits"),
    ('{"type": "speed", "linear": 0.1, "angular": 0, "boost": 1}', "unknown_field"),
    ('{"type": "speed", "linear": 0.1, "angular": 0, "id": {"a": 1}}', "wrong_type"),
    ('{"type": "start", "force": true}', "unknown_field"),
    ('{"type": "ping", "t": "now"}', "wrong_type"),
    ('{"type": "speed", "linear": 1' + "0" * 400 + ', "angular": 0}', "out_of_limits"),
    ('{"type": "speed", "linear": 0.1, "angular": 0, "ttl_s": 1' + "0" * 400 + "}", "out_of_limits"),
    ("[" * 5000 + "]" * 5000, "malformed"),
    ('{"type": "speed", "linear": ' + '{"a":' * 2500 + "1" + "}" * 2501, "malformed"),
    ('{"type": "heartbeat", "pad": "' + "x" * (17 * 1024) + '"}', "too_large"),
]


async def _ws_errors(url: str, messages: list[str]) -> list[dict]:
    out = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url + "/ws/telemetry") as ws:
            for text in messages:
                await ws.send_str(text)
                while True:
                    msg = await asyncio.wait_for(ws.receive(), 5)
                    assert msg.type == aiohttp.WSMsgType.TEXT, msg
                    data = json.loads(msg.data)
                    if data["type"] == "error":
                        out.append(data)
                        break
            assert not ws.closed  # errors never close the socket
    return out


def test_fail__ws_bad_messages(running_server: ServerProc) -> None:
    before = robot_state(running_server)
    errors = asyncio.run(_ws_errors(running_server.ws_url, [m for m, _ in WS_CASES]))
    assert [e["error"]["code"] for e in errors] == [c for _, c in WS_CASES]
    assert all(e["error"]["message"] for e in errors)
    assert robot_state(running_server) == before


def test_fail__ws_oversize_message_closes_with_1009(running_server: ServerProc) -> None:
    async def go() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(running_server.ws_url + "/ws/telemetry") as ws:
                await ws.send_str(json.dumps({"type": "heartbeat", "pad": BIG * 4}))
                while True:
                    msg = await asyncio.wait_for(ws.receive(), 5)
                    if msg.type == aiohttp.WSMsgType.CLOSE:
                        return msg.data  # the code the server sent
                    if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                        return ws.close_code
    before = robot_state(running_server)
    # the server answers 1009 and drops the connection; when the rest of our 68 KB is still unread the
    # kernel may reset the socket before the close frame arrives, which the client sees as 1006
    assert asyncio.run(go()) in (1009, 1006)
    assert robot_state(running_server) == before
    assert running_server.get("/api/state")[0] == 200  # the server carries on


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
speedish = st.fixed_dictionaries(
    {},
    optional={"linear": json_values, "angular": json_values, "ttl_s": json_values,
              "type": st.sampled_from(["speed", "start", "ping", "bogus"]) | json_values, "x": json_values},
)


def _is_valid_speed(body) -> bool:
    if not isinstance(body, dict) or set(body) - {"linear", "angular", "ttl_s"}:
        return False

    def num(v, lo, hi):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and lo <= v <= hi

    if not (num(body.get("linear"), -0.5, 0.5) and num(body.get("angular"), -2.0, 2.0)):
        return False
    return "ttl_s" not in body or num(body["ttl_s"], 0.001, 10.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values | speedish)
def test_random_json_never_changes_state_unless_valid(running_server: ServerProc, body) -> None:
    try:
        raw = json.dumps(body).encode()
    except ValueError:
        return
    before = robot_state(running_server)
    status, reply = running_server.request("POST", "/api/speed", raw=raw)
    if _is_valid_speed(body):
        assert status == 200, reply
        # put the known setpoint back for the next example
        assert running_server.post("/api/speed", {"linear": 0.05, "angular": 0.0})[0] == 200
    else:
        assert 400 <= status < 500 and reply["error"]["message"], (body, reply)
        assert robot_state(running_server) == before


def test_ok__a_body_arriving_in_several_segments_is_read_whole(running_server: ServerProc) -> None:
    """A single read returns only what has arrived: the body reader must read to the end."""
    import socket
    import time

    body = json.dumps({"linear": 0.05, "angular": 0.0}).encode()
    head = (f"POST /api/speed HTTP/1.1\r\nHost: 127.0.0.1:{running_server.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", running_server.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head + body[:10])
        time.sleep(0.2)  # the rest comes later, as over a slow link (part of the scenario, not a wait)
        sock.sendall(body[10:])
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
