"""The one braking law: round trips, the continuous limit, and stepped motions that stop on the mark."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotics.control import brake_distance, brake_speed, turn_rate


def stepped_stop(v0: float, a: float, dt: float) -> float:
    """Distance a motion covers that steps ``dt`` at ``v0`` and then brakes at ``a`` (velocity first, then
    position, as every caller steps)."""
    v, x = v0, v0 * dt
    while v > 0.0:
        v = max(0.0, v - a * dt)
        x += v * dt
    return x


def approach(distance: float, v_max: float, a: float, dt: float) -> tuple[float, float]:
    """Drive to ``distance`` with the law as the speed cap, as the ramp and the servo do; (final x, overshoot)."""
    x = v = 0.0
    overshoot = 0.0
    for _ in range(100_000):
        e = distance - x
        wanted = math.copysign(min(v_max, float(brake_speed(e, a, dt)), abs(e) / dt), e)
        v += max(-a * dt, min(a * dt, wanted - v))
        x += v * dt
        overshoot = max(overshoot, x - distance)
        if abs(distance - x) < 1e-12 and abs(v) <= a * dt:
            break
    return x, overshoot


@pytest.mark.parametrize("d, a, dt", [(0.3, 4.0, 0.002), (1.0, 2.0, 0.01), (1e-4, 10.0, 0.001), (5.0, 0.5, 0.1)])
def test_round_trip__distance_of_the_brake_speed_is_the_distance(d: float, a: float, dt: float) -> None:
    assert float(brake_distance(brake_speed(d, a, dt), a, dt)) == pytest.approx(d, rel=1e-12)


@pytest.mark.parametrize("n, a, dt", [(1, 2.0, 0.01), (7, 2.0, 0.01), (50, 4.0, 0.001)])
def test_a_motion_at_the_brake_speed_stops_exactly_on_the_mark(n: int, a: float, dt: float) -> None:
    v = n * a * dt  # a whole number of braking steps: the law is exact there
    assert stepped_stop(v, a, dt) == pytest.approx(float(brake_distance(v, a, dt)), rel=1e-9)
    assert float(brake_speed(stepped_stop(v, a, dt), a, dt)) == pytest.approx(v, rel=1e-9)


def test_named_case__zero_distance_means_standing_still() -> None:
    assert float(brake_speed(0.0, 3.0, 0.01)) == 0.0
    assert float(brake_speed(0.0, 3.0)) == 0.0


def test_named_case__no_step_is_the_continuous_law() -> None:
    assert float(brake_speed(2.0, 1.5)) == pytest.approx(math.sqrt(2 * 1.5 * 2.0))
    assert float(brake_speed(-2.0, 1.5)) == float(brake_speed(2.0, 1.5))  # a distance either way


def test_named_case__the_continuous_law_overshoots_a_stepped_motion_and_this_one_does_not() -> None:
    a, dt, v = 2.0, 0.01, 1.0
    continuous = v * v / (2 * a)  # where sqrt(2·a·d) says braking from v ends
    assert stepped_stop(v, a, dt) > continuous + 0.4 * v * dt  # ~v·dt/2 further
    x, overshoot = approach(0.4, 0.5, a, dt)
    assert x == pytest.approx(0.4, abs=1e-12) and overshoot < 1e-12


def test_arrays_are_element_wise() -> None:
    d = np.array([0.0, 0.1, -1.0])
    got = brake_speed(d, np.array([1.0, 2.0, 3.0]), 0.01)
    want = [float(brake_speed(x, a, 0.01)) for x, a in zip(d, (1.0, 2.0, 3.0))]
    assert got.tolist() == pytest.approx(want)


@pytest.mark.parametrize("remaining, want", [(1.0, 0.8), (-1.0, -0.8), (0.005, 0.1), (0.02, math.sqrt(0.04))])
def test_turn_rate_caps_floors_and_brakes(remaining: float, want: float) -> None:
    assert turn_rate(remaining, 0.8, 0.1, 1.0) == pytest.approx(want)
