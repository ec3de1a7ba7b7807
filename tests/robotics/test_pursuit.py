"""robotics.pursuit: frame round trips, the arc's curvature, projection on a path, named cases, and the follower
closing the loop on a unicycle (robotics.kinematics.diffdrive.integrate_twist)."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import robotics.pursuit
from robotics.kinematics.diffdrive import integrate_twist
from robotics.pursuit import (STOP_M, PurePursuit, curvature, lookahead_point, path_length, project, to_body,
                              to_world)


def test_docstring_examples() -> None:
    assert doctest.testmod(robotics.pursuit).failed == 0


@pytest.mark.parametrize("pose", [(0.0, 0.0, 0.0), (1.5, -2.0, 2.5), (-3.0, 4.0, -math.pi), (0.3, 0.1, 7.0)])
@pytest.mark.parametrize("point", [(0.0, 0.0), (2.0, 1.0), (-1.0, -5.0)])
def test_to_world_undoes_to_body(pose, point) -> None:
    assert to_world(pose, to_body(pose, point)) == pytest.approx(point, abs=1e-12)
    assert to_body(pose, to_world(pose, point)) == pytest.approx(point, abs=1e-12)


@pytest.mark.parametrize("radius", [0.5, 1.0, 3.0, -2.0])
@pytest.mark.parametrize("theta", [0.1, 0.8, 2.0])
def test_curvature_through_a_point_of_a_circle_is_one_over_its_radius(radius, theta) -> None:
    # the circle tangent to the heading at the pose, centred at (0, radius): left for radius > 0
    point = (abs(radius) * math.sin(theta), radius * (1.0 - math.cos(theta)))
    assert curvature((0.0, 0.0, 0.0), point) == pytest.approx(1.0 / radius)
    # the same, in a turned and moved frame
    pose = (1.0, -2.0, 0.7)
    assert curvature(pose, to_world(pose, point)) == pytest.approx(1.0 / radius)


def test_named_curvatures() -> None:
    assert curvature((0.0, 0.0, 0.0), (2.0, 0.0)) == 0.0  # straight ahead
    assert curvature((0.0, 0.0, 0.0), (0.0, 0.5)) == pytest.approx(4.0)  # straight left: a half circle of 0.25 m
    assert curvature((0.0, 0.0, 0.0), (0.0, 0.0)) == 0.0  # the pose itself: no arc


def test_projection_gives_along_track_and_signed_cross_track() -> None:
    path = [(0.0, 0.0), (4.0, 0.0)]
    left = project(path, (1.0, 0.3))
    right = project(path, (1.0, -0.3))
    assert (left.along_m, left.cross_track_m, left.remaining_m) == pytest.approx((1.0, 0.3, 3.0))
    assert right.cross_track_m == pytest.approx(-0.3)
    assert project(path, (-1.0, 0.0)).along_m == 0.0  # before the start: clamped
    assert project(path, (5.0, 0.0)).remaining_m == 0.0  # past the end


def test_projection_follows_a_path_that_comes_back_near_itself_in_order() -> None:
    square = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0), (0.0, 0.0)]
    near_start = (0.0, 0.05)  # on the last segment, 5 cm from the first
    assert project(square, near_start).segment == 3  # the nearest of all
    assert project(square, near_start, 0, window=2).segment == 0  # just started: not the end yet
    assert project(square, near_start, start_segment=3).segment == 3  # never back to a segment already passed


def test_zero_length_segments_and_a_one_point_path() -> None:
    path = [(0.0, 0.0), (0.0, 0.0), (1.0, 0.0), (1.0, 0.0)]
    assert path_length(path) == 1.0
    assert project(path, (0.5, 0.2)).along_m == pytest.approx(0.5)
    assert lookahead_point(path, project(path, (0.5, 0.2)), 2.0) == (1.0, 0.0)
    single = [(2.0, 3.0)]
    assert project(single, (0.0, 0.0)).remaining_m == 0.0 and lookahead_point(single, project(single, (0, 0)), 1) == \
        (2.0, 3.0)


def test_lookahead_on_the_extension_past_the_end() -> None:
    path = [(0.0, 0.0), (1.0, 0.0)]
    assert lookahead_point(path, project(path, (0.9, 0.05)), 0.3) == (1.0, 0.0)
    assert lookahead_point(path, project(path, (0.9, 0.05)), 0.3, extend=True) == pytest.approx((1.2, 0.0))


def drive(follower: PurePursuit, pose, dt: float = 0.02, max_steps: int = 5000, slip: float = 0.0):
    """Close the loop on a unicycle: command → exact arc; returns the final pose and the largest |cross-track|."""
    worst = 0.0
    for _ in range(max_steps):
        cmd = follower.update(pose, dt)
        worst = max(worst, abs(cmd.progress.cross_track_m))
        if cmd.reached:
            return pose, worst, True
        pose = integrate_twist(*pose, cmd.linear_m_s * (1.0 - slip), cmd.angular_rad_s * (1.0 - slip), dt)
    return pose, worst, False


@pytest.mark.parametrize("start", [(0.0, 0.3, 0.0), (0.0, -0.2, 0.4), (0.2, 0.0, -0.5)])
def test_follower_converges_onto_a_line_and_stops_on_its_end(start) -> None:
    f = PurePursuit([(0.0, 0.0), (3.0, 0.0)], lookahead_m=0.4, speed_m_s=0.3)
    pose, worst, reached = drive(f, start)
    assert reached
    assert math.hypot(pose[0] - 3.0, pose[1]) <= 0.03  # on the mark
    assert abs(pose[1]) < 0.02 and abs(pose[2]) < math.radians(5)  # onto the line, facing along it
    # never further off than it began, but for what a nose pointing off carries it before it turns back
    assert worst <= abs(start[1]) + 0.4 * math.sin(abs(start[2])) + 1e-9


def test_follower_turns_in_place_first_when_the_path_is_behind() -> None:
    f = PurePursuit([(0.0, 0.0), (-2.0, 0.0)], lookahead_m=0.3)
    cmd = f.update((0.0, 0.0, 0.0))
    assert cmd.linear_m_s == 0.0 and abs(cmd.angular_rad_s) > 0.0
    pose, _, reached = drive(f, (0.0, 0.0, 0.0))
    assert reached and math.hypot(pose[0] + 2.0, pose[1]) <= 0.03


def test_follower_goes_round_the_corners_of_a_square_in_order() -> None:
    square = [(0.0, 0.0), (2.0, 0.0), (2.0, 2.0), (0.0, 2.0), (0.0, 0.0)]
    f = PurePursuit(square, lookahead_m=0.3, speed_m_s=0.3)
    pose, worst, reached = drive(f, (0.0, 0.0, 0.0), max_steps=20000)
    assert reached and f.segment == 3  # it went all the way round, not back to the start at once
    assert math.hypot(pose[0], pose[1]) <= 0.03 and worst < 0.2  # corners cut by at most ~the look-ahead / 2


def test_follower_respects_its_speed_and_turn_rate_limits() -> None:
    f = PurePursuit([(0.0, 0.0), (0.5, 0.5), (1.0, 0.0)], lookahead_m=0.2, speed_m_s=0.4, max_rate_rad_s=0.7)
    pose = (0.0, 0.0, 0.0)
    for _ in range(2000):
        cmd = f.update(pose, 0.02)
        assert 0.0 <= cmd.linear_m_s <= 0.4 + 1e-12 and abs(cmd.angular_rad_s) <= 0.7 + 1e-12
        if cmd.reached:
            break
        pose = integrate_twist(*pose, cmd.linear_m_s, cmd.angular_rad_s, 0.02)
    assert cmd.reached


def test_a_robot_already_on_the_goal_is_done_at_once() -> None:
    f = PurePursuit([(0.0, 0.0), (1.0, 0.0)])
    cmd = f.update((1.0, 0.0, 0.0))
    assert cmd.reached and cmd.linear_m_s == 0.0 and cmd.angular_rad_s == 0.0


def test_it_stops_where_the_projection_reaches_the_end_even_beside_it() -> None:
    # 2 cm beside the end (within the tolerance, not a third of it): done once the projection gets there
    f = PurePursuit([(0.0, 0.0), (1.0, 0.0)], goal_tolerance_m=0.03)
    assert not f.update((1.0 - 2 * STOP_M, 0.02, 0.0)).reached
    assert f.update((1.0 - 0.5 * STOP_M, 0.02, 0.0)).reached


def test_it_slows_down_toward_the_end() -> None:
    f = PurePursuit([(0.0, 0.0), (2.0, 0.0)], speed_m_s=0.5, decel_m_s2=0.5)
    far, near = f.update((0.5, 0.0, 0.0)).linear_m_s, f.update((1.95, 0.0, 0.0)).linear_m_s
    assert far == pytest.approx(0.5) and near < 0.25


@pytest.mark.parametrize("kwargs", [{"lookahead_m": 0.0}, {"speed_m_s": -1.0}, {"max_rate_rad_s": math.nan},
                                    {"turn_in_place_rad": 4.0}])
def test_fail__invalid_parameters(kwargs) -> None:
    with pytest.raises(ValueError):
        PurePursuit([(0.0, 0.0), (1.0, 0.0)], **kwargs)


@pytest.mark.parametrize("path", [[], [(0.0, math.nan)], np.zeros((3, 3))])
def test_fail__invalid_paths(path) -> None:
    with pytest.raises(ValueError):
        PurePursuit(path)
