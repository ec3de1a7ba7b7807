"""The seed experiments (issue 23) on the real loop and simulator, ticked by hand: their results against the goals
(the disturbed compass within 1°, the fused estimate within a third of raw UWB on the rectangle, the virtual IMU
within the paper's error levels), the runtime API's side (list, run, status, report, cancel) and its refusals."""

from __future__ import annotations

import doctest

import pytest

import server.runtime.experiments.deployment
import server.runtime.experiments.heading_turns
from server.config import REPO_ROOT
from server.errors import ConflictError, NotFoundError, ValidationError
from server.runtime.experiments import EXPERIMENTS, ExperimentMethods, ExperimentParams, describe, paper, run_offline
from server.runtime.experiments.runner import OfflineRobot
from server.runtime.supervisor import Refused, State
from server.runtime_api.params import Empty

FIELD = REPO_ROOT / "config" / "rover-field.toml"


@pytest.mark.parametrize("module", [server.runtime.experiments.deployment, server.runtime.experiments.heading_turns])
def test_docstring_examples(module) -> None:
    assert doctest.testmod(module).failed == 0


def test_every_experiment_is_listed_with_its_defaults() -> None:
    listed = {e["name"]: e for e in describe()}
    assert set(listed) == set(EXPERIMENTS)
    assert listed["heading_turns"]["params"]["trials"] == paper.HEADING_TRIALS == 5
    assert listed["heading_turns"]["params"]["targets_deg"] == [45.0, 90.0, 135.0, 180.0, 225.0, 270.0, 315.0, 360.0]
    assert listed["deployment_line"]["profile"] == "config/rover-field.toml"


@pytest.mark.timeout(300)
def test_heading_turns_with_the_disturbed_compass_stays_within_a_degree_and_reports_the_disturbance() -> None:
    # the spot beside the drain cover: the field there is bent by 4–17 µT (docs/sensing.md); two targets, one trial
    result = run_offline("heading_turns", FIELD, params={"targets_deg": [90.0, 360.0], "trials": 1})
    assert result["status"]["outcome"] == "finished"
    overall = {row["method"]: row for row in result["overall"]}
    compass, encoder = overall["compass"]["ours"], overall["encoder"]["ours"]
    assert compass["mean_deviation_deg"] <= 1.0, result["trials"]
    assert compass["compass_disturbed"] == compass_trials(result)  # every trial saw it, and said so
    assert encoder["mean_deviation_deg"] > compass["mean_deviation_deg"]  # the slipping wheels alone are worse
    assert overall["compass"]["paper"] == {"mean_deviation_deg": 3.64, "mean_variance_deg2": 0.65}
    assert [r["target_deg"] for r in result["rows"] if r["method"] == "compass"] == [90.0, 360.0]


def compass_trials(result: dict) -> int:
    return sum(t["method"] == "compass" for t in result["trials"])


@pytest.mark.timeout(300)
def test_deployment_rectangle_fused_is_within_a_third_of_raw_uwb() -> None:
    result = run_offline("deployment_rectangle", FIELD)
    ours = result["summary"]["ours"]
    assert result["status"]["outcome"] == "finished" and ours["steps"] == 16
    assert ours["fused_mean_cm"] <= ours["uwb_mean_cm"] / 3.0, ours
    assert result["summary"]["paper"]["uwb_mean_cm"] == 9.08
    rows = result["rows"]
    assert all(r["uwb_fix"]["n"] >= 5 and r["truth"] is not None for r in rows)


@pytest.mark.timeout(300)
def test_a_short_straight_deployment_reports_every_step() -> None:
    result = run_offline("deployment_line", FIELD, params={"trials": 1, "steps": 3})
    assert result["status"]["outcome"] == "finished" and len(result["rows"]) == 3
    assert [r["step"] for r in result["rows"]] == [1, 2, 3]
    assert [r["target"]["y_m"] for r in result["rows"]] == pytest.approx([2.5, 3.0, 3.5])
    assert all(0.0 < r["uwb_error_cm"] < 40.0 and r["fused_error_cm"] < 20.0 for r in result["rows"])


def test_the_arm_s_virtual_imu_reads_the_analytic_values() -> None:
    result = run_offline("scara_imu_spinup")
    assert result["status"]["outcome"] == "finished"
    rows = {r["case"].split(":")[0].split(" ω")[0]: r["ours"] for r in result["rows"]}
    rest, cruise = rows["at rest"], rows["constant rate"]
    assert rest["acc_max_error_m_s2"] <= paper.IMU_ACC_ERROR_M_S2 and rest["gyro_max_error_rad_s"] <= 1e-12
    assert cruise["samples"] > 50
    assert cruise["radial_max_error_m_s2"] <= paper.IMU_ACC_ERROR_M_S2
    assert cruise["gyro_max_error_rad_s"] <= paper.IMU_GYRO_ERROR_RAD_S
    assert cruise["radial_analytic_m_s2"] == pytest.approx(0.316228 * paper.SPIN_RATE_RAD_S ** 2, rel=1e-5)
    spinup = rows["spin-up time to"]
    assert spinup["gyro_error_s"] <= 0.01 and spinup["true_motion_s"] >= spinup["reference_s"]


# ---------------------------------------------------------------- the runtime API's side
def field_robot() -> tuple[OfflineRobot, ExperimentMethods]:
    bot = OfflineRobot(FIELD, overrides={"driver": {"time_scale": 2.0}})
    bot.tick(50)
    return bot, ExperimentMethods(bot.robot, offline=True)  # no event loop here to fit on


def test_run_status_and_report_through_the_methods() -> None:
    bot, m = field_robot()
    names = {e["name"] for e in m.methods()["experiments"][1](Empty())["experiments"]}
    assert names == set(EXPERIMENTS)
    bot.start()
    reply = m.start(ExperimentParams(name="deployment_line", params={"trials": 1, "steps": 1}))
    assert reply["state"] == "running" and reply["experiment"]["experiment"] == "deployment_line"
    for _ in range(40000):
        if bot.loop.behavior is not m.run:
            break
        bot.tick()
    status = m.status(Empty())
    assert status["running"] is False and status["experiment"]["outcome"] == "finished"
    report = m.report(Empty())
    assert report["experiment"] == "deployment_line" and len(report["rows"]) == 1
    assert [e.trigger for e in bot.loop.events].count("behavior_end") >= 1


def test_cancel_and_estop_end_an_experiment_and_the_rover_stops() -> None:
    bot, m = field_robot()
    bot.start()
    m.start(ExperimentParams(name="heading_turns", params={"targets_deg": [360.0], "trials": 1}))
    bot.tick(400)
    m.cancel(Empty())
    assert bot.loop.behavior is None and m.run.outcome == "cancelled: experiment cancelled by the operator"
    m.start(ExperimentParams(name="heading_turns", params={"targets_deg": [360.0], "trials": 1}))
    bot.tick(400)
    bot.loop.estop("test")
    assert bot.state is State.ESTOP and m.run.outcome == "cancelled: e-stop" and bot.driver.command == (0.0, 0.0)
    assert "status" in m.report(Empty())  # what was measured so far stays readable


def test_fail__experiments_refused_with_a_reason() -> None:
    bot, m = field_robot()
    with pytest.raises(Refused) as refused:  # not running
        m.start(ExperimentParams(name="deployment_line"))
    assert refused.value.code == "not_running"
    bot.start()
    with pytest.raises(NotFoundError):
        m.start(ExperimentParams(name="no_such_experiment"))
    with pytest.raises(ConflictError) as conflict:  # the arm's experiment on the rover
        m.start(ExperimentParams(name="scara_imu_spinup"))
    assert conflict.value.code == "unavailable"
    with pytest.raises(ValidationError) as bad:
        m.start(ExperimentParams(name="heading_turns", params={"trials": 0}))
    assert bad.value.code == "out_of_limits"
    with pytest.raises(ValidationError) as unknown:
        m.start(ExperimentParams(name="heading_turns", params={"speed": 1}))
    assert "speed" in unknown.value.message and unknown.value.code == "unknown_field"
    with pytest.raises(ConflictError):
        m.cancel(Empty())
    assert bot.loop.behavior is None and m.run is None
