"""The simulated Stewart platform: six actuators within stroke, speed and acceleration limits; the achieved
pose by forward kinematics; saturation reports; the six test series of seeds/003 with their tracking report."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotics.kinematics.stewart import StewartPlatform, joint_circle
from robotics.tracking import deviation_by_axis
from robotics.trajectory import POSE_AXES, STEWART_SERIES, stewart_series
from sim.stewart import ActuatorParams, StewartSim

PLATFORM = StewartPlatform.symmetric()
DT = 0.01


def steps(sim: StewartSim, seconds: float) -> None:
    for _ in range(round(seconds / DT)):
        sim.step(DT)


def run_series(sim: StewartSim, series) -> tuple[np.ndarray, list]:
    achieved, reports = [], []
    for row in series.values:
        reports.append(sim.command_pose(row[:3], row[3:]))
        sim.step(DT)
        achieved.append(np.concatenate(sim.pose))
    return np.array(achieved), reports


def test_starts_at_home_with_the_nominal_lengths():
    sim = StewartSim(PLATFORM)
    assert sim.lengths.tolist() == pytest.approx(PLATFORM.nominal_lengths.tolist())
    assert [v.tolist() for v in sim.pose] == [v.tolist() for v in PLATFORM.home]
    assert sim.pose_valid and not sim.saturation.saturated


def test_a_pose_command_is_reached_and_solved_back_by_forward_kinematics():
    sim = StewartSim(PLATFORM)
    target = ((0.03, -0.02, 0.54), (0.05, -0.1, 0.2))
    report = sim.command_pose(*target)
    steps(sim, 2.0)
    assert not report.saturated and sim.pose_valid
    assert np.allclose(sim.lengths, PLATFORM.leg_lengths(*target), atol=1e-9)
    assert np.allclose(np.concatenate(sim.pose), np.concatenate(target), atol=1e-8)


def test_legs_respect_the_speed_and_acceleration_limits():
    sim = StewartSim(PLATFORM, ActuatorParams(max_velocity_m_s=0.05, max_acceleration_m_s2=0.5))
    sim.command_pose((0.0, 0.0, 0.6), (0.0, 0.0, 0.0))
    rates = []
    for _ in range(100):
        sim.step(DT)
        rates.append(sim.velocities)
    rates = np.array(rates)
    assert np.abs(rates).max() == pytest.approx(0.05)
    assert np.abs(np.diff(rates, axis=0)).max() <= 0.5 * DT + 1e-12


def test_a_pose_beyond_the_stroke_is_clamped_and_reported_leg_by_leg():
    sim = StewartSim(PLATFORM)
    report = sim.command_pose((0.0, 0.0, 0.8), (0.0, 0.0, 0.0))
    assert report.saturated and report.mask.all() and sim.saturation is report
    assert all(s.limit_m == 0.75 and s.excess_m > 0.1 for s in report.legs)
    steps(sim, 3.0)
    assert sim.lengths.tolist() == pytest.approx([0.75] * 6) and sim.at_limit.tolist() == [1] * 6
    # the platform rose as far as its legs let it: every leg at 0.75 m
    assert sim.pose[0][2] == pytest.approx(math.sqrt(0.75**2 - np.sum((PLATFORM.platform_joints
                                                                          - PLATFORM.base_joints)[0, :2] ** 2)))


def test_a_later_reachable_command_clears_the_report():
    sim = StewartSim(PLATFORM)
    sim.command_pose((0.0, 0.0, 0.8), (0.0, 0.0, 0.0))
    assert not sim.command_pose(*PLATFORM.home).saturated and not sim.saturation.saturated


def test_freeze_holds_the_legs_where_they_are():
    sim = StewartSim(PLATFORM)
    sim.command_pose((0.0, 0.0, 0.6), (0.0, 0.0, 0.0))
    steps(sim, 0.2)
    sim.freeze()
    lengths = sim.lengths
    steps(sim, 0.5)
    assert sim.lengths.tolist() == lengths.tolist() and sim.velocities.tolist() == [0.0] * 6


def test_a_singular_configuration_keeps_the_last_pose_and_says_why():
    # identical joint circles: at home the legs are vertical and yaw does not change their lengths (singular)
    sp = StewartPlatform(joint_circle(0.3, 0.4), joint_circle(0.3, 0.4), 0.4, 0.8)
    sim = StewartSim(sp)
    home = sim.pose
    sim.command_pose((0.0, 0.0, 0.65), (0.0, 0.0, 0.0))
    sim.step(DT)
    assert not sim.pose_valid and "singular Jacobian" in sim.pose_error
    assert [v.tolist() for v in sim.pose] == [v.tolist() for v in home]


def test_length_sensor_noise_is_seeded():
    params = ActuatorParams(length_noise_m=0.001)
    a = StewartSim(PLATFORM, params, np.random.default_rng(3))
    b = StewartSim(PLATFORM, params, np.random.default_rng(3))
    readings = np.array([a.measured_lengths() for _ in range(1000)])
    assert readings.tolist() == [b.measured_lengths().tolist() for _ in range(1000)]
    assert readings.std(axis=0) == pytest.approx([0.001] * 6, rel=0.15)
    assert StewartSim(PLATFORM).measured_lengths().tolist() == StewartSim(PLATFORM).lengths.tolist()


@pytest.mark.parametrize("name", STEWART_SERIES)
def test_each_paper_series_runs_and_its_tracking_report_is_small(name):
    series = stewart_series(name, *PLATFORM.home)
    achieved, reports = run_series(StewartSim(PLATFORM), series)
    assert not any(r.saturated for r in reports)
    report = deviation_by_axis(POSE_AXES, series.values, achieved)
    assert set(report) == set(POSE_AXES)
    for axis, stats in report.items():
        metres = axis.endswith("_m")
        assert stats["rms"] < (0.005 if metres else 0.015), (axis, stats)
        assert abs(stats["mean"]) < (0.0005 if metres else 0.001), (axis, stats)
        assert stats["max_abs"] >= stats["rms"] >= stats["mean_abs"] >= abs(stats["mean"])
    moving = [a for a, c in zip(POSE_AXES, series.values.T) if np.ptp(c) > 0]
    assert all(report[a]["rms"] > 0 for a in moving)  # the servos lag: tracking is not perfect


def test_a_series_beyond_the_stroke_saturates_and_the_report_shows_the_shortfall():
    series = stewart_series("vertical", *PLATFORM.home, amplitude=0.2)
    achieved, reports = run_series(StewartSim(PLATFORM), series)
    saturated = [r for r in reports if r.saturated]
    assert saturated and all(r.mask.all() for r in saturated)
    z_top = math.sqrt(0.75**2 - np.sum((PLATFORM.platform_joints - PLATFORM.base_joints)[0, :2] ** 2))
    assert achieved[:, 2].max() == pytest.approx(z_top, abs=1e-6)
    stats = deviation_by_axis(POSE_AXES, series.values, achieved)["z_m"]
    assert stats["max_abs"] == pytest.approx(PLATFORM.home[0][2] + 0.2 - z_top, abs=0.003)


@pytest.mark.parametrize(
    "table, fragment",
    [
        ({"max_speed": 1.0}, "unknown key(s) max_speed"),
        ({"max_velocity_m_s": 0.0}, "must be > 0"),
        ({"max_acceleration_m_s2": math.nan}, "max_acceleration_m_s2 must be a finite number"),
        ({"length_noise_m": -1e-3}, "length_noise_m >= 0"),
        ({"length_noise_m": "1mm"}, "length_noise_m must be a finite number"),
    ],
)
def test_fail__actuator_params(table, fragment):
    with pytest.raises(ValueError) as info:
        ActuatorParams.from_config(table)
    assert fragment in str(info.value)


def test_fail__a_start_pose_outside_the_stroke():
    with pytest.raises(ValueError, match="start pose needs legs outside their stroke: leg 1"):
        StewartSim(PLATFORM, pose=((0.0, 0.0, 0.9), (0.0, 0.0, 0.0)))


def test_a_masked_command_moves_and_reports_only_those_legs():
    sim = StewartSim(PLATFORM)
    report = sim.command_lengths([0.8, 0.7, 0.1, 0.1, 0.1, 0.1], mask=[True, True, False, False, False, False])
    assert [s.leg for s in report.legs] == [1]
    steps(sim, 2.0)
    assert sim.lengths.tolist() == pytest.approx([0.75, 0.7] + [0.6] * 4)
