"""The arm and the platform through the real server (python -m server: runtime + gateway processes): commands
over HTTP and the telemetry websocket, refusals (unreachable, beyond the limits, singular, out of the stroke,
another profile's command) that change nothing, saturation reported, the rules that e-stop on a limit seen in
the telemetry, the FAULHABER program route checked line by line, and the scheme and description."""

from __future__ import annotations

import asyncio
import json
import math

import aiohttp
import pytest

from robotics.kinematics.scara import Scara
from tests.conftest import ServerProc, wait_until

pytestmark = pytest.mark.timeout(120)

SCARA_CFG = "config/scara-sim.toml"
STEWART_CFG = "config/stewart-sim.toml"
# the arm's commands and refusals are under test here, not the watchdogs (tests/server/test_stop_paths.py,
# test_stale_sensors.py, test_lifecycle.py): on a loaded machine a tick or a reading can be late by more than the
# arm's 0.1 s stall and 0.5 s staleness limits, an e-stop these tests did not ask for
LONG_LINK = {"safety": {"command_timeout_s": 60.0, "sensor_stale_s": 2.0}, "loop": {"max_stall_s": 2.0}}
BEHIND = Scara(0.3, 0.2).forward((math.radians(175.0), math.radians(60.0)))


def robot_state(srv: ServerProc) -> dict:
    s = srv.state()
    return {k: s[k] for k in ("state", "cause", "setpoint")}


async def ws_replies(url: str, messages: list[dict], timeout_s: float = 10.0) -> list[dict]:
    """Send each message with an id; the ack or error of each, in order."""
    out = []
    async with aiohttp.ClientSession() as s, s.ws_connect(url + "/ws/telemetry") as ws:
        for i, msg in enumerate(messages):
            await ws.send_str(json.dumps({**msg, "id": i}))
            while True:
                raw = await asyncio.wait_for(ws.receive(), timeout_s)
                data = json.loads(raw.data)
                if data["type"] in ("ack", "error") and data.get("id") == i:
                    out.append(data)
                    break
    return out


def ws(srv: ServerProc, messages: list[dict]) -> list[dict]:
    return asyncio.run(ws_replies(srv.ws_url, messages))


@pytest.fixture(scope="module")
def scara(tmp_path_factory):
    """One running arm for the refusal tables, its joints on a target (so a refusal has something to keep)."""
    import tomllib

    import tomli_w

    from tests.conftest import REPO, TEST_DEFAULTS, deep_merge

    cfg = deep_merge(deep_merge(tomllib.loads((REPO / SCARA_CFG).read_text()), TEST_DEFAULTS), LONG_LINK)
    path = tmp_path_factory.mktemp("cfg") / "scara.toml"
    path.write_text(tomli_w.dumps(cfg))
    srv = ServerProc(path).start()
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/joints", {"q1_rad": 0.2, "q2_rad": 1.2}) == (200, {"ok": True, "state": "running"})
    yield srv
    srv.kill()


# type, body, status, code (the websocket message is {"type": type, **body}; its error carries the same code)
SCARA_REFUSALS = [
    ("joints", {"q1_rad": 3.1, "q2_rad": 0.0}, 422, "beyond_limits"),
    ("joints", {"q1_rad": 0.1}, 422, "missing_field"),
    ("joints", {"q1_rad": "far", "q2_rad": 0.0}, 422, "wrong_type"),
    ("joints", {"q1_rad": 0.1, "q2_rad": 0.0, "q3_rad": 0.0}, 422, "unknown_field"),
    ("joints", {"q1_rad": 0.1, "q2_rad": 1e999}, 422, "not_finite"),
    ("joints", {"q1_rad": 0.1, "q2_rad": 0.0, "ttl_s": 1e6}, 422, "out_of_limits"),
    ("jog", {"q1_rad_s": 5.0}, 422, "beyond_limits"),
    ("tool", {"x_m": 0.6, "y_m": 0.0}, 422, "unreachable"),
    ("tool", {"x_m": 0.0, "y_m": 0.02}, 422, "unreachable"),
    ("tool", {"x_m": 0.3, "y_m": 0.2, "elbow": 2}, 422, "invalid"),
    ("tool", {"x_m": BEHIND[0], "y_m": BEHIND[1], "elbow": 1}, 422, "beyond_limits"),  # only the runtime knows
    ("tool_jog", {"vx_m_s": 1.0}, 422, "beyond_limits"),
    ("pose", {"z_m": 0.5}, 409, "unavailable"),
    ("speed", {"linear": 0.2, "angular": 0.0}, 409, "unavailable"),
]
ROUTES = {"joints": "/api/joints", "jog": "/api/jog", "tool": "/api/tool", "tool_jog": "/api/tool/jog",
          "pose": "/api/pose", "speed": "/api/speed"}


@pytest.mark.parametrize("kind, body, status, code", SCARA_REFUSALS,
                         ids=[f"{k}-{c}-{i}" for i, (k, _b, _s, c) in enumerate(SCARA_REFUSALS)])
def test_fail__scara_commands_refused_over_http_and_websocket_change_nothing(scara, kind, body, status, code):
    before = robot_state(scara)
    raw = json.dumps(body).replace("Infinity", "1e999").encode()
    got_status, reply = scara.request("POST", ROUTES[kind], raw=raw, headers={"content-type": "application/json"})
    assert (got_status, reply["error"]["code"]) == (status, code), reply
    assert robot_state(scara) == before
    if "1e999" in raw.decode():
        return  # not expressible as a Python dict for the websocket helper
    [err] = ws(scara, [{"type": kind, **body}])
    assert err["type"] == "error" and err["error"]["code"] == code
    if code != "unknown_field":  # (the websocket also allows its envelope: type, id)
        assert err["error"]["message"] == reply["error"]["message"]
    assert robot_state(scara) == before


def test_scara_moves_to_joint_and_tool_targets_over_http_and_websocket(scara) -> None:
    assert scara.post("/api/tool", {"x_m": 0.25, "y_m": 0.2, "elbow": -1})[0] == 200
    wait_until(lambda: abs(scara.state()["values"]["tool_x_m"] - 0.25) < 1e-4
               and abs(scara.state()["values"]["tool_y_m"] - 0.2) < 1e-4, message="the tool at (0.25, 0.2)")
    assert scara.state()["values"]["q2_rad"] < 0  # the elbow asked for
    [ack] = ws(scara, [{"type": "joints", "q1_rad": -0.4, "q2_rad": 1.0}])
    assert ack == {"type": "ack", "id": 0, "command": "joints", "state": "running"}
    wait_until(lambda: abs(scara.state()["values"]["q1_rad"] + 0.4) < 1e-4, message="joint 1 at -0.4 rad")
    snap = scara.state()
    assert snap["setpoint"] == {"kind": "joints", "q1_rad": -0.4, "q2_rad": 1.0, "source": "websocket"}
    assert snap["command"]["q1_rad"] == pytest.approx(-0.4)


def test_scara_tool_jog_is_refused_stretched_and_a_zero_speed_is_a_hold(scara) -> None:
    assert scara.post("/api/joints", {"q1_rad": 0.0, "q2_rad": 0.0})[0] == 200
    wait_until(lambda: abs(scara.state()["values"]["q2_rad"]) < 1e-6, message="the arm stretched")
    before = robot_state(scara)
    status, reply = scara.post("/api/tool/jog", {"vx_m_s": 0.05})
    assert status == 422 and reply["error"]["code"] == "singular" and "stretched" in reply["error"]["message"]
    [err] = ws(scara, [{"type": "tool_jog", "vy_m_s": 0.05}])
    assert err["error"]["code"] == "singular"
    assert robot_state(scara) == before
    assert scara.post("/api/jog", {"q2_rad_s": 0.5})[0] == 200
    wait_until(lambda: scara.state()["values"]["q2_rad"] > 0.3, message="joint 2 jogging")
    assert scara.post("/api/speed", {"linear": 0.0, "angular": 0.0}) == (200, {"ok": True, "state": "running"})
    assert scara.state()["setpoint"]["kind"] == "hold"
    wait_until(lambda: scara.state()["values"]["q2_rad_s"] == 0.0, message="the arm at rest")


def test_scara_description_and_scheme(scara) -> None:
    status, robot = scara.get("/api/robot")
    assert status == 200 and robot["profile"] == "scara" and robot["commands"] == ["joints", "jog", "tool", "tool_jog"]
    assert robot["scheme"]["kind"] == "bodies" and robot["scheme"]["channels"] == {"1": "q1_rad", "2": "q2_rad"}
    assert [b["number"] for b in robot["scheme"]["bodies"]] == [1, 2, 3]
    assert set(robot["workspace"]) == {"1", "-1"} and len(robot["workspace"]["1"]) == 96
    assert "uwb" not in robot and "heading" not in json.dumps(robot["safety"])
    status, svg = scara.get("/api/robot.svg")
    assert status == 200 and svg.decode() == robot["scheme"]["svg"]
    assert b'<g id="body-2" class="body joint-revolute"' in svg and b'transform="scale(1 -1)"' in svg


def test_scara_program_route_gives_the_faulhaber_sequence_line_by_line(scara) -> None:
    # direct drives (the simulator's arm): node 1 and 2, 2048 increments a turn, the arm's limits
    # setup: SP = rpm of max speed (2 rad/s → 19, 3 rad/s → 29), AC = DEC = round(a / 2π) rev/s²
    # (10 → 2, 15 → 2); segment 0 → 1 s, q1 0 → 0.5 rad: a = 2 rev/s² = 4π rad/s²,
    # v = (a·T − sqrt(a²T² − 4·a·d)) / 2 = 0.5216 rad/s
    #   → ceil(4.98 rpm) = 5; LA = round(0.5 / 2π · 2048) = 163; q2 0 → 0.2 rad: v = 0.2031 rad/s → 2 rpm, LA 65
    body = {"t_s": [0.0, 1.0], "q1_rad": [0.0, 0.5], "q2_rad": [0.0, 0.2]}
    status, text = scara.post("/api/program", body)
    assert status == 200
    assert text.decode().splitlines() == [
        "1SP19", "1AC2", "1DEC2", "1EN", "2SP29", "2AC2", "2DEC2", "2EN",
        "1LA0", "1M", "2LA0", "2M",
        "1SP5", "1LA163", "1M", "2SP2", "2LA65", "2M",
    ]
    status, doc = scara.request("POST", "/api/program?format=json", raw=b"t_s,q1_rad,q2_rad\n0,0,0\n1,0.5,0.2\n",
                                headers={"content-type": "text/csv"})
    assert status == 200 and doc["lines"] == 18 and doc["waypoints"] == 2
    assert [(a["joint"], a["node"], a["from_driver"]) for a in doc["axes"]] == [("q1_rad", 1, False),
                                                                               ("q2_rad", 2, False)]
    status, doc = scara.post("/api/program?format=json", {"series": "scara_demo", "step_s": 1.0})
    assert status == 200 and doc["waypoints"] == 10
    for body, code in (({"t_s": [0.0, 0.01], "q1_rad": [0.0, 1.0], "q2_rad": [0.0, 0.0]}, "beyond_limits"),
                       ({"t_s": list(range(201)), "q1_rad": [0.0] * 201, "q2_rad": [1.0] * 201}, "out_of_limits"),
                       ({"series": "scara_demo", "step_s": 0.0}, "out_of_limits")):
        status, reply = scara.post("/api/program", body)
        assert (status, reply["error"]["code"]) == (422, code), reply


def test_a_rule_breach_in_the_telemetry_estops_the_arm(server_factory) -> None:
    # a safety zone narrower than the joint limits: joint 1 may not pass 0.5 rad (the rule, not the controller)
    zone = {"name": "q1_zone", "channel": "q1_rad", "above": 0.5, "message": "joint 1 left its zone"}
    srv = server_factory({**LONG_LINK, "safety": {**LONG_LINK["safety"], "rules": [zone]}}, config=SCARA_CFG)
    rules = [r["name"] for r in srv.get("/api/robot")[1]["safety"]["rules"]]
    assert rules[0] == "q1_zone" and "q1_at_limit" in rules and "q2_above_limit" in rules
    srv.post("/api/start")
    assert srv.post("/api/joints", {"q1_rad": 0.8, "q2_rad": 1.5})[0] == 200
    snap = wait_until(lambda: (s := srv.state())["state"] == "estop" and s, message="the e-stop")
    assert snap["cause"]["rule"] == "q1_zone" and 0.5 < snap["values"]["q1_rad"] < 0.53
    status, reply = srv.post("/api/reset")
    assert status == 409 and reply["error"]["code"] == "cause_persists"
    status, reply = srv.post("/api/joints", {"q1_rad": 0.0, "q2_rad": 1.5})
    assert status == 409 and reply["error"]["code"] == "estop_latched"


# ---------------------------------------------------------------------- the platform
def test_stewart_poses_refusals_and_the_scheme(server_factory) -> None:
    srv = server_factory(LONG_LINK, config=STEWART_CFG)
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/pose", {"z_m": 0.55, "roll_rad": 0.1, "yaw_rad": 0.2})[0] == 200
    wait_until(lambda: abs(srv.state()["values"]["yaw_rad"] - 0.2) < 1e-5, message="the pose reached")
    before = robot_state(srv)
    cases = [({"z_m": 0.9}, 422, "out_of_stroke"), ({"z_m": 0.5, "roll_rad": 1.3}, 422, "out_of_stroke"),
             ({"x_m": 0.1}, 422, "missing_field"), ({"z_m": 0.5, "pitch_rad": 2.0}, 422, "beyond_limits")]
    for body, status, code in cases:
        got = srv.post("/api/pose", body)
        assert (got[0], got[1]["error"]["code"]) == (status, code), got
        [err] = ws(srv, [{"type": "pose", **body}])
        assert err["error"]["code"] == code
    got = srv.post("/api/joints", {"q1_rad": 0.0, "q2_rad": 0.0})
    assert (got[0], got[1]["error"]["code"]) == (409, "unavailable")
    assert "leg 1 at" in srv.post("/api/pose", {"z_m": 0.9})[1]["error"]["message"]
    assert robot_state(srv) == before
    robot = srv.get("/api/robot")[1]
    assert robot["scheme"]["kind"] == "stewart" and len(robot["geometry"]["base_joints_m"]) == 6
    svg = srv.get("/api/robot.svg")[1].decode()
    for element in ("leg-1-top", "leg-6-front", "platform-top", "platform-front"):
        assert f'id="{element}"' in svg


def test_stewart_saturation_is_reported_as_an_event_and_in_the_snapshot(server_factory) -> None:
    srv = server_factory({**LONG_LINK, "robot": {"saturate": True}}, config=STEWART_CFG)
    srv.post("/api/start")
    assert srv.post("/api/pose", {"z_m": 0.8}) == (200, {"ok": True, "state": "running"})
    snap = wait_until(lambda: (s := srv.state())["command"]["saturated_legs"] and s, message="saturation")
    assert snap["state"] == "running" and snap["command"]["saturated_legs"] == [1, 2, 3, 4, 5, 6]
    events = wait_until(lambda: [e for e in srv.get("/api/events")[1]["events"] if e["trigger"] == "saturation"],
                        message="the saturation event")
    assert events[0]["values"]["legs"] == [1, 2, 3, 4, 5, 6] and "above its maximum" in events[0]["message"]
    wait_until(lambda: abs(srv.state()["values"]["leg1_m"] - 0.748) < 1e-6, message="legs at the soft stroke end")
    assert srv.state()["state"] == "running"  # the soft stroke keeps the legs off their end stops


def test_the_rover_refuses_arm_commands_and_trajectories(server_factory) -> None:
    srv = server_factory(LONG_LINK)
    srv.post("/api/start")
    before = robot_state(srv)
    for route, body in (("/api/joints", {"q1_rad": 0, "q2_rad": 0}), ("/api/pose", {"z_m": 0.5}),
                        ("/api/trajectory", {"series": "vertical"}), ("/api/program", {"series": "scara_demo"})):
        status, reply = srv.post(route, body)
        assert (status, reply["error"]["code"]) == (409, "unavailable"), (route, reply)
    [err] = ws(srv, [{"type": "tool", "x_m": 0.3, "y_m": 0.1}])
    assert err["error"]["code"] == "unavailable" and "rover" in err["error"]["message"]
    [err] = ws(srv, [{"type": "teleport"}])
    assert err["error"]["code"] == "unknown_command" and "speed" in err["error"]["message"]
    assert robot_state(srv) == before
