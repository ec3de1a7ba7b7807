"""SCARA kinematics: round trips, workspace and limit errors, singular configurations."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.kinematics import Singular, Unreachable
from robotics.kinematics.scara import Scara

ARM = Scara(0.3, 0.2)


@settings(max_examples=200, deadline=None)
@given(
    r=st.floats(0.1 + 1e-6, 0.5 - 1e-6),
    angle=st.floats(-math.pi, math.pi),
    elbow=st.sampled_from([+1, -1]),
)
def test_forward_of_inverse_returns_the_target_for_both_elbows(r, angle, elbow):
    p = (r * math.cos(angle), r * math.sin(angle))
    q = ARM.inverse(p, elbow=elbow)
    assert np.allclose(ARM.forward(q), p, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(q1=st.floats(-math.pi + 1e-6, math.pi), q2=st.floats(1e-3, math.pi - 1e-3))
def test_inverse_of_forward_returns_the_joints_with_the_matching_elbow(q1, q2):
    for sign in (+1, -1):
        q = np.array([q1, sign * q2])
        q_back = ARM.inverse(ARM.forward(q), elbow=sign)
        assert np.allclose(np.angle(np.exp(1j * (q_back - q))), 0.0, atol=1e-7)


def test_elbow_plus_one_puts_q2_in_zero_to_pi_and_minus_one_mirrors_it():
    q_up = ARM.inverse((0.2, 0.3), elbow=+1)
    q_down = ARM.inverse((0.2, 0.3), elbow=-1)
    assert 0.0 <= q_up[1] <= math.pi
    assert -math.pi <= q_down[1] <= 0.0
    assert q_up[1] == pytest.approx(-q_down[1])


@pytest.mark.parametrize(
    "name, q",
    [
        ("stretched", (0.3, 0.0)),
        ("folded", (-1.2, math.pi)),
        ("folded_negative", (2.0, -math.pi)),
        ("stretched_by_rounding", (0.0, 1e-9)),
    ],
)
def test_fail__inverse_velocity_raises_singular_at(name, q):
    with pytest.raises(Singular):
        ARM.inverse_velocity(q, (0.1, 0.0))


def test_singular_configurations_have_a_rank_deficient_jacobian():
    for q in [(0.3, 0.0), (-1.2, math.pi)]:
        assert abs(np.linalg.det(ARM.jacobian(q))) < 1e-12
        assert np.linalg.matrix_rank(ARM.jacobian(q), tol=1e-9) == 1


def test_jacobian_determinant_is_l1_l2_sin_q2():
    rng = np.random.default_rng(1)
    for q in rng.uniform(-math.pi, math.pi, size=(20, 2)):
        assert np.linalg.det(ARM.jacobian(q)) == pytest.approx(0.3 * 0.2 * math.sin(q[1]), abs=1e-12)


def test_jacobian_matches_finite_differences_of_forward():
    q = np.array([0.4, -1.1])
    h = 1e-7
    numeric = np.column_stack(
        [(np.array(ARM.forward(q + h * e)) - np.array(ARM.forward(q - h * e))) / (2 * h) for e in np.eye(2)]
    )
    assert np.allclose(ARM.jacobian(q), numeric, atol=1e-8)


@settings(max_examples=100, deadline=None)
@given(
    q=st.tuples(st.floats(-3.0, 3.0), st.floats(0.05, 3.09)),
    qd=st.tuples(st.floats(-2.0, 2.0), st.floats(-2.0, 2.0)),
)
def test_inverse_velocity_of_forward_velocity_returns_the_joint_rates(q, qd):
    v = ARM.forward_velocity(q, qd)
    assert np.allclose(ARM.inverse_velocity(q, v), qd, atol=1e-8)


@pytest.mark.parametrize(
    "name, p",
    [
        ("beyond_outer_reach", (0.6, 0.0)),
        ("inside_inner_hole", (0.05, 0.0)),
        ("at_the_base", (0.0, 0.0)),
        ("far_away_diagonal", (-3.0, 4.0)),
    ],
)
def test_fail__inverse_raises_unreachable_outside_the_workspace(name, p):
    with pytest.raises(Unreachable):
        ARM.inverse(p)


@pytest.mark.parametrize(
    "name, p",
    [
        ("outer_boundary_stretched", (0.5, 0.0)),
        ("inner_boundary_folded", (0.0, -0.1)),
        ("middle", (0.0, 0.3)),
        ("behind", (-0.35, -0.1)),
    ],
)
def test_ok__inverse_reaches_points_in_the_workspace(name, p):
    assert np.allclose(ARM.forward(ARM.inverse(p)), p, atol=1e-9)


def test_ok__equal_links_reach_the_base_with_q1_zero_and_folded_elbow():
    arm = Scara(0.25, 0.25)
    q = arm.inverse((0.0, 0.0))
    assert q.tolist() == pytest.approx([0.0, math.pi])
    assert np.allclose(arm.forward(q), (0.0, 0.0), atol=1e-12)


def test_fail__inverse_raises_unreachable_when_the_solution_breaks_a_joint_limit():
    arm = Scara(0.3, 0.2, q_min=(-math.pi / 2, -math.pi), q_max=(math.pi / 2, math.pi))
    with pytest.raises(Unreachable, match="joint limits"):
        arm.inverse((-0.4, 0.0), elbow=+1)


def test_ok__the_other_elbow_can_reach_a_point_that_one_elbow_cannot_within_limits():
    arm = Scara(0.3, 0.2, q_min=(-math.pi, 0.0), q_max=(math.pi, math.pi))
    with pytest.raises(Unreachable):
        arm.inverse((0.2, 0.3), elbow=-1)
    assert np.allclose(arm.forward(arm.inverse((0.2, 0.3), elbow=+1)), (0.2, 0.3))


def test_ok__q1_is_shifted_by_a_turn_to_fit_a_limit_range_beyond_pi():
    arm = Scara(0.3, 0.2, q_min=(0.0, -math.pi), q_max=(2 * math.pi, math.pi))
    q = arm.inverse((0.0, -0.4))
    assert 0.0 <= q[0] <= 2 * math.pi
    assert np.allclose(arm.forward(q), (0.0, -0.4), atol=1e-9)


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("zero_link", dict(l1=0.0, l2=0.2)),
        ("negative_link", dict(l1=0.3, l2=-0.2)),
        ("nan_link", dict(l1=math.nan, l2=0.2)),
        ("limits_swapped", dict(l1=0.3, l2=0.2, q_min=(1.0, 0.0), q_max=(0.0, 1.0))),
    ],
)
def test_fail__constructor_rejects(name, kwargs):
    with pytest.raises(ValueError):
        Scara(**kwargs)


@pytest.mark.parametrize("name, elbow", [("zero", 0), ("two", 2), ("string", "+1")])
def test_fail__inverse_rejects_an_elbow_other_than_plus_or_minus_one(name, elbow):
    with pytest.raises(ValueError):
        ARM.inverse((0.3, 0.1), elbow=elbow)


def test_errors_are_value_errors_so_one_handler_can_map_them():
    assert issubclass(Unreachable, ValueError) and issubclass(Singular, ValueError)


# ---- workspace -------------------------------------------------------------------------------


def _inside(polygon: np.ndarray, p) -> bool:
    """Nonzero winding rule (the fill rule the outline is drawn with)."""
    x, y = p
    (x0, y0), (x1, y1) = polygon.T, np.roll(polygon, -1, axis=0).T
    cross = (x1 - x0) * (y - y0) - (x - x0) * (y1 - y0)
    up = (y0 <= y) & (y < y1) & (cross > 0)
    down = (y1 <= y) & (y < y0) & (cross < 0)
    return int(up.sum()) - int(down.sum()) != 0


LIMITED = Scara(0.3, 0.2, q_min=(-math.pi / 2, -2.5), q_max=(math.pi / 2, 2.5))


def test_workspace_points_are_forward_kinematics_of_a_grid_over_the_limits():
    ws = LIMITED.workspace(n=16)
    assert ws.points.shape == (256, 2)
    q1, q2 = np.meshgrid(np.linspace(-math.pi / 2, math.pi / 2, 16), np.linspace(-2.5, 2.5, 16))
    expected = np.array([LIMITED.forward(q) for q in zip(q1.ravel(), q2.ravel())])
    assert np.allclose(ws.points, expected)


def test_workspace_outline_of_each_elbow_contains_exactly_what_that_elbow_reaches():
    ws = LIMITED.workspace(n=200)
    assert sorted(ws.outlines) == [-1, 1]
    rng = np.random.default_rng(3)
    checked = {+1: [0, 0], -1: [0, 0]}
    for p in rng.uniform(-0.55, 0.55, size=(1500, 2)):
        for elbow, outline in ws.outlines.items():
            try:
                LIMITED.inverse(p, elbow=elbow)
                reachable = True
            except Unreachable:
                reachable = False
            # the polygon is a sampled curve: skip points within 5 mm of its edge
            if min(np.hypot(*(outline - p).T)) < 0.005:
                continue
            assert _inside(outline, p) == reachable, (elbow, p)
            checked[elbow][reachable] += 1
    assert min(min(c) for c in checked.values()) > 50  # both answers seen for both elbows


def test_workspace_without_limits_fills_the_annulus():
    ws = ARM.workspace(n=128)
    r = np.hypot(*ws.points.T)
    assert r.min() == pytest.approx(0.1, abs=1e-3) and r.max() == pytest.approx(0.5, abs=1e-3)
    outline = ws.outlines[1]
    assert _inside(outline, (0.3, 0.01)) and _inside(outline, (-0.2, -0.2))
    assert not _inside(outline, (0.05, 0.01)) and not _inside(outline, (0.45, 0.3))


def test_workspace_leaves_out_an_elbow_the_limits_exclude():
    arm = Scara(0.3, 0.2, q_min=(-1.0, 0.2), q_max=(1.0, 2.0))
    assert sorted(arm.workspace(n=8).outlines) == [1]
    assert sorted(Scara(0.3, 0.2, q_min=(-1.0, -2.0), q_max=(1.0, -0.2)).workspace(n=8).outlines) == [-1]


@pytest.mark.parametrize("n", [1, 0, 5000, 2.5, True, "8"])
def test_fail__workspace_rejects_sample_count(n):
    with pytest.raises(ValueError, match="n must be"):
        ARM.workspace(n=n)
