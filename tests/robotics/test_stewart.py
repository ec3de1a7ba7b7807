"""Stewart platform kinematics: inverse (symmetry, identities, an independent computation), leg limits and
saturation reports, forward kinematics by Newton (round trips, assemblies, named failures)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.kinematics import NoConvergence, Unreachable
from robotics.kinematics.stewart import SaturationReport, StewartPlatform, joint_circle, rotation_xyz

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


# ---- an independent computation of the leg lengths ------------------------------------------


def _rodrigues(axis, angle):
    k = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(angle) * kx + (1 - math.cos(angle)) * kx @ kx


def _legs_by_hand(base, top, position, euler):
    """Intrinsic X-Y-Z built by turning about the *moving* axes one after the other, then one leg at a time."""
    roll, pitch, yaw = euler
    r1 = _rodrigues((1, 0, 0), roll)
    r2 = _rodrigues(r1 @ (0, 1, 0), pitch) @ r1
    r3 = _rodrigues(r2 @ (0, 0, 1), yaw) @ r2
    return [math.dist([position[k] + sum(r3[k][j] * top[i][j] for j in range(3)) for k in range(3)], base[i])
            for i in range(6)]


@settings(max_examples=100, deadline=None)
@given(
    pos=st.tuples(st.floats(-0.2, 0.2), st.floats(-0.2, 0.2), st.floats(0.2, 0.9)),
    euler=st.tuples(st.floats(-1.0, 1.0), st.floats(-1.0, 1.0), st.floats(-3.0, 3.0)),
)
def test_leg_lengths_match_an_independent_computation(pos, euler):
    assert np.allclose(SP.leg_lengths(pos, euler), _legs_by_hand(BASE, TOP, pos, euler), atol=1e-12)


def test_leg_length_of_one_hand_worked_pose():
    # platform joint 0 sits at 40° on r = 0.3, base joint 0 at 80° on r = 0.5; pure heave 0.5 m
    p = (0.3 * math.cos(math.radians(40)), 0.3 * math.sin(math.radians(40)), 0.5)
    b = (0.5 * math.cos(math.radians(80)), 0.5 * math.sin(math.radians(80)), 0.0)
    assert SP.leg_lengths((0, 0, 0.5), (0, 0, 0))[0] == pytest.approx(math.dist(p, b))


# ---- geometry helper, home, extensions -------------------------------------------------------

REF = StewartPlatform.symmetric()


def test_symmetric_builds_the_joint_circles_and_stroke():
    assert np.allclose(REF.base_joints, BASE) and np.allclose(REF.platform_joints, TOP)
    assert REF.leg_min.tolist() == [0.45] * 6 and REF.leg_max.tolist() == [0.75] * 6


def test_symmetric_legs_cross_to_the_neighbouring_pair():
    # leg 0 leaves the base pair at 90° and ends on the platform pair at 90° - 120°/2 ... i.e. at 40°, 50° away
    angles = np.degrees(np.arctan2(REF.platform_joints[:, 1], REF.platform_joints[:, 0])) % 360
    assert np.allclose(angles, [40, 140, 160, 260, 280, 20])


def test_default_home_is_level_and_puts_every_leg_at_mid_stroke():
    position, euler = REF.home
    assert position[:2].tolist() == [0.0, 0.0] and euler.tolist() == [0.0, 0.0, 0.0]
    assert np.allclose(REF.nominal_lengths, 0.6)


def test_explicit_home_is_kept_and_sets_the_nominal_lengths():
    sp = StewartPlatform(BASE, TOP, 0.45, 0.75, home=((0.0, 0.0, 0.55), (0.0, 0.0, 0.0)))
    assert sp.home[0].tolist() == [0.0, 0.0, 0.55]
    assert np.allclose(sp.nominal_lengths, SP.leg_lengths((0, 0, 0.55), (0, 0, 0)))


def test_fail__home_cannot_be_derived_when_mid_stroke_legs_cannot_span_the_joints():
    sp = StewartPlatform(joint_circle(2.0, 0.3), joint_circle(0.1, 1.8), 0.1, 0.2)
    with pytest.raises(ValueError, match="give home="):
        sp.home


@pytest.mark.parametrize("home", [((0, 0), (0, 0, 0)), ((0, 0, math.nan), (0, 0, 0)), "up", (0.0, 0.0, 0.5)])
def test_fail__constructor_rejects_a_bad_home(home):
    with pytest.raises(ValueError, match="home"):
        StewartPlatform(BASE, TOP, 0.45, 0.75, home=home)


def test_extensions_are_length_minus_nominal():
    position, euler = (0.0, 0.0, 0.52), (0.0, 0.0, 0.0)
    assert np.allclose(REF.extensions(position, euler), REF.leg_lengths(position, euler) - 0.6)
    assert np.all(REF.extensions(position, euler) > 0)
    assert np.allclose(REF.extensions(*REF.home), 0.0, atol=1e-12)


# ---- saturation --------------------------------------------------------------------------------


def test_saturate_clamps_and_names_each_leg_and_its_excess():
    clamped, report = REF.saturate([0.6, 0.76, 0.6, 0.40, 0.6, 0.75])
    assert clamped.tolist() == pytest.approx([0.6, 0.75, 0.6, 0.45, 0.6, 0.75])
    assert [(s.leg, round(s.excess_m, 6), s.limit_m) for s in report.legs] == [(2, 0.01, 0.75), (4, -0.05, 0.45)]
    assert report.saturated and report.mask.tolist() == [False, True, False, True, False, False]
    assert "leg 2" in str(report) and "10.0 mm above" in str(report) and "leg 4" in str(report)
    assert "50.0 mm below" in str(report)
    assert report.to_json()[0] == {"leg": 2, "requested_m": 0.76, "limit_m": 0.75, "excess_m": pytest.approx(0.01)}


def test_saturate_reports_nothing_inside_the_stroke_including_its_ends():
    clamped, report = REF.saturate([0.45, 0.75, 0.6, 0.5, 0.7, 0.6])
    assert clamped.tolist() == [0.45, 0.75, 0.6, 0.5, 0.7, 0.6]
    assert report == SaturationReport() and not report.saturated and str(report) == "no leg saturated"


def test_saturate_uses_per_leg_strokes():
    sp = StewartPlatform(BASE, TOP, [0.45] * 5 + [0.5], 0.75)
    assert [s.leg for s in sp.saturate([0.48] * 6)[1].legs] == [6]


@pytest.mark.parametrize("lengths", [[0.6] * 5, [0.6] * 5 + [math.nan], [[0.6] * 6], "six", [0.6] * 5 + [math.inf]])
def test_fail__saturate_rejects(lengths):
    with pytest.raises(ValueError, match="leg lengths"):
        REF.saturate(lengths)


def test_inverse_returns_the_lengths_of_a_reachable_pose():
    pose = ((0.01, 0.0, 0.5), (0.05, 0.0, 0.0))
    assert np.allclose(REF.inverse(*pose), REF.leg_lengths(*pose))


def test_fail__inverse_refuses_a_pose_beyond_the_stroke_and_carries_the_report():
    with pytest.raises(Unreachable, match="leg 1 at") as info:
        REF.inverse((0.0, 0.0, 0.3), (0.0, 0.0, 0.0))
    assert info.value.report.mask.all() and all(s.excess_m < 0 for s in info.value.report.legs)


# ---- Jacobian and forward kinematics ------------------------------------------------------


def test_jacobian_matches_finite_differences():
    x = np.array([0.02, -0.03, 0.5, 0.1, -0.2, 0.3])
    h = 1e-7
    numeric = np.column_stack([
        (REF.leg_lengths(x[:3] + h * e[:3], x[3:] + h * e[3:]) - REF.leg_lengths(x[:3] - h * e[:3], x[3:] - h * e[3:]))
        / (2 * h)
        for e in np.eye(6)
    ])
    assert np.allclose(REF.jacobian(x[:3], x[3:]), numeric, atol=1e-7)


@settings(max_examples=150, deadline=None)
@given(
    pos=st.tuples(st.floats(-0.08, 0.08), st.floats(-0.08, 0.08), st.floats(0.42, 0.58)),
    euler=st.tuples(st.floats(-0.25, 0.25), st.floats(-0.25, 0.25), st.floats(-0.4, 0.4)),
)
def test_forward_of_inverse_returns_the_pose_from_home(pos, euler):
    lengths = REF.leg_lengths(pos, euler)
    position, angles = REF.forward(lengths)
    assert np.allclose(position, pos, atol=1e-9) and np.allclose(angles, euler, atol=1e-9)
    assert np.allclose(REF.leg_lengths(position, angles), lengths, atol=1e-10)


def test_forward_warm_started_follows_a_path_the_cold_start_cannot_reach():
    # a straight path from home to a far pose (forward ignores the stroke), well conditioned all the way
    # (cond(J) <= 11): warm-started from the last pose Newton stays on the machine's assembly; started
    # from home it lands on another assembly with the same six lengths
    home = np.concatenate(REF.home)
    far = np.array([0.349, -0.09, 0.29, 0.754, 0.789, -1.265])
    guess = REF.home
    for s in np.linspace(0.0, 1.0, 80):
        x = home + s * (far - home)
        assert np.linalg.cond(REF.jacobian(x[:3], x[3:])) < 11
        guess = REF.forward(REF.leg_lengths(x[:3], x[3:]), guess=guess)
        assert np.allclose(np.concatenate(guess), x, atol=1e-9)
    lengths = REF.leg_lengths(far[:3], far[3:])
    cold = REF.forward(lengths)
    assert not np.allclose(np.concatenate(cold), far, atol=1e-3)
    assert np.allclose(REF.leg_lengths(*cold), lengths, atol=1e-9)


def test_forward_returns_the_assembly_nearest_the_guess():
    lengths = REF.nominal_lengths
    above = REF.forward(lengths)
    below = REF.forward(lengths, guess=((0.0, 0.0, -0.5), (0.0, 0.0, 0.0)))
    assert above[0][2] == pytest.approx(0.4998, abs=1e-4)
    assert below[0][2] == pytest.approx(-above[0][2])  # the mirror image through the base plane
    assert np.allclose(REF.leg_lengths(*below), lengths)


def test_forward_wraps_roll_and_yaw_into_minus_pi_to_pi():
    pose = ((0.0, 0.0, 0.5), (0.0, 0.0, 0.3))
    position, euler = REF.forward(REF.leg_lengths(*pose), guess=((0.0, 0.0, 0.5), (0.0, 0.0, 0.3 + 2 * math.pi)))
    assert euler[2] == pytest.approx(0.3)


@pytest.mark.parametrize(
    "name, lengths, guess, message",
    [
        ("lengths_no_pose_can_have", [0.01] * 6, None, "residual stalls"),
        ("legs_too_unequal", [0.45, 0.75, 0.45, 0.75, 0.45, 0.75 * 3], None, "did not converge"),
        ("guess_in_the_base_plane", [0.6] * 6, ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)), "singular Jacobian"),
        ("guess_at_gimbal_lock", [0.6] * 6, ((0.0, 0.0, 0.5), (0.0, math.pi / 2, 0.0)), "Euler angles lock"),
    ],
)
def test_fail__forward_raises_no_convergence(name, lengths, guess, message):
    with pytest.raises(NoConvergence, match=message):
        REF.forward(lengths, guess=guess)


def test_fail__forward_raises_no_convergence_when_out_of_iterations():
    lengths = REF.leg_lengths((0.05, 0.05, 0.45), (0.2, -0.2, 0.3))
    with pytest.raises(NoConvergence, match="after 1 iterations"):
        REF.forward(lengths, max_iterations=1)


@pytest.mark.parametrize(
    "name, lengths, guess",
    [
        ("five_legs", [0.6] * 5, None),
        ("nan_leg", [0.6] * 5 + [math.nan], None),
        ("zero_leg", [0.6] * 5 + [0.0], None),
        ("bad_guess", [0.6] * 6, ((0.0, 0.0), (0.0, 0.0, 0.0))),
        ("nan_guess", [0.6] * 6, ((0.0, 0.0, math.nan), (0.0, 0.0, 0.0))),
    ],
)
def test_fail__forward_rejects_bad_arguments_as_value_errors_not_no_convergence(name, lengths, guess):
    with pytest.raises(ValueError) as info:
        REF.forward(lengths, guess=guess)
    assert not isinstance(info.value, NoConvergence)
