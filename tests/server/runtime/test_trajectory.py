"""Trajectory runs in the loop (issue 13 item 6): phases, the report against robotics.tracking on the recorded
samples, cancellation by stop and e-stop, uploads in parts, and the checks a trajectory must pass before it
runs. On the real control loop with the real simulated arm and platform, ticks driven by hand."""

from __future__ import annotations

import numpy as np
import pytest

from robotics.tracking import deviation_by_axis
from robotics.trajectory import MAX_POINTS, scara_demo
from server.errors import ConflictError, NotFoundError, ValidationError
from server.runtime.behaviours.trajectory import TrajectoryMethods
from server.runtime.supervisor import Refused
from server.runtime_api.params import Empty, ReportParams, TrajectoryRunParams, TrajectoryUploadParams
from tests.server.runtime.test_scara_controller import SCARA, Ticker
from tests.server.runtime.test_stewart_controller import STEWART


def started(overrides: dict) -> tuple[Ticker, TrajectoryMethods]:
    t = Ticker(overrides)
    t.loop.start_robot()
    return t, TrajectoryMethods(t.robot)


def run_to_end(t: Ticker, m: TrajectoryMethods, max_ticks: int = 5000) -> None:
    for _ in range(max_ticks):
        if m.run.finished:
            return
        t.tick()
    raise AssertionError(f"the run did not end: {m.run.status()}")


def test_a_run_approaches_runs_settles_and_reports_its_tracking() -> None:
    t, m = started(SCARA)
    reply = m.start(TrajectoryRunParams(series="scara_demo"))
    assert reply["trajectory"]["phase"] == "approach" and reply["state"] == "running"
    phases = set()
    while not m.run.finished:
        t.tick()
        phases.add(m.run.phase)
        if m.run.phase == "run":
            with pytest.raises(ConflictError) as err:
                m.report(ReportParams())
            assert err.value.code == "trajectory_running"
    assert {"run", "settle", "done"} <= phases
    rep = m.report(ReportParams(max_points=50))
    run = m.run
    n = run.count
    assert rep["outcome"] == "finished" and rep["samples"] == n and n >= 1000
    assert rep["moving_axes"] == ["q1_rad", "q2_rad"]
    # the commanded samples are the trajectory's, in order, one per tick of 10 ms
    assert np.all(np.diff(run.t_rec[:n]) > 0) and run.t_rec[1] - run.t_rec[0] == pytest.approx(0.01)
    demo = scara_demo()
    assert run.commanded[:n] == pytest.approx(demo.sample(run.t_rec[:n]), abs=1e-12)
    # the statistics are robotics.tracking's on what was recorded
    expected = deviation_by_axis(("q1_rad", "q2_rad"), run.commanded[:n], run.achieved[:n])
    for axis, stats in expected.items():
        assert rep["deviation"][axis] == pytest.approx(stats, rel=1e-9, abs=1e-15)
    for axis in ("q1_rad", "q2_rad"):
        d = rep["deviation"][axis]
        assert abs(d["mean"]) < 1e-3 and 0 < d["rms"] < 0.02 and d["max_abs"] < 0.05  # the servos' lag
    assert len(rep["series"]["t_s"]) == 50 and set(rep["series"]["achieved"]) == {"q1_rad", "q2_rad"}
    assert rep["saturation"] == {"samples": 0, "events": [], "events_dropped": 0}
    assert [e.trigger for e in t.loop.events if e.trigger.startswith("behavior")] == ["behavior_start",
                                                                                      "behavior_end"]


@pytest.mark.parametrize("how, outcome", [("stop", "cancelled: stop requested"), ("estop", "cancelled: e-stop")])
def test_stop_and_estop_cancel_a_run(how: str, outcome: str) -> None:
    t, m = started(SCARA)
    m.start(TrajectoryRunParams(series="scara_demo"))
    while m.run.phase != "run":
        t.tick()
    t.tick(50)
    t.loop.stop_robot() if how == "stop" else t.loop.estop()
    assert m.run.phase == "cancelled" and m.run.outcome == outcome
    rep = m.report(ReportParams())
    assert rep["outcome"] == outcome and 40 <= rep["samples"] <= 60
    assert t.loop.behavior is None and t.loop.snapshot()["behavior"] is None


def test_a_run_needs_a_running_robot_and_reports_need_a_run() -> None:
    t = Ticker(SCARA)
    m = TrajectoryMethods(t.robot)
    with pytest.raises(NotFoundError):
        m.report(ReportParams())
    with pytest.raises(Refused) as err:
        m.start(TrajectoryRunParams(series="scara_demo"))
    assert err.value.code == "not_running"


def test_the_platform_runs_a_paper_series_and_its_report_names_the_moving_axis() -> None:
    t, m = started(STEWART)
    m.start(TrajectoryRunParams(series="pitch"))
    run_to_end(t, m)
    rep = m.report(ReportParams())
    assert rep["outcome"] == "finished" and rep["moving_axes"] == ["pitch_rad"]
    d = rep["deviation"]["pitch_rad"]
    assert np.degrees(d["rms"]) < 1.0 and abs(rep["deviation"]["z_m"]["rms"]) < 1e-4


def test_a_saturating_platform_reports_the_saturation_events() -> None:
    t, m = started({**STEWART, "robot": {"profile": "stewart", "saturate": True}})
    upload(m, {"t_s": [0.0, 3.0, 6.0], "z_m": [0.5, 0.8, 0.5]})  # the legs top out above z = 0.668 m
    m.start(TrajectoryRunParams(upload="u1"))
    run_to_end(t, m)
    rep = m.report(ReportParams())
    sat = rep["saturation"]
    assert sat["samples"] > 100 and [e["legs"] for e in sat["events"]] == [[1, 2, 3, 4, 5, 6], []]
    first = sat["events"][0]
    assert 1.6 < first["t_s"] < 1.8 and 0 < first["report"][0]["excess_m"] < 0.005
    assert rep["deviation"]["z_m"]["max_abs"] > 0.1  # the shortfall shows in the deviation (0.8 − 0.668 m)


# ---------------------------------------------------------------------- uploads and checks
def upload(m: TrajectoryMethods, columns: dict, parts: int = 1, upload_id: str = "u1") -> dict:
    n = len(columns["t_s"])
    size = -(-n // parts)
    reply = {}
    for p in range(parts):
        part = {k: v[p * size:(p + 1) * size] for k, v in columns.items()}
        reply = m.upload(TrajectoryUploadParams(upload=upload_id, part=p, columns=part))
    return reply


def test_an_upload_in_parts_runs_as_one_trajectory() -> None:
    t, m = started(SCARA)
    demo = scara_demo(points=300)
    assert upload(m, demo.to_json(), parts=3)["points"] == 300
    m.start(TrajectoryRunParams(upload="u1"))
    assert m.run.trajectory.times_s == pytest.approx(demo.times_s) and m.run.label == "upload"
    run_to_end(t, m)
    assert m.report(ReportParams())["outcome"] == "finished"


def test_fail__uploads_out_of_order_or_too_long() -> None:
    t, m = started(SCARA)
    cols = {"t_s": [0.0, 1.0], "q1_rad": [0.0, 0.1], "q2_rad": [1.0, 1.0]}
    with pytest.raises(ValidationError, match="out of order"):
        m.upload(TrajectoryUploadParams(upload="u1", part=1, columns=cols))
    m.upload(TrajectoryUploadParams(upload="u1", part=0, columns=cols))
    with pytest.raises(ValidationError, match="same columns"):
        m.upload(TrajectoryUploadParams(upload="u1", part=1, columns={"t_s": [2.0], "q1_rad": [0.1]}))
    with pytest.raises(NotFoundError):
        m.start(TrajectoryRunParams(upload="other"))
    wide = {"t_s": [0.0], **{f"a{i}": [0.0] for i in range(17)}}  # bounded in columns as well as rows
    with pytest.raises(ValidationError, match="at most 16 axes") as err:
        m.upload(TrajectoryUploadParams(upload="wide", part=0, columns=wide))
    assert err.value.code == "out_of_limits"
    big = {"t_s": [0.0] * (MAX_POINTS // 2 + 1), "q1_rad": [0.0] * (MAX_POINTS // 2 + 1)}
    m.upload(TrajectoryUploadParams(upload="big", part=0, columns=big))
    with pytest.raises(ValidationError, match=f"at most {MAX_POINTS} points") as err:
        m.upload(TrajectoryUploadParams(upload="big", part=1, columns=big))
    assert err.value.code == "out_of_limits"


def columns(times, q1, q2) -> dict:
    return {"t_s": list(times), "q1_rad": list(q1), "q2_rad": list(q2)}


SCARA_BAD = [
    (columns([0, 1, 2], [0, 0.5, 3.0], [1, 1, 1]), "beyond_limits", "q1_rad at t = 2 s=3"),
    (columns([0, 0.1], [0, 1.0], [1, 1]), "beyond_limits", "q1_rad moves at 10/s between t = 0 s and 0.1 s"),
    ({"t_s": [0, 1], "x_m": [0, 1]}, "invalid", "columns t_s, q1_rad, q2_rad"),
    (columns([0, 0], [0, 0], [1, 1]), "invalid", "times must increase strictly"),
]


@pytest.mark.parametrize("cols, code, text", SCARA_BAD, ids=[c for _, c, _t in SCARA_BAD])
def test_fail__scara_trajectories_refused_naming_the_sample(cols: dict, code: str, text: str) -> None:
    t, m = started(SCARA)
    upload(m, cols)
    before = t.state()
    with pytest.raises(ValidationError) as err:
        m.start(TrajectoryRunParams(upload="u1"))
    assert err.value.code == code and text in err.value.message
    assert t.state() == before and t.loop.behavior is None


def test_fail__platform_samples_out_of_the_stroke_and_the_rover_has_no_trajectories() -> None:
    t, m = started(STEWART)
    upload(m, {"t_s": [0.0, 2.0, 4.0], "z_m": [0.5, 0.6, 0.85]})
    with pytest.raises(ValidationError, match="sample at t = 4 s needs legs outside their stroke") as err:
        m.start(TrajectoryRunParams(upload="u1"))
    assert err.value.code == "out_of_stroke"
    with pytest.raises(ValidationError, match="unknown series 'nope'"):
        m.start(TrajectoryRunParams(series="nope"))
    rover = TrajectoryMethods(Ticker({"safety": {"command_timeout_s": 60.0}}).robot)
    for call in (lambda: rover.status(Empty()), lambda: rover.start(TrajectoryRunParams(series="vertical"))):
        with pytest.raises(ConflictError) as err:
            call()
        assert err.value.code == "unavailable" and "rover" in err.value.message


def test_a_report_fits_one_runtime_frame_whatever_it_is_asked_for() -> None:
    from server.runtime_api.protocol import dumps

    t, m = started(STEWART)
    times = np.arange(0.0, 8.0, 0.01)
    wave = 0.01 * np.sin(times)
    cols = {"t_s": times.tolist(), "x_m": wave.tolist(), "y_m": wave.tolist(), "z_m": (0.5 + wave).tolist(),
            "roll_rad": wave.tolist(), "pitch_rad": wave.tolist(), "yaw_rad": wave.tolist()}  # every axis moves
    upload(m, cols, parts=4)
    m.start(TrajectoryRunParams(upload="u1"))
    run_to_end(t, m)
    rep = m.report(ReportParams(max_points=2000))
    assert len(rep["moving_axes"]) == 6 and rep["samples"] > 800
    assert len(dumps(rep)) <= 60_000 and 100 < len(rep["series"]["t_s"]) < rep["samples"]
