"""Stewart platform inverse kinematics: symmetry, identities and leg limits."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.kinematics.stewart import StewartPlatform, joint_circle, rotation_xyz

BASE = joint_circle(0.5, math.radians(20))
TOP = joint_circle(0.3, math.radians(100))
SP = StewartPlatform(BASE, TOP, 0.45, 0.75)
HOME = ((0.0, 0.0, 0.55), (0.0, 0.0, 0.0))


def test_home_pose_has_six_equal_legs():
    legs = SP.leg_lengths(*HOME)
    assert legs.shape == (6,)
    assert np.allclose(legs, legs[0], atol=1e-12)


def test_yaw_about_the_axis_keeps_the_three_fold_symmetry():
    legs = SP.leg_lengths((0.0, 0.0, 0.55), (0.0, 0.0, math.radians(10)))
    # Legs 0, 2, 4 (first of each pair) are images of each other under 120° turns; so are 1, 3, 5.
    assert np.allclose(legs[0::2], legs[0], atol=1e-12)
    assert np.allclose(legs[1::2], legs[1], atol=1e-12)
    assert not np.isclose(legs[0], legs[1])


def test_yaw_either_way_swaps_the_legs_of_each_pair():
    plus = SP.leg_lengths((0.0, 0.0, 0.55), (0.0, 0.0, 0.1))
    minus = SP.leg_lengths((0.0, 0.0, 0.55), (0.0, 0.0, -0.1))
    assert np.allclose(plus[0::2], minus[1::2], atol=1e-12)


def test_pure_heave_lengths_follow_pythagoras():
    h = 0.6
    horizontal = np.linalg.norm((TOP - BASE)[:, :2], axis=1)
    assert np.allclose(SP.leg_lengths((0, 0, h), (0, 0, 0)), np.hypot(horizontal, h))


def test_leg_vectors_end_at_the_transformed_platform_joints():
    pos, euler = (0.02, -0.03, 0.5), (0.1, -0.05, 0.2)
    ends = SP.base_joints + SP.leg_vectors(pos, euler)
    assert np.allclose(ends, np.asarray(pos) + TOP @ rotation_xyz(*euler).T)


def test_rotation_xyz_is_intrinsic_x_then_y_then_z():
    r, p, y = 0.3, -0.4, 1.1
    rx = rotation_xyz(r, 0, 0)
    ry = rotation_xyz(0, p, 0)
    rz = rotation_xyz(0, 0, y)
    assert np.allclose(rotation_xyz(r, p, y), rx @ ry @ rz)
    assert np.allclose(rx @ [0, 1, 0], [0, math.cos(r), math.sin(r)])


@settings(max_examples=100, deadline=None)
@given(
    pos=st.tuples(st.floats(-0.1, 0.1), st.floats(-0.1, 0.1), st.floats(0.3, 0.8)),
    euler=st.tuples(st.floats(-0.4, 0.4), st.floats(-0.4, 0.4), st.floats(-0.4, 0.4)),
)
def test_leg_lengths_are_invariant_to_moving_base_and_platform_together(pos, euler):
    # Rigidly moving the whole machine (base joints and the pose) leaves the leg lengths alone.
    r_world = rotation_xyz(0.2, -0.1, 0.7)
    t_world = np.array([1.0, -2.0, 0.5])
    moved = StewartPlatform(BASE @ r_world.T + t_world, TOP, 0.0, 10.0)
    r_pose = r_world @ rotation_xyz(*euler)
    # Recover intrinsic X-Y-Z angles of r_pose: R = Rx·Ry·Rz.
    pitch = math.asin(max(-1.0, min(1.0, r_pose[0, 2])))
    roll = math.atan2(-r_pose[1, 2], r_pose[2, 2])
    yaw = math.atan2(-r_pose[0, 1], r_pose[0, 0])
    assert np.allclose(rotation_xyz(roll, pitch, yaw), r_pose)
    legs_moved = moved.leg_lengths(r_world @ pos + t_world, (roll, pitch, yaw))
    assert np.allclose(legs_moved, SP.leg_lengths(pos, euler), atol=1e-9)


@pytest.mark.parametrize(
    "name, pose",
    [
        ("home", HOME),
        ("small_tilt", ((0.0, 0.0, 0.55), (0.1, 0.05, 0.0))),
        ("small_shift", ((0.05, -0.05, 0.55), (0.0, 0.0, 0.1))),
    ],
)
def test_ok__within_limits(name, pose):
    assert SP.within_limits(*pose)


@pytest.mark.parametrize(
    "name, pose",
    [
        ("too_high", ((0.0, 0.0, 0.9), (0.0, 0.0, 0.0))),
        ("too_low", ((0.0, 0.0, 0.2), (0.0, 0.0, 0.0))),
        ("large_roll", ((0.0, 0.0, 0.55), (0.8, 0.0, 0.0))),
        ("large_shift", ((0.4, 0.0, 0.55), (0.0, 0.0, 0.0))),
    ],
)
def test_fail__within_limits(name, pose):
    assert not SP.within_limits(*pose)


def test_per_leg_limits_are_applied_leg_by_leg():
    legs = SP.leg_lengths(*HOME)
    leg_max = np.full(6, 1.0)
    leg_max[3] = legs[3] - 1e-3
    assert not StewartPlatform(BASE, TOP, 0.0, leg_max).within_limits(*HOME)


@pytest.mark.parametrize(
    "name, args",
    [
        ("base_wrong_shape", (np.zeros((5, 3)), TOP, 0.4, 0.8)),
        ("platform_wrong_shape", (BASE, np.zeros((6, 2)), 0.4, 0.8)),
        ("nan_joint", (np.full((6, 3), np.nan), TOP, 0.4, 0.8)),
        ("min_above_max", (BASE, TOP, 0.9, 0.8)),
        ("negative_min", (BASE, TOP, -0.1, 0.8)),
    ],
)
def test_fail__constructor_rejects(name, args):
    with pytest.raises(ValueError):
        StewartPlatform(*args)


def test_joint_circle_puts_six_joints_on_the_radius_in_three_pairs():
    joints = joint_circle(0.5, math.radians(20), z_m=0.1)
    assert joints.shape == (6, 3)
    assert np.allclose(np.linalg.norm(joints[:, :2], axis=1), 0.5)
    assert np.allclose(joints[:, 2], 0.1)
    pair_gap = np.linalg.norm(joints[0] - joints[1])
    assert pair_gap == pytest.approx(2 * 0.5 * math.sin(math.radians(10)))
