"""Differential drive: twist ↔ wheel speeds round trips and odometry arcs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.kinematics.diffdrive import body_twist, integrate_twist, wheel_speeds


@settings(max_examples=200, deadline=None)
@given(
    linear=st.floats(-2.0, 2.0),
    angular=st.floats(-5.0, 5.0),
    track=st.floats(0.05, 1.0),
    radius=st.floats(0.01, 0.3),
)
def test_body_twist_of_wheel_speeds_returns_the_twist(linear, angular, track, radius):
    left, right = wheel_speeds(linear, angular, track, radius)
    v, w = body_twist(left, right, track, radius)
    assert v == pytest.approx(linear, abs=1e-9)
    assert w == pytest.approx(angular, abs=1e-9)


def test_positive_angular_turns_left_so_the_right_wheel_is_faster():
    left, right = wheel_speeds(0.2, 0.5, 0.3, 0.05)
    assert right > left


def test_spin_in_place_runs_the_wheels_in_opposite_directions():
    left, right = wheel_speeds(0.0, 1.0, 0.3, 0.05)
    assert left == pytest.approx(-right)


@pytest.mark.parametrize(
    "name, track, radius",
    [("zero_track", 0.0, 0.05), ("negative_radius", 0.3, -0.05), ("nan_track", math.nan, 0.05), ("inf_radius", 0.3, math.inf)],
)
def test_fail__geometry_is_rejected(name, track, radius):
    with pytest.raises(ValueError):
        wheel_speeds(0.1, 0.0, track, radius)
    with pytest.raises(ValueError):
        body_twist(1.0, 1.0, track, radius)


def test_integrate_twist_drives_a_full_circle_back_to_the_start():
    pose = (1.0, 2.0, 0.3)
    for _ in range(100):
        pose = integrate_twist(*pose, 0.5, 2 * math.pi / 10.0, 0.1)  # 10 s per turn
    assert np.allclose(pose, (1.0, 2.0, 0.3), atol=1e-9)


def test_integrate_twist_goes_straight_along_the_yaw():
    x, y, yaw = integrate_twist(0.0, 0.0, math.pi / 2, 1.0, 0.0, 2.0)  # facing north
    assert (x, y, yaw) == pytest.approx((0.0, 2.0, math.pi / 2), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(linear=st.floats(-1.0, 1.0), angular=st.floats(-3.0, 3.0), yaw=st.floats(-3.0, 3.0))
def test_integrate_twist_is_exact_so_step_size_does_not_matter(linear, angular, yaw):
    one = integrate_twist(0.0, 0.0, yaw, linear, angular, 1.0)
    many = (0.0, 0.0, yaw)
    for _ in range(50):
        many = integrate_twist(*many, linear, angular, 0.02)
    assert np.allclose(one[:2], many[:2], atol=1e-9)
    assert math.remainder(one[2] - many[2], math.tau) == pytest.approx(0.0, abs=1e-9)
