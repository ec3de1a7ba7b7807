"""Trajectories: validation (ok/fail tables), interpolation, the six Stewart series of seeds/003 and the
SCARA demo, all within reach of the shipped geometries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.kinematics.scara import Scara
from robotics.kinematics.stewart import StewartPlatform
from robotics.trajectory import (
    MAX_AXES,
    MAX_POINTS,
    POSE_AXES,
    SCARA_AXES,
    STEWART_SERIES,
    Trajectory,
    scara_demo,
    stewart_series,
)

TR = Trajectory([0.0, 1.0, 3.0], [[0.0, 10.0], [1.0, 10.0], [3.0, 0.0]], ("a", "b"))


# ---- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, times, values, axes",
    [
        ("one_sample", [0.0], [[1.0]], ("x",)),
        ("one_axis_flat_values", [0.0, 1.0], [1.0, 2.0], ("x",)),
        ("negative_start", [-2.0, -1.0], [[0.0, 1.0], [1.0, 2.0]], ("a", "b")),
        ("uneven_steps", [0.0, 0.001, 5.0], [[0.0], [1.0], [2.0]], ("x",)),
        ("most_axes", [0.0], [list(range(MAX_AXES))], tuple(f"a{i}" for i in range(MAX_AXES))),
    ],
)
def test_ok__trajectory(name, times, values, axes):
    tr = Trajectory(times, values, axes)
    assert tr.values.shape == (len(times), len(axes))


@pytest.mark.parametrize(
    "name, times, values, axes, fragment",
    [
        ("not_increasing", [0.0, 1.0, 1.0], [[0], [1], [2]], ("x",), "t[2] = 1 s is not after t[1] = 1 s"),
        ("going_back", [0.0, 2.0, 1.0], [[0], [1], [2]], ("x",), "t[2] = 1 s is not after"),
        ("nan_time", [0.0, math.nan], [[0], [1]], ("x",), "time t[1] = nan is not finite"),
        ("inf_value", [0.0, 1.0], [[0, 0], [1, math.inf]], ("a", "b"), "value of b at t[1] = 1 s is not finite"),
        ("empty", [], [], ("x",), "1 to 100000 numbers"),
        ("too_long", np.arange(MAX_POINTS + 1.0), np.zeros(MAX_POINTS + 1), ("x",), "1 to 100000 numbers"),
        ("too_many_axes", [0.0], [list(range(MAX_AXES + 1))], tuple(f"a{i}" for i in range(MAX_AXES + 1)),
         "axes must be 1 to 16"),
        ("no_axes", [0.0], [[]], (), "axes must be 1 to 16"),
        ("empty_axis_name", [0.0], [[1.0]], ("",), "non-empty names"),
        ("repeated_axis", [0.0], [[1.0, 2.0]], ("x", "x"), "axis names repeat"),
        ("shape_mismatch", [0.0, 1.0], [[1.0, 2.0]], ("x", "y"), "values must have shape (2, 2)"),
        ("text_value", [0.0], [["up"]], ("x",), "must be numbers"),
        ("times_2d", [[0.0, 1.0]], [[1.0]], ("x",), "times must be a list"),
    ],
)
def test_fail__trajectory(name, times, values, axes, fragment):
    with pytest.raises(ValueError) as info:
        Trajectory(times, values, axes)
    assert fragment in str(info.value)


def test_trajectory_arrays_are_read_only():
    with pytest.raises(ValueError):
        TR.values[0, 0] = 5.0


# ---- interpolation ------------------------------------------------------------------------------

def test_at_interpolates_linearly_and_holds_the_ends():
    assert TR.at(0.5).tolist() == [0.5, 10.0]
    assert TR.at(2.0).tolist() == [2.0, 5.0]
    assert TR.at(1.0).tolist() == [1.0, 10.0]
    assert TR.at(-5.0).tolist() == [0.0, 10.0] and TR.at(3.0).tolist() == [3.0, 0.0] and TR.at(99).tolist() == [3.0, 0.0]


@settings(max_examples=100, deadline=None)
@given(st.floats(-2.0, 6.0))
def test_at_agrees_with_numpy_interp_and_with_sample(t):
    expected = [np.interp(t, TR.times_s, TR.values[:, j]) for j in range(2)]
    assert TR.at(t) == pytest.approx(expected, abs=1e-12)
    assert TR.sample([t])[0] == pytest.approx(expected, abs=1e-12)


def test_fail__at_a_non_finite_time():
    with pytest.raises(ValueError, match="finite"):
        TR.at(math.nan)


def test_column_by_axis_name():
    assert TR.column("b").tolist() == [10.0, 10.0, 0.0]
    with pytest.raises(ValueError, match="no axis 'c'"):
        TR.column("c")


# ---- columns and CSV ----------------------------------------------------------------------------

def test_json_columns_round_trip():
    back = Trajectory.from_columns(TR.to_json())
    assert back.axes == TR.axes and np.array_equal(back.values, TR.values) and np.array_equal(back.times_s, TR.times_s)


@pytest.mark.parametrize(
    "columns, fragment",
    [
        ({"q1_rad": [0.0]}, "needs a 't_s' column"),
        ({"t_s": [0.0]}, "at least one axis"),
        ({"t_s": [0.0, 1.0], "x": [0.0]}, "column 'x' has 1 values for 2 times"),
        ({"t_s": [0.0, 1.0], "x": [0.0, "1"]}, "column 'x' must hold numbers only"),
        ({"t_s": [0.0, 1.0], "x": [0.0, None]}, "column 'x' must hold numbers only"),
        ({"t_s": [0.0, 1.0], "x": [True, False]}, "column 'x' must hold numbers only"),
        ({"t_s": "0,1", "x": [0.0, 1.0]}, "column 't_s' must be a list"),
        ({"t_s": [0.0, 1.0], "x": 3}, "column 'x' must be a list"),
        ({"t_s": [0.0, 1.0], "x": [0.0, math.nan]}, "value of x at t[1] = 1 s is not finite"),
        ({"t_s": list(range(MAX_POINTS + 1)), "x": [0.0]}, "at most 100000 points"),
        ([1, 2], "needs a 't_s' column"),
    ],
)
def test_fail__from_columns(columns, fragment):
    with pytest.raises(ValueError) as info:
        Trajectory.from_columns(columns)
    assert fragment in str(info.value)


def test_from_csv_reads_a_header_and_rows():
    tr = Trajectory.from_csv("t_s, q1_rad ,q2_rad\n0,0,1.2\n\n0.5,0.1,1.25\n1.0,0.2,1.3\n")
    assert tr.axes == SCARA_AXES and tr.at(0.75).tolist() == pytest.approx([0.15, 1.275])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "CSV is empty"),
        ("t_s,x\n", "header but no rows"),
        ("time,x\n0,1\n", "has no 't_s' column"),
        ("t_s,x\n0,1,2\n", "CSV line 2: 3 fields for 2 columns"),
        ("t_s,x\n0,1\n1,up\n", "CSV line 3"),
        ("t_s,x,x\n0,1,2\n", "names a column twice"),
        ("t_s,x\n0,1\n0,2\n", "is not after"),
        ("t_s,x\n" + "0,1\n" * (MAX_POINTS + 1), "more than the 100000 allowed"),
    ],
)
def test_fail__from_csv(text, fragment):
    with pytest.raises(ValueError) as info:
        Trajectory.from_csv(text)
    assert fragment in str(info.value)


# ---- the named series ---------------------------------------------------------------------------

PLATFORM = StewartPlatform.symmetric()
HOME_POSITION, HOME_EULER = PLATFORM.home


@pytest.mark.parametrize("number, name", list(enumerate(STEWART_SERIES, start=1)))
def test_series_have_the_papers_sampling_and_start_and_end_at_home(number, name):
    s = stewart_series(name, HOME_POSITION, HOME_EULER)
    assert stewart_series(number, HOME_POSITION, HOME_EULER).values.tolist() == s.values.tolist()
    assert len(s) == 1000 and s.axes == POSE_AXES
    assert np.allclose(np.diff(s.times_s), 0.01) and s.times_s[0] == 0.0 and s.duration_s == pytest.approx(9.99)
    home = np.concatenate([HOME_POSITION, HOME_EULER])
    assert np.allclose(s.values[0], home)
    # two whole cycles at 0.2 Hz: the last sample (9.99 s) is one step short of home, |sin| < 0.013
    assert np.allclose(s.values[-1], home, atol=0.013 * 0.44)


@pytest.mark.parametrize(
    "name, moving, amplitude",
    [
        ("vertical", {"z_m": 1}, 0.10),
        ("up_left", {"z_m": 1, "y_m": 1}, 0.06),
        ("down_right", {"z_m": -1, "x_m": 1}, 0.06),
        ("roll", {"roll_rad": 1}, math.radians(20)),
        ("pitch", {"pitch_rad": 1}, math.radians(20)),
        ("yaw", {"yaw_rad": 1}, math.radians(25)),
    ],
)
def test_series_move_only_their_axes_with_the_documented_amplitude(name, moving, amplitude):
    s = stewart_series(name, HOME_POSITION, HOME_EULER)
    home = dict(zip(POSE_AXES, np.concatenate([HOME_POSITION, HOME_EULER])))
    quarter = s.at(1.25)  # sin(2π·0.2·1.25) = 1
    for axis, value in zip(POSE_AXES, quarter):
        assert value == pytest.approx(home[axis] + amplitude * moving.get(axis, 0), abs=1e-12), axis
    for axis in POSE_AXES:
        if axis not in moving:
            assert np.all(s.column(axis) == home[axis])


@pytest.mark.parametrize("name", STEWART_SERIES)
def test_every_series_sample_is_reachable_by_the_reference_platform(name):
    s = stewart_series(name, HOME_POSITION, HOME_EULER)
    for row in s.values:
        assert PLATFORM.within_limits(row[:3], row[3:]), (name, row)


def test_series_amplitude_and_sampling_can_be_changed():
    s = stewart_series("roll", amplitude=0.1, frequency_hz=1.0, points=200, dt_s=0.005)
    assert len(s) == 200 and s.at(0.25)[3] == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(name="sideways"), "unknown series 'sideways'"),
        (dict(name=7), "unknown series 7"),
        (dict(name=True), "unknown series True"),
        (dict(name="roll", amplitude=math.nan), "amplitude must be finite"),
        (dict(name="roll", frequency_hz=0.0), "frequency_hz > 0"),
        (dict(name="roll", points=1), "points must be an integer"),
        (dict(name="roll", points=MAX_POINTS + 1), "points must be an integer"),
        (dict(name="roll", dt_s=-0.01), "dt_s must be > 0"),
    ],
)
def test_fail__stewart_series(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        stewart_series(**kwargs)


def test_scara_demo_stays_within_the_shipped_arm_and_away_from_singularity():
    demo = scara_demo()
    arm = Scara(0.3, 0.2, q_min=np.radians([-170, -150]), q_max=np.radians([170, 150]))
    assert demo.axes == SCARA_AXES and len(demo) == 1000
    for q in demo.values:
        assert arm.within_limits(q)
        assert abs(math.sin(q[1])) > 0.5  # far from q2 = 0 or pi
    assert demo.column("q1_rad").max() == pytest.approx(0.8, abs=1e-3)
