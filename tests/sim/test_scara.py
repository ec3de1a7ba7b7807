"""The simulated SCARA arm: joint servos within velocity, acceleration and joint limits; tool position by
forward kinematics; encoder noise from the seeded generator only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotics.kinematics.scara import Scara
from sim.scara import ScaraParams, ScaraSim

DT = 0.01


def run(arm: ScaraSim, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    qs, qds = [], []
    for _ in range(round(seconds / DT)):
        arm.step(DT)
        qs.append(arm.q)
        qds.append(arm.qd)
    return np.array(qs), np.array(qds)


def test_joint_targets_are_reached_and_the_tool_is_where_forward_kinematics_puts_it():
    arm = ScaraSim(ScaraParams())
    arm.command_positions((-1.0, 2.0))
    q, qd = run(arm, 3.0)
    assert arm.q.tolist() == pytest.approx([-1.0, 2.0], abs=1e-9) and arm.qd.tolist() == [0.0, 0.0]
    assert arm.tool_xy == pytest.approx(Scara(0.3, 0.2).forward((-1.0, 2.0)))
    assert np.all(np.abs(qd) <= [2.0, 3.0] + np.array(1e-12))
    assert arm.t == pytest.approx(3.0)


def test_jogging_into_a_joint_limit_stops_there_and_reports_it():
    arm = ScaraSim(ScaraParams())
    arm.command_velocities((2.0, -3.0))
    run(arm, 3.0)
    assert arm.q.tolist() == pytest.approx([math.radians(170), math.radians(-150)])
    assert arm.at_limit.tolist() == [1, -1] and arm.qd.tolist() == [0.0, 0.0]


def test_a_target_beyond_a_joint_limit_is_clipped_and_flagged():
    arm = ScaraSim(ScaraParams())
    arm.command_positions((0.5, math.radians(170)))
    assert arm.target_clipped.tolist() == [False, True]
    run(arm, 3.0)
    assert arm.q.tolist() == pytest.approx([0.5, math.radians(150)]) and arm.at_limit.tolist() == [0, 1]


def test_acceleration_limits_bound_the_change_of_joint_rate():
    arm = ScaraSim(ScaraParams(max_acceleration_rad_s2=(5.0, 5.0)))
    arm.command_velocities((2.0, -2.0))
    _, qd = run(arm, 0.2)
    assert qd[-1].tolist() == pytest.approx([1.0, -1.0])  # 5 rad/s² for 0.2 s
    assert np.all(np.abs(np.diff(qd, axis=0)) <= 5.0 * DT + 1e-12)


def test_a_joint_may_jog_while_the_other_holds_a_position():
    arm = ScaraSim(ScaraParams(), q0=(0.0, 1.0))
    arm.command_velocities((0.5, 0.0), mask=(True, False))
    run(arm, 1.0)
    assert arm.q[1] == 1.0 and arm.q[0] > 0.3


def test_freeze_stops_both_joints_at_once():
    arm = ScaraSim(ScaraParams())
    arm.command_velocities((1.0, 1.0))
    run(arm, 0.5)
    arm.freeze()
    q = arm.q
    run(arm, 0.5)
    assert arm.q.tolist() == q.tolist() and arm.qd.tolist() == [0.0, 0.0]


def test_encoder_noise_comes_from_the_seeded_generator_only():
    params = ScaraParams(encoder_noise_rad=0.01)
    a = ScaraSim(params, np.random.default_rng(7), q0=(0.2, 0.3))
    b = ScaraSim(params, np.random.default_rng(7), q0=(0.2, 0.3))
    readings = np.array([a.measured_q() for _ in range(2000)])
    assert readings.tolist() == [b.measured_q().tolist() for _ in range(2000)]
    assert readings.mean(axis=0) == pytest.approx([0.2, 0.3], abs=0.002)
    assert readings.std(axis=0) == pytest.approx([0.01, 0.01], rel=0.1)
    quiet = ScaraSim(ScaraParams(), np.random.default_rng(7), q0=(0.2, 0.3))
    assert quiet.measured_q().tolist() == [0.2, 0.3]
    assert quiet.rng.random() == np.random.default_rng(7).random()  # no draw was spent


def test_same_commands_give_the_same_motion():
    runs = []
    for _ in range(2):
        arm = ScaraSim(ScaraParams())
        arm.command_positions((1.0, -1.0))
        runs.append(run(arm, 1.0)[0])
    assert np.array_equal(*runs)


@pytest.mark.parametrize(
    "table",
    [
        {},
        {"l1_m": 0.4, "l2_m": 0.25},
        {"q_min_deg": [-90, -120], "q_max_deg": [90, 120]},
        {"max_velocity_rad_s": [1, 1.5], "encoder_noise_rad": 0.001},
    ],
)
def test_ok__params_from_config(table):
    params = ScaraParams.from_config(table)
    ScaraSim(params)


@pytest.mark.parametrize(
    "table, fragment",
    [
        ({"l3_m": 0.1}, "unknown key(s) l3_m"),
        ({"l1_m": 0.0}, "link lengths must be positive"),
        ({"l1_m": "long"}, "l1_m must hold finite numbers"),
        ({"q_min_deg": [-90]}, "q_min_deg must be a pair"),
        ({"q_min_deg": [10, 0], "q_max_deg": [0, 10]}, "q_min <= q_max"),
        ({"q_min_deg": [-9, -9], "q_min_rad": [-1, -1]}, "give q_min_deg or q_min_rad, not both"),
        ({"max_velocity_rad_s": [0, 1]}, "must be > 0"),
        ({"max_acceleration_rad_s2": [1, math.inf]}, "finite"),
        ({"encoder_noise_rad": -0.1}, "encoder_noise_rad must be >= 0"),
        ({"encoder_noise_rad": True}, "encoder_noise_rad must hold finite numbers"),
    ],
)
def test_fail__params_from_config(table, fragment):
    with pytest.raises(ValueError) as info:
        ScaraParams.from_config(table)
    assert fragment in str(info.value)


def test_fail__start_outside_the_joint_limits():
    with pytest.raises(ValueError, match="outside the travel"):
        ScaraSim(ScaraParams(), q0=(0.0, 3.0))
