"""Missions (issue 23) in process: the real control loop, supervisor, estimator and simulated rover, ticked by hand
(server.runtime.experiments.runner.OfflineRobot). Waypoints reached within the bound by the true pose, per-leg
results, pause/resume, cancel, e-stop, link loss, a safety rule and the failure bounds mid-mission, and the
requests' checks."""

from __future__ import annotations

import math
import time

import msgspec
import pytest

from server.errors import ConflictError, NotFoundError, ValidationError
from server.runtime.behaviours.mission import MissionMethods, MissionParams, ReportParams, Waypoint
from server.runtime.experiments.runner import OfflineRobot
from server.runtime.supervisor import Refused, State
from server.runtime_api.params import Empty
from server.validation import convert

# an ideal magnetometer apart from its noise (these tests are about the mission, test_calibration's about the iron)
CLEAN_MAG = {"magnetometer": {"hard_iron_ut": [0.0, 0.0, 0.0], "soft_iron": [1.0, 1.0, 1.0]}}
# the default world: the rover starts at the field's centre (3, 2) facing east; boxes at (4.5, 1.0) and (2.0, 3.2)
SQUARE = [Waypoint(4.0, 2.0), Waypoint(4.0, 2.8), Waypoint(3.0, 2.8, heading_deg=270.0), Waypoint(3.0, 2.0, hold_s=0.5)]


def robot(**overrides) -> tuple[OfflineRobot, MissionMethods]:
    cfg = {"driver": {"time_scale": 2.0, **CLEAN_MAG}, "safety": {"command_timeout_s": 0.5}}
    for key, value in overrides.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    bot = OfflineRobot(overrides=cfg)
    bot.tick(100)  # the first UWB fixes: a position estimate
    return bot, MissionMethods(bot.robot)


def run_to_end(bot: OfflineRobot, m: MissionMethods, max_ticks: int = 20000) -> dict:
    for _ in range(max_ticks):
        if bot.loop.behavior is not m.mission:
            return m.report(ReportParams())
        bot.tick()
    raise AssertionError(f"the mission did not end: {m.mission.status()}")


def true_speed(bot: OfflineRobot) -> float:
    v = bot.loop.snapshot()["values"]
    return max(abs(v["wheel_left_rad_s"]), abs(v["wheel_right_rad_s"]))


def until_still(bot: OfflineRobot, ticks: int = 300) -> None:
    for _ in range(ticks):
        bot.tick()
        if true_speed(bot) < 1e-3:
            return
    raise AssertionError(f"the rover did not stop: {true_speed(bot)} rad/s")


def test_a_drive_mission_reaches_its_waypoints_by_the_true_pose() -> None:
    bot, m = robot()
    bot.start()
    reply = m.start(MissionParams(waypoints=SQUARE, speed_m_s=0.25))
    assert reply["state"] == "running" and reply["mission"]["legs"] == 4
    rep = run_to_end(bot, m)
    assert rep["outcome"] == "finished" and len(rep["legs"]) == 4
    passes, stops = rep["legs"][:2], rep["legs"][2:]  # through the first two; stops where a heading or hold is asked
    for leg in passes:
        assert leg["arrival"] == "passed" and leg["true_arrival_error_m"] < 0.25  # cut the corner, ~lookahead/2
    for leg in stops:
        assert leg["arrival"] == "stopped" and leg["outcome"] == "reached"
        assert leg["true_arrival_error_m"] < 0.1, leg  # 3 cm by the estimate, plus the estimate's own error
    heading = rep["legs"][2]["waypoint_heading"]
    assert abs(heading["true_error_deg"]) < 5.0 and abs(heading["error_deg"]) < 5.0
    truth = bot.truth
    assert math.hypot(truth["x"] - 3.0, truth["y"] - 2.0) < 0.1 and bot.state is State.RUNNING
    triggers = [e.trigger for e in bot.loop.events]
    assert triggers.count("mission_leg") == 4 and "behavior_end" in triggers
    assert rep["summary"]["true_arrival_error_m"]["n"] == 4 and len(rep["path"]["truth"]) > 10


def test_a_step_mission_turns_drives_settles_and_fixes_on_every_leg() -> None:
    bot, m = robot()
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(3.5, 2.0), Waypoint(3.5, 2.5), Waypoint(3.0, 2.5)], mode="step"))
    rep = run_to_end(bot, m)
    assert rep["outcome"] == "finished"
    for leg in rep["legs"]:
        assert leg["arrival"] == "stopped" and leg["true_arrival_error_m"] < 0.1
        assert leg["uwb_fix"]["n"] >= 5 and leg["uwb_fix_error_m"] < 0.3  # the mean of fix_s of fixes
        assert leg["estimate_error_m"] < 0.1
        assert abs(leg["leg_heading"]["true_error_deg"]) < 6.0  # the [heading] tolerance, 5°, and the estimate's
    assert rep["summary"]["uwb_fix_error_m"]["n"] == 3


def test_pause_stops_the_rover_where_it_is_and_resume_finishes_the_mission() -> None:
    bot, m = robot()
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(4.5, 2.0)], speed_m_s=0.2))
    for _ in range(150):
        bot.tick()
    assert true_speed(bot) > 1.0  # under way
    reply = m.pause(Empty())
    assert reply["mission"]["paused"] is True and bot.loop.behavior is m.mission
    until_still(bot)
    x, clock = bot.truth["x"], m.mission.leg_clock_s
    bot.tick(300)  # 3 s paused (6 s of sim time): nothing moves, the leg's clock stands
    assert bot.truth["x"] == pytest.approx(x, abs=1e-4) and m.mission.leg_clock_s == clock
    m.resume(Empty())
    rep = run_to_end(bot, m)
    assert rep["outcome"] == "finished" and rep["legs"][0]["true_arrival_error_m"] < 0.1
    triggers = [e.trigger for e in bot.loop.events]
    assert triggers.index("mission_pause") < triggers.index("mission_resume")


def test_cancel_ends_the_mission_and_the_rover_stops() -> None:
    bot, m = robot()
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(4.5, 2.0)]))
    bot.tick(150)
    m.cancel(Empty())
    assert bot.loop.behavior is None and m.mission.outcome == "cancelled: mission cancelled by the operator"
    until_still(bot)
    assert bot.state is State.RUNNING and bot.truth["x"] < 4.4  # stopped short
    assert m.report(ReportParams())["outcome"].startswith("cancelled")
    with pytest.raises(ConflictError) as err:
        m.cancel(Empty())
    assert err.value.code == "no_mission"


def test_estop_mid_mission_cuts_the_outputs_and_cancels_it() -> None:
    bot, m = robot()
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(4.5, 2.0)]))
    bot.tick(150)
    bot.loop.estop("test")
    assert bot.driver.command == (0.0, 0.0) and bot.state is State.ESTOP
    assert bot.loop.behavior is None and m.mission.outcome == "cancelled: e-stop"
    until_still(bot)


def test_link_loss_mid_mission_stops_the_rover() -> None:
    bot, m = robot()
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(5.0, 2.0)]))
    bot.tick(150)
    assert true_speed(bot) > 1.0
    bot.heartbeat = False  # the operator goes silent: a mission is kept alive by the heartbeat like any motion
    # the watchdog counts the loop's monotonic clock, not ticks: tick at the loop's pace, as the runtime does, or a
    # hand-ticked loop finishes the mission before half a second has passed
    deadline = time.monotonic() + 30.0
    while bot.state is not State.ESTOP and time.monotonic() < deadline:
        bot.tick()
        time.sleep(bot.dt_s)
    assert bot.state is State.ESTOP and bot.loop.supervisor.cause.trigger == "link_loss"
    assert bot.loop.behavior is None and m.mission.outcome.startswith("cancelled")
    until_still(bot)


def test_a_safety_rule_still_applies_during_a_mission() -> None:
    bot, m = robot()
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(5.95, 2.0)]))  # into the east wall: the front ranger's rule stops it
    for _ in range(3000):
        bot.tick()
        if bot.state is State.ESTOP:
            break
    cause = bot.loop.supervisor.cause
    assert bot.state is State.ESTOP and (cause.trigger, cause.rule) == ("rule", "obstacle_front")
    assert m.mission.outcome.startswith("cancelled") and bot.truth["collisions"] == 0
    until_still(bot)


def test_a_waypoint_not_reached_within_its_bound_fails_the_mission_with_the_reason() -> None:
    bot, m = robot(mission={"leg_timeout_factor": 1.0, "leg_timeout_margin_s": 0.0})  # no slack for the ramps
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(4.5, 2.0)], speed_m_s=0.2))
    rep = run_to_end(bot, m)
    assert rep["outcome"].startswith("failed: waypoint 0 (4.50, 2.00) not reached within")
    end = [e for e in bot.loop.events if e.trigger == "behavior_end"][-1]
    assert "not reached within" in end.message
    until_still(bot)
    assert bot.state is State.RUNNING  # a failed mission stops the rover; the robot stays running


def test_pushed_out_of_the_corridor_the_mission_fails() -> None:
    bot, m = robot(mission={"max_cross_track_m": 0.3})
    bot.start()
    m.start(MissionParams(waypoints=[Waypoint(5.0, 2.0)], speed_m_s=0.15))
    bot.tick(150)
    bot.teleport(bot.truth["x"], 2.8, 0.0)  # pushed 0.8 m sideways
    rep = run_to_end(bot, m)
    assert "left the corridor of leg 0" in rep["outcome"]


def test_fail__a_mission_is_refused_unless_running() -> None:
    bot, m = robot()
    with pytest.raises(Refused) as err:
        m.start(MissionParams(waypoints=[Waypoint(4.0, 2.0)]))
    assert err.value.code == "not_running" and bot.loop.behavior is None
    with pytest.raises(ConflictError):
        m.pause(Empty())
    with pytest.raises(NotFoundError):
        m.report(ReportParams())


BAD = [
    ({"waypoints": []}, "out_of_limits", "waypoints"),
    ({"waypoints": [{"x_m": 1.0}]}, "missing_field", "y_m"),
    ({"waypoints": [{"x_m": 1.0, "y_m": "north"}]}, "wrong_type", "y_m"),
    ({"waypoints": [{"x_m": 1e400, "y_m": 1.0}]}, "not_finite", "x_m"),
    ({"waypoints": [{"x_m": 1.0, "y_m": 1.0, "heading_deg": 400}]}, "out_of_limits", "heading_deg"),
    ({"waypoints": [{"x_m": 1.0, "y_m": 1.0, "hold_s": -1}]}, "out_of_limits", "hold_s"),
    ({"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "speed_m_s": 2.0}, "out_of_limits", "speed_m_s"),
    ({"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "mode": "fly"}, None, "mode"),
    ({"waypoints": [{"x_m": 1.0, "y_m": 1.0, "z_m": 0}]}, None, "z_m"),  # the explainer's word for a nested one
    ({"waypoints": [{"x_m": 1.0, "y_m": 1.0}], "speed": 0.2}, "unknown_field", "speed"),
    ({"waypoints": [{"x_m": 2e4, "y_m": 1.0}]}, "out_of_limits", "x_m"),
]


@pytest.mark.parametrize("body, code, field", BAD, ids=[b[2] + "-" + str(b[1]) for b in BAD])
def test_fail__a_bad_mission_names_the_field_and_changes_nothing(body, code, field) -> None:
    bot, m = robot()
    bot.start()
    with pytest.raises(ValidationError) as err:
        m.start(convert(body, MissionParams))
    assert field in err.value.message and (code is None or err.value.code == code), err.value
    assert bot.loop.behavior is None and m.mission is None


def test_the_body_struct_round_trips() -> None:
    p = MissionParams(waypoints=SQUARE, speed_m_s=0.3, mode="step", label="square")
    assert msgspec.convert(msgspec.to_builtins(p), MissionParams) == p
