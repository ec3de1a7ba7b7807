"""No request closes the gateway↔runtime link, and an e-stop in flight is never lost (issue 18, items 1
and 11), on the real server.

Before: ``POST /api/program?format=json {"t_s": [0, 1e300], …}`` → 503 ``runtime_down`` (``math.ceil``
of infinity in the FAULHABER program generator raised ``OverflowError``, which closed the runtime API
connection), ``POST /api/trajectory`` with ``t_s: [0, 1e308]`` the same; a viewer's e-stop sent 1.25–1.5 ms
later was answered ``{"state": "fault", "warning": "robot runtime down…"}`` and the arm kept running
(2 of 7 trials); every dashboard showed a false "runtime down"; a program of > 64 KiB of waypoints was
a 500 (``ProtocolError: header of 92805 bytes``) that left its future in ``_pending``.
"""

from __future__ import annotations

import asyncio
import json
import tomllib

import aiohttp
import pytest
import tomli_w

from server.console import Console
from tests.conftest import REPO, TEST_DEFAULTS, ServerProc, deep_merge, wait_until
from tests.server.test_processes import socket_path

pytestmark = pytest.mark.timeout(300)

#: the worst finite values a JSON number can carry, as the text a client sends
WORST = ["1e308", "-1e308", "1e-308", "-1e-308", "5e-324", "1" + "0" * 400, "-1" + "0" * 400,
         "9223372036854775808", "-9223372036854775809", "18446744073709551616", "0"]


def start_server(tmp_path_factory, config: str, **over) -> ServerProc:
    base = tomllib.loads((REPO / config).read_text())
    d = tmp_path_factory.mktemp("cfg")
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), deep_merge(
        {"safety": {"command_timeout_s": 60.0}, "auth": {"users_file": str(d / "users.json")}}, over))
    path = d / "link.toml"
    path.write_text(tomli_w.dumps(cfg))
    return ServerProc(path).start()


def link(srv: ServerProc) -> dict:
    status, body = srv.get("/api/telemetry")
    assert status == 200, body
    return body["runtime"]


def nothing_pending(srv: ServerProc, what: str = "") -> None:
    """No request left waiting for its reply (the gateway's own background requests come and go: wait)."""
    wait_until(lambda: link(srv)["pending"] == 0, 10, f"no request pending in the runtime client {what}")


def running(srv: ServerProc) -> None:
    """Running and standing still (a zero speed cancels any behaviour; an arm holds), whatever came before."""
    def go() -> bool:
        s = srv.state()["state"]
        if s in ("estop", "fault"):
            srv.post("/api/reset")
        elif s == "idle":
            srv.post("/api/start")
        elif s == "running":
            return srv.post("/api/speed", {"linear": 0.0, "angular": 0.0})[0] == 200
        return False
    wait_until(go, 20, "the robot running and still")


def names(message: str, fields: str) -> bool:
    return any(f in message for f in fields.split("|"))


def timing_stop(state: dict) -> bool:
    """An e-stop of the loop's own timing rules, which a loaded test machine trips now and then."""
    return state["state"] == "estop" and (state["cause"] or {}).get("trigger") in ("stall", "overruns")


def robot_state(srv: ServerProc) -> dict:
    s = srv.state()
    return {"state": s["state"], "cause": s["cause"], "setpoint": s["setpoint"], "behavior": s["behavior"]}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started = {}
    try:
        for profile in ("rover", "scara", "stewart"):
            started[profile] = start_server(tmp_path_factory, f"config/{profile}-sim.toml")
        yield started
    finally:
        for srv in started.values():
            srv.kill()


# (profile, method, path, body template with XX for the value, the field the error must name (one of a|b),
# content type)
JSON = "application/json"
CASES = [
    ("rover", "POST", "/api/speed", '{"linear": XX, "angular": 0}', "linear", JSON),
    ("rover", "POST", "/api/speed", '{"linear": 0, "angular": XX}', "angular", JSON),
    ("rover", "POST", "/api/speed", '{"linear": 0, "angular": 0, "ttl_s": XX}', "ttl_s", JSON),
    ("rover", "POST", "/api/heading", '{"heading_deg": XX}', "heading_deg", JSON),
    ("rover", "POST", "/api/calibration/magnetometer", '{"revolutions": XX}', "revolutions", JSON),
    ("rover", "POST", "/api/calibration/magnetometer", '{"rate_rad_s": XX}', "rate_rad_s", JSON),
    ("rover", "POST", "/api/calibration/uwb", '{"pairs": [[XX, 1.0], [2.0, 2.1], [3.0, 3.1]]}', "pairs", JSON),
    ("rover", "POST", "/api/calibration/uwb", '{"pairs": [[1.0, 1.1], [2.0, 2.1], [3.0, 3.1]], "degree": XX}',
     "degree", JSON),
    ("rover", "POST", "/api/go_to_marker", '{"marker_id": XX}', "marker_id", JSON),
    ("rover", "POST", "/api/go_to_marker", '{"standoff_m": XX}', "standoff_m", JSON),
    ("rover", "POST", "/api/go_to_marker", '{"speed_m_s": XX}', "speed_m_s", JSON),
    ("rover", "PUT", "/api/acquisition", '{"rate_hz": XX, "channels": CHANNELS}', "rate_hz", JSON),
    ("rover", "POST", "/api/debug/block", '{"seconds": XX}', "seconds", JSON),
    ("rover", "GET", "/api/events?limit=XX", None, "limit", None),
    ("rover", "POST", "/api/mission", '{"waypoints": [{"x_m": XX, "y_m": 1.0}], "mode": "drive"}', "x_m", JSON),
    ("rover", "POST", "/api/experiments/heading_turns", '{"targets_deg": [90], "trials": XX}', "trials", JSON),
    ("scara", "POST", "/api/joints", '{"q1_rad": XX, "q2_rad": 1.0}', "q1_rad", JSON),
    ("scara", "POST", "/api/joints", '{"q1_rad": 0, "q2_rad": 1.0, "ttl_s": XX}', "ttl_s", JSON),
    ("scara", "POST", "/api/jog", '{"q1_rad_s": XX}', "q1_rad_s", JSON),
    ("scara", "POST", "/api/tool", '{"x_m": XX, "y_m": 0.2}', "x_m|tool", JSON),
    ("scara", "POST", "/api/tool", '{"x_m": 0.3, "y_m": 0.2, "elbow": XX}', "elbow", JSON),
    ("scara", "POST", "/api/tool/jog", '{"vx_m_s": XX}', "vx_m_s|tool", JSON),
    ("scara", "POST", "/api/trajectory", '{"trajectory": {"t_s": [0, XX], "q1_rad": [0, 0], "q2_rad": [1.5, 1.5]}}',
     "t_s|t[", JSON),
    ("scara", "POST", "/api/trajectory", '{"trajectory": {"t_s": [XX, 1e10], "q1_rad": [0, 0], "q2_rad": [1.5, 1.5]}}',
     "t_s|t[", JSON),
    ("scara", "POST", "/api/trajectory", '{"trajectory": {"t_s": [0, 1], "q1_rad": [0, XX], "q2_rad": [1.5, 1.5]}}',
     "q1_rad", JSON),
    ("scara", "POST", "/api/trajectory", "t_s,q1_rad,q2_rad\n0,0,1.5\nXX,0,1.5\n", "t", "text/csv"),
    ("scara", "POST", "/api/trajectory", '{"series": "scara_demo", "amplitude": XX}', "amplitude", JSON),
    ("scara", "POST", "/api/program?format=json", '{"t_s": [0, XX], "q1_rad": [0, 0.1], "q2_rad": [1.5, 1.5]}', "t",
     JSON),
    ("scara", "POST", "/api/program?format=json", '{"t_s": [0, 1], "q1_rad": [0, XX], "q2_rad": [1.5, 1.5]}',
     "q1_rad", JSON),
    ("scara", "POST", "/api/program?format=json", '{"series": "scara_demo", "step_s": XX}', "step_s", JSON),
    ("scara", "GET", "/api/trajectory/report?max_points=XX", None, "max_points", None),
    ("scara", "GET", "/api/trajectory/report.svg?max_points=XX", None, "max_points", None),
    ("stewart", "POST", "/api/pose", '{"z_m": XX}', "z_m|pose", JSON),  # a reachable value: the stroke check
    ("stewart", "POST", "/api/pose", '{"z_m": 0.5, "roll_rad": XX}', "roll_rad|pose", JSON),
    ("stewart", "POST", "/api/pose", '{"z_m": 0.5, "ttl_s": XX}', "ttl_s", JSON),
    ("stewart", "POST", "/api/trajectory", '{"trajectory": {"t_s": [0, XX], "z_m": [0.5, 0.5]}}', "t_s|t[", JSON),
    ("stewart", "POST", "/api/trajectory", '{"series": "vertical", "amplitude": XX}', "amplitude", JSON),
]
#: POST/PUT routes whose bodies carry no number that feeds a time or a count, or are covered elsewhere
NO_NUMBERS = {
    "/api/start", "/api/stop", "/api/reset", "/api/heartbeat", "/api/trajectory/cancel", "/api/debug/driver",
    "/api/debug/vision", "/api/lease/take", "/api/lease/request", "/api/lease/release", "/api/lease/handover",
    "/api/auth/login", "/api/auth/logout", "/api/auth/reauth", "/api/auth/password", "/api/users",
    "/api/users/{name}", "/api/recordings/start", "/api/recordings/stop",
    "/api/estop",  # any body, any value: test_estop_never_refused and the reason case below
    "/api/video",  # integers within RUNTIME_LIMITS (server/gateway/video/settings.py, test_video_server)
    "/api/mission/pause", "/api/mission/resume", "/api/mission/cancel", "/api/experiments/cancel",
    "/api/experiments/{name}",  # walked by its heading_turns case above
}


def test_every_route_with_a_body_is_in_the_table() -> None:
    """The table walks every POST and PUT route of the gateway (built in-process, video on, debug routes on)."""
    from server.config import load_config, parse_overrides
    from server.gateway.app import create_app
    from server.runtime_api.client import RuntimeClient

    profile = load_config(REPO / "config/rover-sim.toml", overrides=parse_overrides(
        ["debug.routes=true", "video.enabled=true", "vision.enabled=true"]))

    async def routes() -> set[str]:
        app = create_app(profile, RuntimeClient("/nonexistent"))
        return {r.resource.canonical for r in app.router.routes() if r.method in ("POST", "PUT")}

    paths = asyncio.run(routes())
    covered = {c[2].split("?", 1)[0] for c in CASES} | NO_NUMBERS
    assert paths - covered == set(), "routes with a body the worst-values table does not walk"


@pytest.mark.parametrize("profile", ["rover", "scara", "stewart"])
def test_worst_finite_values_get_a_4xx_and_never_drop_the_runtime_link(servers, profile: str) -> None:
    srv = servers[profile]
    before_link = link(srv)
    channels = json.dumps(srv.get("/api/acquisition")[1]["available"]) if profile == "rover" else "[]"
    seen: list[str] = []
    for prof, method, path, template, field, ctype in CASES:
        if prof != profile:
            continue
        for value in WORST:
            url = path.replace("XX", value)
            raw = None if template is None else template.replace("XX", value).replace("CHANNELS", channels).encode()
            for _attempt in range(3):
                running(srv)
                before = robot_state(srv)
                status, body = srv.request(method, url, raw=raw,
                                           headers={"content-type": ctype} if ctype else None, timeout_s=30)
                after = robot_state(srv)
                if not timing_stop(after):
                    break  # else a loaded machine stalled the loop meanwhile (trigger stall): not this request's doing
            what = f"{method} {url[:60]} {(raw or b'')[:80]!r} → {status} {str(body)[:300]}"
            seen.append(what)
            assert status < 500, what
            if 400 <= status < 500:
                assert isinstance(body, dict) and body["error"]["message"], what
                if status != 409:  # a state refusal (not running, not this profile) names no field
                    assert names(body["error"]["message"], field), what
                assert after == before, what
            assert link(srv)["connects"] == before_link["connects"], f"the runtime link dropped on {what}"
            nothing_pending(srv, what)
    assert seen
    after = link(srv)
    assert after["connects"] == before_link["connects"] and after["link_losses"] == 0, after


WS_CASES = {
    "rover": [('{"type": "speed", "linear": XX, "angular": 0}', "linear"),
              ('{"type": "speed", "linear": 0, "angular": 0, "ttl_s": XX}', "ttl_s"),
              ('{"type": "ping", "t": XX}', "t"), ('{"type": "go_to_marker", "standoff_m": XX}', "standoff_m")],
    "scara": [('{"type": "joints", "q1_rad": XX, "q2_rad": 1}', "q1_rad"), ('{"type": "jog", "q2_rad_s": XX}',
                                                                            "q2_rad_s"),
              ('{"type": "tool", "x_m": 0.3, "y_m": XX}', "y_m|tool"),
              ('{"type": "tool_jog", "vy_m_s": XX}', "vy_m_s|tool")],
    "stewart": [('{"type": "pose", "z_m": XX}', "z_m|pose"),
                ('{"type": "pose", "z_m": 0.5, "yaw_rad": XX}', "yaw_rad|pose")],
}


@pytest.mark.parametrize("profile", ["rover", "scara", "stewart"])
def test_worst_finite_values_over_the_websocket(servers, profile: str) -> None:
    srv = servers[profile]
    running(srv)
    before_link = link(srv)

    async def go() -> list[dict]:
        replies = []
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(srv.ws_url + "/ws/telemetry") as ws:
                for i, (template, field) in enumerate((t, f) for t, f in WS_CASES[profile] for _ in WORST):
                    value = WORST[i % len(WORST)]
                    text = template.replace("XX", value)[:-1] + f', "id": {i}}}'
                    await ws.send_str(text)
                    async with asyncio.timeout(30):
                        while True:
                            msg = await ws.receive()
                            assert msg.type == aiohttp.WSMsgType.TEXT, (text[:80], msg)
                            data = json.loads(msg.data)
                            if data.get("id") == i and data["type"] in ("ack", "error", "pong"):
                                replies.append((text, field, data))
                                break
                assert not ws.closed
        return replies

    for text, field, reply in asyncio.run(go()):
        if reply["type"] == "error":
            assert reply["error"]["code"] not in ("internal", "runtime_down", "runtime_link_lost"), (text[:80], reply)
            if reply["error"]["code"] not in ("not_running", "unavailable", "conflict", "estop_latched"):
                assert names(reply["error"]["message"], field), (text[:80], reply)
    nothing_pending(srv)
    assert link(srv)["connects"] == before_link["connects"]


def test_estop_reason_of_worst_values_latches(servers) -> None:
    srv = servers["rover"]
    for value in WORST[:3]:
        running(srv)
        status, body = srv.request("POST", "/api/estop", raw=f'{{"reason": {value}}}'.encode())
        assert status == 200 and body["state"] == "estop" and body["latch"] == "confirmed", body
        assert "reason replaced" in body["warning"], body


def test_huge_arrays_within_the_body_limit(servers) -> None:
    """10^6-point arrays under 16 MiB: refused by count, parsed off the event loop, the link untouched."""
    srv = servers["stewart"]
    running(srv)
    before_link, before = link(srv), robot_state(srv)
    n = 1_000_000
    raw = b'{"trajectory": {"t_s": [' + b",".join(b"%d" % i for i in range(n)) + b'], "z_m": [' + \
        b",".join([b"0.5"] * n) + b"]}}"
    assert len(raw) < 16 * 1024 * 1024
    status, body = srv.request("POST", "/api/trajectory", raw=raw, timeout_s=120)
    assert status == 422 and body["error"]["code"] == "out_of_limits", body
    raw = b'{"t_s": [' + b",".join(b"%d" % i for i in range(n)) + b'], "q1_rad": [' + b",".join([b"0"] * n) + b"]}"
    status, body = servers["scara"].request("POST", "/api/program?format=json", raw=raw, timeout_s=120)
    assert status == 422, body
    assert robot_state(srv) == before and link(srv)["connects"] == before_link["connects"]


def test_a_program_of_over_64_kib_of_waypoints_is_refused_and_leaves_nothing_pending(servers) -> None:
    """Before: 500 ``ProtocolError: header of 92805 bytes`` and a stale future in ``_pending``."""
    srv = servers["scara"]
    before_link = link(srv)
    n = 3000
    body = {"t_s": [i * 0.5 for i in range(n)], "q1_rad": [0.123456789012345 * (i % 3) for i in range(n)],
            "q2_rad": [1.5 + 0.000123456789 * (i % 2) for i in range(n)]}
    assert len(json.dumps(body)) > 64 * 1024
    status, reply = srv.post("/api/program?format=json", body)
    assert status == 422 and reply["error"]["code"] == "out_of_limits" and "200 waypoints" in reply["error"]["message"]
    nothing_pending(srv)
    assert link(srv)["connects"] == before_link["connects"]


def test_the_runtime_answers_what_the_gateway_would_refuse_and_keeps_the_connection(servers) -> None:
    """The runtime's own checks, asked directly over its socket: every bad request is answered, none
    closes the connection, and params over 64 KiB travel as the frame's payload."""
    srv = servers["scara"]
    running(srv)
    con = Console(socket_path(srv), timeout_s=30)
    try:
        bad = [
            ("program", {"columns": {"t_s": [0, 1e300], "q1_rad": [0, 0.1], "q2_rad": [1.5, 1.5]}}, "t_s"),
            ("program", {"columns": {"t_s": list(range(5000)), "q1_rad": [0.123456789012345] * 5000,
                                     "q2_rad": [1.5] * 5000}}, "200 waypoints"),
            ("program", {"series": "scara_demo", "step_s": 1e-308}, "step_s"),
            ("trajectory_run", {"series": "scara_demo", "amplitude": 1e308}, "amplitude"),
            ("setpoint", {"setpoint": {"kind": "joints", "q1_rad": 0.0, "q2_rad": 1.0}, "ttl_s": 1e308}, "ttl_s"),
            ("events", {"limit": 2 ** 62}, "limit"),
        ]
        con.call("trajectory_upload", {"upload": "u1", "part": 0,
                                       "columns": {"t_s": [0, 1e308], "q1_rad": [0, 0], "q2_rad": [1.5, 1.5]}})
        bad.append(("trajectory_run", {"upload": "u1"}, "t_s"))
        for method, params, named in bad:
            with pytest.raises(RuntimeError) as err:
                con.call(method, params)
            assert " 422 " in f" {err.value} " or "422" in str(err.value).split(":", 1)[0], (method, err.value)
            assert named in str(err.value), (method, err.value)
        assert con.call("ping", {"t": 1.0})["t"] == 1.0  # the same connection still answers
    finally:
        con.close()
    assert link(srv)["connects"] >= 1 and link(srv)["link_losses"] == 0
