"""POST /api/heading on the real server: the simulated rover turns in place to a compass heading
with the encoder + magnetometer closed loop; stop, e-stop and operator commands cancel it.

The checks use the simulator's ground truth (``truth.yaw`` turned into a compass heading),
not the estimate the behavior steers by.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.conftest import ServerProc, module_server, wait_until
from tests.server.test_stop_paths import Heartbeat

pytestmark = pytest.mark.timeout(180)

FAST = 4.0  # sim seconds per real second: the rover's physics at 4× (the loop itself stays real-time)
# an ideal magnetometer apart from its noise: these tests are about the turn, test_calibration about the iron
CLEAN_MAG = {"magnetometer": {"hard_iron_ut": [0.0, 0.0, 0.0], "soft_iron": [1.0, 1.0, 1.0]}}


def heading_config(tmp_path, **extra: Any) -> dict[str, Any]:
    # the link timeout out of the way (none of these tests is about link loss): a heartbeat thread's 0.5 s gap
    # on a loaded machine once stopped the robot mid-turn (a fresh-clone run)
    cfg: dict[str, Any] = {"driver": {"time_scale": FAST, **CLEAN_MAG}, "server": {"state_dir": str(tmp_path)},
                           "safety": {"command_timeout_s": 5.0}}
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return cfg


def compass_deg(yaw_rad: float) -> float:
    return (90.0 - math.degrees(yaw_rad)) % 360.0


def angle_error_deg(a: float, b: float) -> float:
    """a − b wrapped to (-180, 180]."""
    return -((b - a + 180.0) % 360.0 - 180.0)


def true_heading_deg(srv: ServerProc) -> float:
    return compass_deg(srv.state()["truth"]["yaw"])


def behavior_events(srv: ServerProc) -> list[dict]:
    status, body = srv.get("/api/events?limit=1000")
    assert status == 200
    return [e for e in body["events"] if e["trigger"] in ("behavior_end", "behavior_cancel")]


def run_behavior(srv: ServerProc, path: str, body: dict | None, timeout_s: float = 60.0) -> dict:
    """Post a behavior command and wait for its end (or cancel) event; returns the event."""
    before = len(behavior_events(srv))
    status, reply = srv.post(path, body)
    assert status == 200, reply
    assert reply["state"] == "running" and reply["behavior"]["name"]
    ends = wait_until(lambda: behavior_events(srv)[before:], timeout_s, f"the end of {path}")
    return ends[0]


def at_rest(srv: ServerProc) -> bool:
    v = srv.state()["values"]
    return abs(v["wheel_left_rad_s"]) < 1e-3 and abs(v["wheel_right_rad_s"]) < 1e-3


def test_heading_command_reaches_each_of_eight_targets(server_factory, tmp_path) -> None:
    srv = server_factory(heading_config(tmp_path))
    assert srv.post("/api/start")[0] == 200
    errors = {}
    with Heartbeat(srv):
        for target in range(45, 361, 45):
            end = run_behavior(srv, "/api/heading", {"heading_deg": target})
            assert end["trigger"] == "behavior_end" and end["values"]["outcome"] == "reached", end
            wait_until(lambda: at_rest(srv), 10, "the rover at rest")
            errors[target] = angle_error_deg(true_heading_deg(srv), target)
            assert abs(end["values"]["error_deg"]) <= 5.0  # what the behavior measured
    print("true heading error per target (deg):", {k: round(v, 2) for k, v in errors.items()})
    assert all(abs(e) <= 5.0 for e in errors.values()), errors
    assert srv.state()["state"] == "running"


def test_heading_turns_the_short_way_in_steps_of_at_most_step_deg(server_factory, tmp_path) -> None:
    srv = server_factory(heading_config(tmp_path, heading={"step_deg": 30.0}))
    start = true_heading_deg(srv)  # 90: facing east
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        end = run_behavior(srv, "/api/heading", {"heading_deg": 330.0})  # 120° counter-clockwise
    assert end["values"]["outcome"] == "reached"
    assert end["values"]["steps"] >= 4  # 120° in steps of at most 30°
    assert abs(angle_error_deg(true_heading_deg(srv), 330.0)) <= 5.0
    assert start == pytest.approx(90.0, abs=0.01)


def test_state_shows_the_active_behavior(server_factory, tmp_path) -> None:
    srv = server_factory(heading_config(tmp_path))
    assert srv.state()["behavior"] is None
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        status, reply = srv.post("/api/heading", {"heading_deg": 270.0})
        assert status == 200
        assert reply["behavior"]["name"] == "heading" and reply["behavior"]["target"] == {"heading_deg": 270.0}
        b = wait_until(lambda: (srv.state()["behavior"] or {}).get("phase") == "turning" and srv.state()["behavior"],
                       10, "the turn under way")
        assert b["name"] == "heading" and b["target"]["heading_deg"] == 270.0 and 0.0 <= b["progress"] <= 1.0
        wait_until(lambda: srv.state()["behavior"] is None, 60, "the turn done")


@pytest.mark.parametrize("how", ["stop", "estop", "speed"])
def test_stop_estop_and_operator_speed_cancel_the_turn(server_factory, tmp_path, how: str) -> None:
    srv = server_factory(heading_config(tmp_path, heading={"turn_rate_rad_s": 0.3}))
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        before = len(behavior_events(srv))
        assert srv.post("/api/heading", {"heading_deg": 270.0})[0] == 200  # half a turn
        wait_until(lambda: abs(srv.state()["values"]["angular_rad_s"]) > 0.1, 10, "turning")
        body = {"linear": 0.0, "angular": 0.0} if how == "speed" else None
        assert srv.post(f"/api/{how}", body)[0] == 200
        ends = wait_until(lambda: behavior_events(srv)[before:], 5, "the cancel event")
        assert ends[0]["trigger"] == "behavior_cancel", ends
        assert srv.state()["behavior"] is None
        wait_until(lambda: at_rest(srv), 10, "the rover at rest")
    assert abs(angle_error_deg(true_heading_deg(srv), 270.0)) > 20.0  # it stopped short


def test_heading_timeout_ends_with_a_failure_event(server_factory, tmp_path) -> None:
    srv = server_factory(heading_config(tmp_path, heading={"timeout_s": 2.0, "turn_rate_rad_s": 0.2}))
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        end = run_behavior(srv, "/api/heading", {"heading_deg": 270.0})
    assert end["trigger"] == "behavior_end"
    assert end["values"]["outcome"].startswith("failed: timeout") and "failed: timeout" in end["message"]
    assert srv.state()["setpoint"] == {"linear": 0.0, "angular": 0.0, "source": None}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The refusal tests' one server (a long link timeout: a row's start stays running while it is checked)."""
    srv = module_server(tmp_path_factory, {"safety": {"command_timeout_s": 60.0}})
    yield srv
    srv.kill()


@pytest.fixture
def server(shared: ServerProc) -> ServerProc:
    """The shared server, idle and with no behaviour, as a fresh one would be."""
    if shared.state()["state"] != "idle":
        shared.post("/api/estop", {"reason": "test: reset between rows"})
        wait_until(lambda: shared.post("/api/reset")[0] == 200 or shared.state()["state"] == "idle", 10,
                   "the shared server idle again")
    assert shared.state()["state"] == "idle" and shared.state()["behavior"] is None
    return shared


def test_heading_refused_unless_running(server: ServerProc) -> None:
    status, body = server.post("/api/heading", {"heading_deg": 90.0})
    assert status == 409 and body["error"]["code"] == "not_running"
    assert server.state()["behavior"] is None


HEADING_BAD = [
    (b"{}", "missing_field"),
    (b'{"heading_deg": "north"}', "wrong_type"),
    (b'{"heading_deg": true}', "wrong_type"),
    (b'{"heading_deg": null}', "wrong_type"),
    (b'{"heading_deg": -1}', "out_of_limits"),
    (b'{"heading_deg": 360.5}', "out_of_limits"),
    (b'{"heading_deg": 1e400}', "not_finite"),
    (b'{"heading_deg": 90, "speed": 1}', "unknown_field"),
]


@pytest.mark.parametrize("raw, code", HEADING_BAD)
def test_fail__heading_bad_input(server: ServerProc, raw: bytes, code: str) -> None:
    assert server.post("/api/start")[0] == 200
    status, body = server.request("POST", "/api/heading", raw=raw)
    assert status == 422 and body["error"]["code"] == code, body
    assert server.state()["behavior"] is None


@pytest.mark.parametrize("raw", [b"not json", b"[90]", b'{"heading_deg": NaN}'])
def test_fail__heading_malformed_body(server: ServerProc, raw: bytes) -> None:
    status, body = server.request("POST", "/api/heading", raw=raw)
    assert status == 400 and body["error"]["code"] == "malformed"
