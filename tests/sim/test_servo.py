"""Servo axes: position and velocity tracking within velocity, acceleration and travel limits; determinism."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from sim.servo import ServoAxes

H = 1e-3  # the default sub-step


def axes(**kw) -> ServoAxes:
    return ServoAxes(**{"lower": [-1.0, -2.0], "upper": [1.0, 2.0], "max_velocity": [0.5, 1.0],
                        "max_acceleration": [2.0, 4.0], **kw})


def run(a: ServoAxes, seconds: float, dt: float = H) -> tuple[np.ndarray, np.ndarray]:
    positions, velocities = [], []
    for _ in range(round(seconds / dt)):
        a.step(dt)
        positions.append(a.position.copy())
        velocities.append(a.velocity.copy())
    return np.array(positions), np.array(velocities)


def test_position_move_is_a_trapezoid_within_the_limits_and_lands_on_the_target():
    a = axes()
    a.command_position([0.8, -1.5])
    p, v = run(a, 3.0)
    assert np.allclose(p[-1], [0.8, -1.5], atol=1e-9) and np.all(v[-1] == 0.0)
    assert np.all(np.abs(v) <= [0.5, 1.0])
    assert np.all(np.abs(np.diff(v, axis=0)) <= np.array([2.0, 4.0]) * H + 1e-12)
    overshoot = max(p[:, 0].max() - 0.8, -1.5 - p[:, 1].min())
    assert overshoot < 1e-6
    # trapezoid: 0.8 at 0.5 m/s, 2 m/s² takes 0.8/0.5 + 0.5/2 = 1.85 s (sim time)
    arrival = np.argmax(np.abs(p[:, 0] - 0.8) < 1e-6) * H
    assert arrival == pytest.approx(1.85, abs=0.01)


def test_a_short_move_never_reaches_top_speed():
    a = axes()
    a.command_position([0.04, 0.0])  # triangle: peak sqrt(a·d) = sqrt(2·0.04) = 0.28 m/s
    p, v = run(a, 1.0)
    assert v[:, 0].max() == pytest.approx(math.sqrt(2.0 * 0.04), rel=0.02)
    assert p[-1, 0] == pytest.approx(0.04, abs=1e-9)


def test_velocity_mode_ramps_at_the_acceleration_limit_and_caps_at_max_velocity():
    a = axes()
    a.command_velocity([0.3, 5.0])
    p, v = run(a, 0.1)
    assert v[-1].tolist() == pytest.approx([0.2, 0.4])  # still ramping: 2 and 4 m/s² for 0.1 s
    p, v = run(a, 0.5)
    assert v[-1].tolist() == pytest.approx([0.3, 1.0])  # 5.0 capped at 1.0


def test_an_axis_stops_dead_on_its_travel_limit_and_reports_it():
    a = axes()
    a.command_velocity([0.5, -1.0])
    run(a, 5.0)
    assert a.position.tolist() == [1.0, -2.0] and a.velocity.tolist() == [0.0, 0.0]
    assert a.at_limit.tolist() == [1, -1]
    a.command_velocity([-0.5, 1.0])
    run(a, 0.1)
    assert a.at_limit.tolist() == [0, 0] and np.all(np.abs(a.position) < [1.0, 2.0])


def test_a_position_target_beyond_the_travel_is_clipped_and_flagged():
    a = axes()
    a.command_position([3.0, 0.5])
    assert a.target_clipped.tolist() == [True, False] and a.target.tolist() == [1.0, 0.5]
    run(a, 6.0)
    assert a.position.tolist() == pytest.approx([1.0, 0.5]) and a.at_limit.tolist() == [1, 0]


def test_mask_commands_some_axes_and_leaves_the_others():
    a = axes()
    a.command_velocity([0.5, 0.5])
    a.command_position([0.2, 99.0], mask=[True, False])
    assert a.velocity_mode.tolist() == [False, True] and a.target.tolist() == [0.2, 0.5]


def test_freeze_stops_at_once_and_holds():
    a = axes()
    a.command_velocity([0.5, 1.0])
    run(a, 0.5)
    a.freeze()
    where = a.position.copy()
    assert a.velocity.tolist() == [0.0, 0.0]
    run(a, 1.0)
    assert a.position.tolist() == where.tolist()


def test_one_long_step_equals_its_sub_steps_and_runs_are_repeatable():
    a, b, c = axes(), axes(), axes()
    for s in (a, b, c):
        s.command_position([0.7, -0.3])
    for _ in range(50):
        a.step(0.01)
    for _ in range(500):
        b.step(0.001)
    run(c, 0.5)
    assert a.position.tolist() == b.position.tolist() == c.position.tolist()
    assert a.velocity.tolist() == b.velocity.tolist()


def test_zero_step_changes_nothing():
    a = axes()
    a.command_velocity([0.5, 0.5])
    a.step(0.0)
    assert a.position.tolist() == [0.0, 0.0] and a.velocity.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(lower=[1.5, 0.0]), "lower <= upper"),
        (dict(upper=[1.0, math.inf]), "finite"),
        (dict(max_velocity=[0.0, 1.0]), "max_velocity and max_acceleration"),
        (dict(max_acceleration=[1.0]), "max_acceleration must be 2 numbers"),
        (dict(position=[5.0, 0.0]), "outside the travel"),
        (dict(max_substep_s=0.0), "max_substep_s"),
        (dict(max_velocity="fast"), "max_velocity must be numbers"),
    ],
)
def test_fail__servo_construction(kw, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        axes(**kw)


@pytest.mark.parametrize("call", [
    lambda a: a.command_position([0.0]),
    lambda a: a.command_position([0.0, math.nan]),
    lambda a: a.command_velocity([math.inf, 0.0]),
    lambda a: a.step(-0.01),
    lambda a: a.step(math.nan),
])
def test_fail__bad_commands_change_nothing(call):
    a = axes()
    a.command_position([0.3, 0.3])
    before = (a.target.copy(), a.velocity_mode.copy())
    with pytest.raises(ValueError):
        call(a)
    assert a.target.tolist() == before[0].tolist() and a.velocity_mode.tolist() == before[1].tolist()


def test_freeze_with_a_mask_stops_only_those_axes():
    a = axes()
    a.command_velocity([0.5, 1.0])
    run(a, 0.5)
    a.freeze([False, True])
    held = a.position[1]
    run(a, 0.2)
    assert a.position[1] == held and a.velocity[0] == pytest.approx(0.5)
