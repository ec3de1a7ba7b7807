"""Missions and the seed experiments on the real server (issue 23): ``POST /api/mission`` and its pause, resume,
cancel over HTTP and the websocket, ``GET /api/mission`` and the report (JSON, CSV, HTML with plots), the stop
paths mid-mission (cancel, stop, e-stop, link loss: the rover stops), the bound on a leg, the refusals (not
running, bad bodies naming the field, out of the field, a viewer), and ``GET/POST /api/experiments``.

The checks use the simulator's ground truth (``truth`` in the state), not the estimate the mission steers by.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import tomllib
from typing import Any

import aiohttp
import pytest
import tomli_w

from tests.conftest import DEFAULT_CONFIG, REPO, TEST_DEFAULTS, ServerProc, deep_merge, wait_until
from tests.server.gateway.auth.client import Client
from tests.server.test_stop_paths import Heartbeat

pytestmark = pytest.mark.timeout(240)

FAST = 4.0  # sim seconds per real second (the loop itself stays real-time)
CLEAN_MAG = {"hard_iron_ut": [0.0, 0.0, 0.0], "soft_iron": [1.0, 1.0, 1.0]}
# config/rover-sim.toml's world: the rover starts at (3, 2) facing east; anchors at the corners of 6 × 4 m
TWO = [{"x_m": 4.0, "y_m": 2.0}, {"x_m": 4.0, "y_m": 2.8}]


def mission_config(tmp_path, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"driver": {"time_scale": FAST, "magnetometer": CLEAN_MAG},
                           "server": {"state_dir": str(tmp_path)}, "mission": {"field_m": [0.0, 0.0, 6.0, 4.0]}}
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return cfg


def mission(srv: ServerProc) -> dict[str, Any]:
    status, body = srv.get("/api/mission")
    assert status == 200, body
    return body


def at_rest(srv: ServerProc) -> bool:
    v = srv.state()["values"]
    return abs(v["wheel_left_rad_s"]) < 1e-3 and abs(v["wheel_right_rad_s"]) < 1e-3


def moving(srv: ServerProc) -> bool:
    return abs(srv.state()["values"]["linear_m_s"]) > 0.05


def ended(srv: ServerProc) -> dict[str, Any] | None:
    m = mission(srv)
    return m["mission"] if m["mission"] and not m["running"] else None


def start_mission(srv: ServerProc, waypoints: list[dict], **body: Any) -> dict[str, Any]:
    wait_until(lambda: mission_startable(srv), 20, "a position estimate")
    status, reply = srv.post("/api/mission", {"waypoints": waypoints, **body})
    assert status == 200, reply
    return reply


def mission_startable(srv: ServerProc) -> bool:
    """The estimator has a position (its first UWB fixes): a mission has somewhere to start from."""
    x = srv.state()["values"].get("est_x_m")
    return x is not None and math.isfinite(x)


def test_a_mission_over_http_reaches_its_waypoints_by_the_true_pose_and_reports(server_factory, tmp_path) -> None:
    srv = server_factory(mission_config(tmp_path, recording={"dir": str(tmp_path / "rec"), "flush_s": 0.2}))
    status, rec = srv.post("/api/recordings/start", {"name": "mission"})
    assert status == 200, rec
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        reply = start_mission(srv, TWO, speed_m_s=0.25, label="two legs")
        assert reply["state"] == "running" and reply["mission"]["legs"] == 2
        assert srv.state()["behavior"]["name"] == "mission"
        done = wait_until(lambda: ended(srv), 90, "the mission's end")
    assert done["outcome"] == "finished" and done["legs_done"] == 2, done
    status, rep = srv.get("/api/mission/report")
    assert status == 200 and [leg["outcome"] for leg in rep["legs"]] == ["reached", "reached"]
    for leg in rep["legs"]:  # the truth, not the estimate the mission steered by
        assert leg["true_arrival_error_m"] < 0.15, leg
    assert rep["label"] == "two legs" and len(rep["path"]["truth"]) > 10
    status, csv_text = srv.get("/api/mission/report.csv")
    assert status == 200
    lines = csv_text.decode().splitlines()
    assert lines[0].startswith("leg,target_x_m,target_y_m,outcome") and len(lines) == 3
    status, html = srv.get("/api/mission/report.html")
    assert status == 200 and b"<svg" in html and b"two legs" in html and b"per-leg errors" in html
    # the mission was the operator's command: its events are in the log (and so in the recording)
    triggers = [e["trigger"] for e in srv.get("/api/events?limit=1000")[1]["events"]]
    assert triggers.count("mission_leg") == 2
    wait_until(lambda: at_rest(srv), 20, "the rover at rest at the end")
    # …and in the recording: the mission rebuilt from the file, by a job of the report pool
    assert srv.post("/api/recordings/stop")[0] == 200
    status, found = srv.get(f"/api/recordings/{rec['file']}/missions")
    assert status == 200, found
    (recorded,) = found["missions"]
    assert recorded["outcome"] == "finished" and [leg["leg"] for leg in recorded["legs"]] == [0, 1]
    assert recorded["legs"][1]["true_arrival_error_m"] == rep["legs"][1]["true_arrival_error_m"]
    assert len(recorded["path"]["truth"]) > 10 and recorded["summary"]["true_arrival_error_m"]["n"] == 2
    status, html = srv.get(f"/api/recordings/{rec['file']}/missions.html")
    assert status == 200 and b"<svg" in html


def test_a_second_client_reads_the_plan_and_the_legs_of_a_mission_it_did_not_start(server_factory, tmp_path) -> None:
    """GET /api/mission carries the plan (waypoints, mode, speed) and every leg's result so far, so a dashboard that
    did not send the mission (another browser, one opened later, a mission started with curl) can draw it."""
    srv = server_factory(mission_config(tmp_path))
    plan = [{"x_m": 4.0, "y_m": 2.0}, {"x_m": 4.0, "y_m": 2.8, "heading_deg": 0.0, "hold_s": 0.5}]

    async def second_client() -> list[dict[str, Any]]:
        """Another client's view (its own HTTP session) until the mission ends: every distinct reply."""
        seen: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(3000):
                async with http.get(srv.url + "/api/mission") as r:
                    assert r.status == 200
                    body = await r.json()
                if not seen or body != seen[-1]:
                    seen.append(body)
                if body["mission"] and not body["running"]:
                    return seen
                await asyncio.sleep(0.05)
        raise AssertionError(f"the mission did not end: {seen[-1]}")

    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        reply = start_mission(srv, plan, speed_m_s=0.25, mode="drive")
        assert reply["mission"]["waypoints"][1]["heading_deg"] == 0.0 and reply["mission"]["id"] >= 1
        seen = asyncio.run(second_client())
    first = seen[0]["mission"]
    assert first["id"] == reply["mission"]["id"] and first["mode"] == "drive" and first["speed_m_s"] == 0.25
    assert [(w["x_m"], w["y_m"], w["heading_deg"], w["hold_s"]) for w in first["waypoints"]] == \
        [(4.0, 2.0, None, 0.0), (4.0, 2.8, 0.0, 0.5)]
    counts = [len(b["mission"]["results"]) for b in seen]
    assert counts == sorted(counts) and counts[-1] == 2, counts  # the legs' results as they come, never lost
    last = seen[-1]["mission"]
    assert last["outcome"] == "finished" and [r["leg"] for r in last["results"]] == [0, 1], last
    assert last["waypoints"] == first["waypoints"]
    # the per-tick snapshot stays small: the mission's id, no plan (the page reads the plan once, by the id)
    with Heartbeat(srv):
        start_mission(srv, [{"x_m": 4.5, "y_m": 2.4}], speed_m_s=0.2)
        behavior = wait_until(lambda: srv.state()["behavior"], 10, "the second mission's behaviour")
        assert behavior["id"] == first["id"] + 1 and "waypoints" not in behavior, behavior
        assert srv.post("/api/mission/cancel")[0] == 200


@pytest.mark.parametrize("how", ["cancel", "stop", "estop", "speed"])
def test_cancel_stop_estop_or_a_speed_command_mid_mission_stops_the_rover(server_factory, tmp_path, how) -> None:
    srv = server_factory(mission_config(tmp_path))
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        start_mission(srv, [{"x_m": 5.0, "y_m": 2.0}], speed_m_s=0.2)
        wait_until(lambda: moving(srv), 20, "the rover under way")
        path, body = {"cancel": ("/api/mission/cancel", None), "stop": ("/api/stop", None),
                      "estop": ("/api/estop", None), "speed": ("/api/speed", {"linear": 0.0, "angular": 0.0})}[how]
        status, reply = srv.post(path, body)
        assert status == 200, reply
        m = wait_until(lambda: ended(srv), 10, "the mission ended")
        assert m["outcome"].startswith("cancelled"), m
        wait_until(lambda: at_rest(srv), 20, "the rover at rest")
    assert srv.state()["truth"]["x"] < 4.8  # it stopped short of the waypoint
    assert srv.state()["state"] == {"cancel": "running", "stop": "idle", "estop": "estop", "speed": "running"}[how]


def test_link_loss_mid_mission_stops_the_rover(server_factory, tmp_path) -> None:
    srv = server_factory(mission_config(tmp_path))
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        start_mission(srv, [{"x_m": 5.0, "y_m": 2.0}], speed_m_s=0.2)
        wait_until(lambda: moving(srv), 20, "the rover under way")
    # the operator goes silent: the mission is the operator's command, kept alive by its heartbeat only
    wait_until(lambda: srv.state()["state"] == "estop", 10, "the link-loss stop")
    assert any(e["trigger"] == "link_loss" for e in srv.get("/api/events?limit=1000")[1]["events"])
    m = wait_until(lambda: ended(srv), 10, "the mission ended")
    assert m["outcome"].startswith("cancelled"), m
    wait_until(lambda: at_rest(srv), 20, "the rover at rest")
    assert srv.state()["truth"]["x"] < 4.8


def test_pause_holds_the_rover_and_resume_finishes_over_the_websocket(server_factory, tmp_path) -> None:
    srv = server_factory(mission_config(tmp_path))

    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(srv.ws_url + "/ws/telemetry") as ws:
            beat = asyncio.create_task(heartbeats(ws))
            try:
                assert (await Client.ws_call(ws, "start"))["type"] == "ack"
                await asyncio.to_thread(wait_until, lambda: mission_startable(srv), 20, "a position estimate")
                ack = await Client.ws_call(ws, "mission", waypoints=[{"x_m": 4.5, "y_m": 2.0}], speed_m_s=0.2)
                assert ack["type"] == "ack" and ack["result"]["mission"]["legs"] == 1, ack
                await asyncio.to_thread(wait_until, lambda: moving(srv), 20, "the rover under way")
                ack = await Client.ws_call(ws, "mission_pause")
                assert ack["type"] == "ack" and ack["result"]["mission"]["paused"] is True, ack
                await asyncio.to_thread(wait_until, lambda: at_rest(srv), 20, "the rover held")
                x_held = srv.state()["truth"]["x"]
                assert mission(srv)["running"] and x_held < 4.4
                await asyncio.sleep(1.0)  # held, not creeping on
                assert abs(srv.state()["truth"]["x"] - x_held) < 0.02
                ack = await Client.ws_call(ws, "mission_resume")
                assert ack["type"] == "ack" and ack["result"]["mission"]["paused"] is False
                done = await asyncio.to_thread(wait_until, lambda: ended(srv), 90, "the mission's end")
                assert done["outcome"] == "finished", done
                err = await Client.ws_call(ws, "mission_cancel")  # nothing to cancel now
                assert err["type"] == "error" and err["error"]["code"] == "no_mission"
                bad = await Client.ws_call(ws, "mission", waypoints=[{"x_m": 4.0, "y_m": "north"}])
                assert bad["type"] == "error" and bad["error"]["code"] == "wrong_type" and "y_m" in \
                    bad["error"]["message"]
            finally:
                beat.cancel()

    async def heartbeats(ws) -> None:
        while True:
            await ws.send_str(json.dumps({"type": "heartbeat"}))
            await asyncio.sleep(0.1)

    asyncio.run(go())
    assert srv.state()["truth"]["x"] == pytest.approx(4.5, abs=0.15)


def test_a_waypoint_not_reached_within_its_bound_fails_the_mission_with_the_reason(server_factory, tmp_path):
    srv = server_factory(mission_config(tmp_path, mission={"leg_timeout_factor": 1.0, "leg_timeout_margin_s": 0.0}))
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        start_mission(srv, [{"x_m": 4.5, "y_m": 2.0}], speed_m_s=0.2)
        m = wait_until(lambda: ended(srv), 60, "the mission's end")
        assert m["outcome"].startswith("failed: waypoint 0 (4.50, 2.00) not reached within"), m
        wait_until(lambda: at_rest(srv), 20, "the rover at rest")
    assert srv.state()["state"] == "running"  # a failed mission stops the rover; the robot stays running
    ends = [e for e in srv.get("/api/events?limit=1000")[1]["events"] if e["trigger"] == "behavior_end"]
    assert "not reached within" in ends[-1]["message"]


def test_fail__mission_commands_refused_unless_running(server: ServerProc) -> None:
    status, body = server.post("/api/mission", {"waypoints": TWO})
    assert status == 409 and body["error"]["code"] == "not_running", body
    for cmd in ("pause", "resume", "cancel"):
        status, body = server.post(f"/api/mission/{cmd}")
        assert status == 409 and body["error"]["code"] == "no_mission", body
    assert server.get("/api/mission")[1] == {"mission": None, "running": False}
    status, body = server.get("/api/mission/report")
    assert status == 404 and body["error"]["code"] == "not_found"
    assert server.state()["behavior"] is None and server.state()["state"] == "idle"


TOO_MANY = {"waypoints": [{"x_m": 1.0, "y_m": 1.0}] * 501}
MISSION_BAD = [
    (b"{}", 422, "missing_field", "waypoints"),
    (b'{"waypoints": []}', 422, "out_of_limits", "waypoints"),
    (json.dumps(TOO_MANY).encode(), 422, "out_of_limits", "501"),
    (b'{"waypoints": [{"x_m": 1.0}]}', 422, "missing_field", "y_m"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": "north"}]}', 422, "wrong_type", "y_m"),
    (b'{"waypoints": [{"x_m": 1e400, "y_m": 1.0}]}', 422, "not_finite", "x_m"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": -1e400}]}', 422, "not_finite", "y_m"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0, "heading_deg": 400}]}', 422, "out_of_limits", "heading_deg"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0, "hold_s": -1}]}', 422, "out_of_limits", "hold_s"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "speed_m_s": 2.0}', 422, "out_of_limits", "speed_m_s"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "speed_m_s": 1e400}', 422, "not_finite", "speed_m_s"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "mode": "fly"}', 422, None, "mode"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0, "z_m": 0}]}', 422, None, "z_m"),
    (b'{"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "speed": 0.2}', 422, "unknown_field", "speed"),
    (b'{"waypoints": [{"x_m": 6.5, "y_m": 1.0}]}', 422, "out_of_limits", "outside the field"),  # [mission] field_m
    (b'{"waypoints": [{"x_m": 2e4, "y_m": 1.0}]}', 422, "out_of_limits", "x_m"),
    (b'{"waypoints": "here"}', 422, "wrong_type", "waypoints"),
    (b'{"waypoints": [{"x_m": NaN, "y_m": 1.0}]}', 400, "malformed", ""),
    (b"not json", 400, "malformed", ""),
    (b"[1, 2]", 400, "malformed", ""),
]


@pytest.fixture(scope="module")
def running(tmp_path_factory) -> ServerProc:
    """One server for the refusal tables (a server start is 10–60 s on this loaded machine): each row checks the
    state it leaves (no behaviour, no mission) before the next."""
    tmp = tmp_path_factory.mktemp("missions")
    base = tomllib.loads((REPO / DEFAULT_CONFIG).read_text())
    cfg = deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), {"auth": {"users_file": str(tmp / "users.json")}}),
                     mission_config(tmp))
    path = tmp / "config.toml"
    path.write_text(tomli_w.dumps(cfg))
    srv = ServerProc(path).start()
    assert srv.post("/api/start")[0] == 200
    yield srv
    srv.kill()


@pytest.mark.parametrize("raw, status, code, word", MISSION_BAD, ids=[f"{i}-{b[3] or b[2]}"
                                                                      for i, b in enumerate(MISSION_BAD)])
def test_fail__a_bad_mission_gets_a_4xx_naming_the_field_and_changes_nothing(running, raw, status, code, word):
    got, body = running.request("POST", "/api/mission", raw=raw)
    assert got == status and (code is None or body["error"]["code"] == code), body
    assert word in body["error"]["message"], body
    assert running.state()["behavior"] is None and running.get("/api/mission")[1]["mission"] is None


def test_fail__the_experiment_and_report_reads_refuse_bad_queries(running) -> None:
    status, body = running.get("/api/mission/report?max_points=lots")
    assert status == 422 and body["error"]["code"] == "wrong_type"
    status, body = running.get("/api/mission/report?max_points=1")
    assert status == 422 and body["error"]["code"] == "out_of_limits"


# ---------------------------------------------------------------------- experiments
def test_experiments_are_listed_and_one_runs_with_progress_and_a_report(server_factory, tmp_path) -> None:
    srv = server_factory({"driver": {"time_scale": 8.0}, "server": {"state_dir": str(tmp_path)}},
                         config="config/rover-field.toml")
    status, listed = srv.get("/api/experiments")
    assert status == 200 and listed["experiment"] is None and listed["running"] is False
    names = {e["name"] for e in listed["experiments"]}
    assert names == {"heading_turns", "deployment_line", "deployment_rectangle", "scara_imu_spinup"}
    assert srv.post("/api/experiments/deployment_line", {"trials": 1})[1]["error"]["code"] == "not_running"
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        status, reply = srv.post("/api/experiments/deployment_line", {"trials": 1, "steps": 2})
        assert status == 200 and reply["state"] == "running", reply
        assert reply["experiment"]["experiment"] == "deployment_line"
        progress = wait_until(lambda: (srv.get("/api/experiments")[1]["experiment"] or {}).get("step"), 20,
                              "the experiment's progress")
        assert progress
        done = wait_until(lambda: not srv.get("/api/experiments")[1]["running"] and
                          srv.get("/api/experiments")[1]["experiment"], 200, "the experiment's end")
    assert done["outcome"] == "finished", done
    status, rep = srv.get("/api/experiments/report")
    assert status == 200 and rep["experiment"] == "deployment_line" and len(rep["rows"]) == 2
    assert rep["summary"]["paper"]["uwb_mean_cm"] == 9.08 and rep["summary"]["ours"]["steps"] == 2
    assert all(0.0 < r["uwb_error_cm"] < 40.0 for r in rep["rows"])
    status, html = srv.get("/api/experiments/report.html")
    assert status == 200 and b"9.08" in html and b"paper" in html


def test_cancel_ends_an_experiment_and_the_rover_stops(server_factory, tmp_path) -> None:
    srv = server_factory({"driver": {"time_scale": 4.0}, "server": {"state_dir": str(tmp_path)}},
                         config="config/rover-field.toml")
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        status, reply = srv.post("/api/experiments/heading_turns", {"targets_deg": [360.0], "trials": 1})
        assert status == 200, reply
        wait_until(lambda: abs(srv.state()["values"]["angular_rad_s"]) > 0.1, 30, "the rover turning")
        status, reply = srv.post("/api/experiments/cancel")
        assert status == 200, reply
        wait_until(lambda: at_rest(srv), 20, "the rover at rest")
    listed = srv.get("/api/experiments")[1]
    assert not listed["running"] and listed["experiment"]["outcome"].startswith("cancelled")
    assert srv.post("/api/experiments/cancel")[1]["error"]["code"] == "no_experiment"


def field_calibrated(tmp_path) -> dict[str, Any]:
    """The field profile with its magnetometer calibration already stored (the profile's own hard and soft iron, as a
    calibration turn would find them): an experiment then goes straight to its trials, no calibration turn first."""
    state = {"version": 1, "magnetometer": {"offset_ut": [4.0, -2.5, 0.5], "scale": [1 / 1.03, 1 / 0.97, 1.0]}}
    (tmp_path / "calibration-field.json").write_text(json.dumps(state))
    return {"driver": {"time_scale": 4.0}, "server": {"state_dir": str(tmp_path)}}


def experiment_now(srv: ServerProc) -> dict[str, Any]:
    status, body = srv.get("/api/experiments")
    assert status == 200, body
    return body


def trial_under_way(srv: ServerProc) -> bool:
    """The deployment's trial mission is driving (not the set-up's "go to the start") and the rover moves."""
    exp = experiment_now(srv)["experiment"] or {}
    current = exp.get("current") or {}
    return (exp.get("step", "").startswith("trial 1 of") and current.get("name") == "mission"
            and current.get("phase") == "driving" and moving(srv))


def still_for(srv: ServerProc, seconds: float) -> None:
    """At rest and with no behaviour the whole time (polled): nothing restarts the motion by itself."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        st = srv.state()
        assert st["behavior"] is None, st["behavior"]
        assert at_rest(srv), st["values"]
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["http", "websocket"])
def test_an_estop_inside_a_running_experiment_stops_it_for_good(server_factory, tmp_path, how) -> None:
    """Issue 23: an e-stop mid-experiment stops the rover, ends the experiment as stopped by the e-stop (not finished),
    nothing moves until reset and start, and the experiment runs again afterwards."""
    srv = server_factory(field_calibrated(tmp_path), config="config/rover-field.toml")
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        wait_until(lambda: srv.get("/api/calibration")[1]["active"]["magnetometer"], 20, "the stored calibration")
        status, reply = srv.post("/api/experiments/deployment_line", {"trials": 1, "steps": 3})
        assert status == 200, reply
        wait_until(lambda: trial_under_way(srv), 120, "the trial's mission driving")
        if how == "http":
            status, reply = srv.post("/api/estop")
            assert status == 200 and reply["state"] == "estop", reply
        else:
            async def ws_estop() -> dict:
                async with aiohttp.ClientSession() as s, s.ws_connect(srv.ws_url + "/ws/telemetry") as ws:
                    return await Client.ws_call(ws, "estop")
            ack = asyncio.run(ws_estop())
            assert ack["type"] == "ack", ack
        wait_until(lambda: at_rest(srv), 20, "the rover at rest")
        st = srv.state()
        assert st["state"] == "estop" and st["behavior"] is None, st
        assert st["setpoint"]["linear"] == 0.0 and st["setpoint"]["angular"] == 0.0, st["setpoint"]
        exp = experiment_now(srv)
        assert exp["running"] is False, exp
        outcome = exp["experiment"]["outcome"]
        assert outcome.startswith("cancelled") and "e-stop" in outcome, exp  # not "finished"
        assert srv.get("/api/experiments/report")[1]["status"]["outcome"] == outcome
        still_for(srv, 2.0)
        assert srv.post("/api/reset")[0] == 200
        wait_until(lambda: srv.state()["state"] == "idle", 10, "idle after the reset")
        still_for(srv, 1.0)  # a reset never restarts motion
        assert srv.post("/api/start")[0] == 200
        still_for(srv, 1.0)  # nor does a start: the experiment is over
        assert experiment_now(srv)["running"] is False
        status, reply = srv.post("/api/experiments/deployment_line", {"trials": 1, "steps": 3})
        assert status == 200 and reply["state"] == "running", reply
        wait_until(lambda: moving(srv), 60, "the rover under way in the new run")
        exp = experiment_now(srv)
        assert exp["running"] is True and exp["experiment"]["outcome"] is None, exp
        assert srv.post("/api/experiments/cancel")[0] == 200
        wait_until(lambda: at_rest(srv), 20, "the rover at rest")


@pytest.mark.parametrize("path, body, status, code", [
    ("/api/experiments/no_such_thing", {}, 404, "not_found"),
    ("/api/experiments/scara_imu_spinup", {}, 409, "unavailable"),  # the arm's, on a rover
    ("/api/experiments/heading_turns", {"trials": 0}, 422, "out_of_limits"),
    ("/api/experiments/heading_turns", {"trials": "five"}, 422, "wrong_type"),
    ("/api/experiments/heading_turns", {"speed": 1}, 422, "unknown_field"),
    ("/api/experiments/heading_turns", b'{"targets_deg": [1e400]}', 422, "not_finite"),
    ("/api/experiments/heading_turns", b'{"targets_deg": [90], "trials": 1', 400, "malformed"),
])
def test_fail__a_bad_experiment_request_is_refused_and_nothing_runs(running, path, body, status, code) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, reply = running.request("POST", path, raw=raw)
    assert got == status and reply["error"]["code"] == code, reply
    assert running.state()["behavior"] is None and running.get("/api/experiments")[1]["experiment"] is None


# ---------------------------------------------------------------------- logged in
async def test_logged_in_a_viewer_cannot_start_a_mission_and_the_lease_holder_can(server_factory, tmp_path):
    from tests.server.gateway.auth.client import make_users

    users = make_users(tmp_path / "users.json", {"vera": "viewer", "olga": "operator"})
    srv = server_factory({**mission_config(tmp_path), "auth": {"users_file": str(users)}})
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        client = Client(srv.url, http)
        vera, olga = await client.login("vera"), await client.login("olga")
        status, body, _ = await client.request("POST", "/api/mission", vera, json_body={"waypoints": TWO})
        assert status == 403, body
        assert (await client.request("POST", "/api/lease/take", olga, json_body={}))[0] == 200
        assert (await client.request("POST", "/api/start", olga, json_body={}))[0] == 200
        status, body, _ = await client.request("POST", "/api/mission", olga, json_body={"waypoints": TWO})
        assert status == 200 and body["mission"]["legs"] == 2, body
        status, body, _ = await client.request("GET", "/api/mission", vera)
        assert status == 200 and body["running"] is True
        assert [(w["x_m"], w["y_m"]) for w in body["mission"]["waypoints"]] == [(w["x_m"], w["y_m"]) for w in TWO]
        status, body, _ = await client.request("POST", "/api/mission/cancel", vera, json_body={})
        assert status == 403
        status, body, _ = await client.request("POST", "/api/mission/cancel", olga, json_body={})
        assert status == 200 and body["mission"]["outcome"].startswith("cancelled")


def test_a_mission_on_an_arm_is_refused_and_nothing_moves(server_factory) -> None:
    """The runtime asks the controller what it declares it takes (no profile name): an arm takes no rover setpoint."""
    srv = server_factory({"safety": {"command_timeout_s": 60.0}}, config="config/scara-sim.toml")
    assert srv.post("/api/start")[0] == 200
    status, body = srv.post("/api/mission", {"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "mode": "drive"})
    assert status == 409 and body["error"]["code"] == "unavailable", body
    assert srv.get("/api/mission")[1].get("status") in (None, "idle"), srv.get("/api/mission")[1]
