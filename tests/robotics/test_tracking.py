"""Tracking deviation statistics: worked cases, identities, shapes and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from robotics.tracking import STATISTICS, deviation, deviation_by_axis


def test_worked_example_by_hand():
    # deviations 0, +0.5, 0, -0.5: signed mean 0, mean |d| 0.25, rms sqrt(0.5/4), max 0.5
    r = deviation([0.0, 1.0, 2.0, 3.0], [0.0, 1.5, 2.0, 2.5])
    assert r == {"mean": 0.0, "mean_abs": 0.25, "rms": pytest.approx(math.sqrt(0.125)), "max_abs": 0.5}


def test_a_constant_lag_shows_in_the_signed_mean():
    commanded = np.linspace(0.0, 1.0, 11)
    r = deviation(commanded, commanded - 0.02)
    assert r["mean"] == pytest.approx(-0.02) and r["mean_abs"] == pytest.approx(0.02)
    assert r["rms"] == pytest.approx(0.02) and r["max_abs"] == pytest.approx(0.02)


def test_perfect_tracking_is_all_zero():
    c = np.random.default_rng(0).normal(size=(50, 3))
    r = deviation(c, c.copy())
    assert all(np.all(r[k] == 0.0) for k in STATISTICS)


def test_two_dimensional_input_gives_one_value_per_axis():
    c = np.zeros((4, 2))
    a = np.array([[0.1, 0.0], [0.1, 0.0], [0.1, 0.0], [0.1, -0.4]])
    r = deviation(c, a)
    assert r["mean"].tolist() == pytest.approx([0.1, -0.1])
    assert r["rms"].tolist() == pytest.approx([0.1, 0.2])
    assert r["max_abs"].tolist() == pytest.approx([0.1, 0.4])


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 4)), elements=st.floats(-1e3, 1e3)),
       arrays(np.float64, 160, elements=st.floats(-1e3, 1e3)))
def test_statistics_are_ordered_and_columns_independent(commanded, noise):
    achieved = commanded + noise[: commanded.size].reshape(commanded.shape)
    r = deviation(commanded, achieved)
    slack = 1e-9 * (1 + r["max_abs"])
    assert np.all(np.abs(r["mean"]) <= r["mean_abs"] + slack)
    assert np.all(r["mean_abs"] <= r["rms"] + slack) and np.all(r["rms"] <= r["max_abs"] + slack)
    for j in range(commanded.shape[1]):
        single = deviation(commanded[:, j], achieved[:, j])
        assert all(single[k] == pytest.approx(float(r[k][j])) for k in STATISTICS)


def test_by_axis_names_the_columns_for_a_report():
    r = deviation_by_axis(("x_m", "yaw_rad"), [[0, 0], [0, 0]], [[0.01, 0.0], [0.03, -0.02]])
    assert list(r) == ["x_m", "yaw_rad"]
    assert r["x_m"] == {"mean": pytest.approx(0.02), "mean_abs": pytest.approx(0.02),
                        "rms": pytest.approx(math.sqrt(0.0005)), "max_abs": pytest.approx(0.03)}
    assert all(type(v) is float for v in r["yaw_rad"].values())
    assert deviation_by_axis(("z_m",), [0.0, 1.0], [0.0, 1.2])["z_m"]["max_abs"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "commanded, achieved, fragment",
    [
        ([0.0, 1.0], [0.0], "same shape"),
        ([[0.0, 1.0]], [[0.0], [1.0]], "same shape"),
        ([], [], "N >= 1"),
        (np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), "(N,) or (N, k)"),
        ([0.0, math.nan], [0.0, 1.0], "commanded sample (1,) is not finite"),
        ([[0.0, 0.0]], [[0.0, math.inf]], "achieved sample (0, 1) is not finite"),
        (["a"], ["b"], "could not convert"),
    ],
)
def test_fail__deviation(commanded, achieved, fragment):
    with pytest.raises(ValueError) as info:
        deviation(commanded, achieved)
    assert fragment in str(info.value)


def test_fail__by_axis_with_the_wrong_number_of_names():
    with pytest.raises(ValueError, match="2 axis names for 3 columns"):
        deviation_by_axis(("a", "b"), np.zeros((2, 3)), np.zeros((2, 3)))
