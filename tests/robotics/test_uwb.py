"""UWB trilateration and range calibration, on the paper's 5 m × 8 m field with four tripod anchors."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.estimation.uwb import RangeCorrection, apply_range_correction, fit_range_correction, trilaterate
from sim.uwb import UwbRanger

# seeds/002: anchors at the corners of a 5 m × 8 m field, 1.20 m up; the tag rides 0.125 m above ground.
PAPER_ANCHORS = np.array([[0.0, 0.0, 1.2], [5.0, 0.0, 1.2], [5.0, 8.0, 1.2], [0.0, 8.0, 1.2]])
TAG_Z = 0.125
PAPER_MEAN_M, PAPER_MAX_M = 0.0908, 0.23
TALL_ANCHORS = np.array([[0.0, 0.0, 0.3], [5.0, 0.0, 2.8], [5.0, 8.0, 0.3], [0.0, 8.0, 2.8]])


def exact_ranges(anchors, p):
    return np.linalg.norm(np.asarray(anchors) - p, axis=1)


# --- exact ranges --------------------------------------------------------------------------------

points_on_field = st.tuples(st.floats(-2.0, 7.0), st.floats(-2.0, 10.0), st.floats(-1.0, 1.15))


@settings(max_examples=200, deadline=None)
@given(p=points_on_field)
def test_exact_ranges_give_the_position_within_a_millimetre_below_coplanar_anchors(p):
    p = np.array(p)
    assert np.linalg.norm(trilaterate(PAPER_ANCHORS, exact_ranges(PAPER_ANCHORS, p)) - p) < 1e-3


@settings(max_examples=200, deadline=None)
@given(p=st.tuples(st.floats(-2.0, 7.0), st.floats(-2.0, 10.0), st.floats(-1.0, 4.0)))
def test_exact_ranges_give_the_position_within_a_millimetre_with_anchors_at_two_heights(p):
    p = np.array(p)
    assert np.linalg.norm(trilaterate(TALL_ANCHORS, exact_ranges(TALL_ANCHORS, p)) - p) < 1e-3


def test_coplanar_anchors_default_to_the_solution_below_them():
    p = np.array([2.0, 3.0, 0.125])
    assert trilaterate(PAPER_ANCHORS, exact_ranges(PAPER_ANCHORS, p)) == pytest.approx(p, abs=1e-6)


def test_coplanar_anchors_with_a_z_hint_above_pick_the_mirror_solution_above():
    p_below = np.array([2.0, 3.0, 0.125])
    p_above = np.array([2.0, 3.0, 2.275])  # the reflection in the anchor plane z = 1.2
    ranges = exact_ranges(PAPER_ANCHORS, p_below)
    assert trilaterate(PAPER_ANCHORS, ranges, z_hint=3.0) == pytest.approx(p_above, abs=1e-6)
    assert trilaterate(PAPER_ANCHORS, ranges, z_hint=0.0) == pytest.approx(p_below, abs=1e-6)


def test_three_anchors_are_enough_for_a_fix_below_them():
    p = np.array([1.0, 2.0, 0.0])
    assert trilaterate(PAPER_ANCHORS[:3], exact_ranges(PAPER_ANCHORS[:3], p)) == pytest.approx(p, abs=1e-6)


def test_z_fixed_solves_x_and_y_at_the_known_height():
    p = np.array([4.0, 1.0, TAG_Z])
    est = trilaterate(PAPER_ANCHORS, exact_ranges(PAPER_ANCHORS, p), z_fixed=TAG_Z)
    assert est[2] == TAG_Z
    assert est == pytest.approx(p, abs=1e-6)


def test_tilted_anchor_plane_still_defaults_to_the_lower_side():
    anchors = np.array([[0.0, 0.0, 0.5], [5.0, 0.0, 1.0], [5.0, 8.0, 2.6], [0.0, 8.0, 2.1]])  # one plane
    p = np.array([2.5, 4.0, 0.0])
    assert trilaterate(anchors, exact_ranges(anchors, p)) == pytest.approx(p, abs=1e-6)


# --- noisy ranges: beat the paper's 9.08 cm mean / 23 cm max ------------------------------------


def _field_points(rng, n):
    return np.column_stack([rng.uniform(0.25, 4.75, n), rng.uniform(0.25, 7.75, n), np.full(n, TAG_Z)])


def test_noisy_ranges_of_5_cm_beat_the_papers_mean_and_max_error():
    rng = np.random.default_rng(2024)
    uwb = UwbRanger(PAPER_ANCHORS, sigma_m=0.05)
    errors_xy, errors_fixed = [], []
    for p in _field_points(rng, 1000):
        ranges = uwb.ranges(p, rng)
        errors_xy.append(np.linalg.norm(trilaterate(PAPER_ANCHORS, ranges)[:2] - p[:2]))
        errors_fixed.append(np.linalg.norm(trilaterate(PAPER_ANCHORS, ranges, z_fixed=TAG_Z) - p))
    for errors in (np.array(errors_xy), np.array(errors_fixed)):
        assert errors.mean() < 0.06 < PAPER_MEAN_M  # ~4.9 cm
        assert errors.max() < PAPER_MAX_M
        assert np.percentile(errors, 95) < 0.11


def test_noisy_ranges_with_anchors_at_two_heights_stay_unbiased():
    rng = np.random.default_rng(7)
    uwb = UwbRanger(TALL_ANCHORS, sigma_m=0.05)
    diffs = np.array([trilaterate(TALL_ANCHORS, uwb.ranges(p, rng)) - p for p in _field_points(rng, 500)])
    assert np.abs(diffs.mean(axis=0)) == pytest.approx([0, 0, 0], abs=0.01)
    assert np.linalg.norm(diffs[:, :2], axis=1).mean() < 0.07


# --- inconsistent and partial input never fails --------------------------------------------------


@pytest.mark.parametrize(
    "name, ranges",
    [
        ("spheres_too_small_to_meet", [1.0, 1.0, 1.0, 1.0]),
        ("spheres_too_large", [20.0, 20.0, 20.0, 20.0]),
        ("one_wild_nlos_range", [3.61, 3.61, 25.0, 6.4]),
        ("all_zero", [0.0, 0.0, 0.0, 0.0]),
        ("negative_noise_around_zero", [-0.02, 5.0, 9.4, 8.0]),
        ("one_dropout", [3.6, 3.6, math.nan, 6.4]),
        ("contradictory", [0.1, 0.1, 0.1, 9.0]),
    ],
)
def test_ok__inconsistent_ranges_return_a_finite_best_estimate(name, ranges):
    est = trilaterate(PAPER_ANCHORS, ranges)
    assert est.shape == (3,)
    assert np.all(np.isfinite(est))


def test_inconsistent_spheres_return_the_least_squares_point_not_a_failure():
    est = trilaterate(PAPER_ANCHORS, [3.0, 3.0, 3.0, 3.0])
    assert est[:2] == pytest.approx([2.5, 4.0], abs=1e-6)  # the centre, by symmetry


@pytest.mark.parametrize(
    "name, ranges",
    [("two_dropouts", [3.0, math.nan, math.nan, 6.0]), ("all_dropouts", [math.nan] * 4)],
)
def test_fail__fewer_than_three_finite_ranges_raise(name, ranges):
    with pytest.raises(ValueError):
        trilaterate(PAPER_ANCHORS, ranges)


@pytest.mark.parametrize(
    "name, anchors, ranges",
    [("ranges_wrong_length", PAPER_ANCHORS, [1.0, 2.0, 3.0]), ("anchors_not_3d", PAPER_ANCHORS[:, :2], [1.0] * 4)],
)
def test_fail__shapes_are_checked(name, anchors, ranges):
    with pytest.raises(ValueError):
        trilaterate(anchors, ranges)


# --- range calibration ---------------------------------------------------------------------------


def test_range_correction_round_trip_recovers_exact_coefficients():
    raw = np.linspace(2.0, 8.0, 13)
    true = 0.03 + 0.97 * raw + 0.0015 * raw**2
    corr = fit_range_correction(raw, true)
    assert corr.coefficients == pytest.approx((0.0015, 0.97, 0.03), abs=1e-9)
    assert corr(raw) == pytest.approx(true, abs=1e-9)
    assert apply_range_correction(raw, corr) == pytest.approx(true, abs=1e-9)
    assert apply_range_correction(raw, corr.coefficients) == pytest.approx(true, abs=1e-9)


def test_range_correction_fitted_on_the_papers_calibration_run_removes_the_distortion():
    # seeds/002 §2.2: 13 distances from 2 m to 8 m, four headings each, averaged, quadratic fit.
    rng = np.random.default_rng(3)
    uwb = UwbRanger([[0.0, 0.0, 1.2]], sigma_m=0.05, distortion=(0.12, 1.03, 0.004))
    horizontal = np.arange(2.0, 8.01, 0.5)
    tags = [np.array([h, 0.0, TAG_Z]) for h in horizontal]
    true = np.array([uwb.true_ranges(p)[0] for p in tags])
    raw = np.array([np.mean([uwb.ranges(p, rng)[0] for _ in range(4)]) for p in tags])
    corr = fit_range_correction(raw, true, degree=2)

    test_tags = [np.array([h, 0.0, TAG_Z]) for h in rng.uniform(2.0, 8.0, 500)]
    test_true = np.array([uwb.true_ranges(p)[0] for p in test_tags])
    test_raw = np.array([uwb.ranges(p, rng)[0] for p in test_tags])
    before = test_raw - test_true
    after = corr(test_raw) - test_true
    assert abs(before.mean()) > 0.25
    assert abs(after.mean()) < 0.02
    assert np.sqrt(np.mean(after**2)) < 0.07  # back to about the 5 cm noise


@settings(max_examples=50, deadline=None)
@given(coefs=st.tuples(st.floats(-0.01, 0.01), st.floats(0.8, 1.2), st.floats(-0.5, 0.5)))
def test_range_correction_of_an_exact_quadratic_is_exact(coefs):
    raw = np.linspace(1.0, 10.0, 20)
    corr = fit_range_correction(raw, np.polyval(coefs, raw))
    assert corr(raw) == pytest.approx(np.polyval(coefs, raw), abs=1e-8)


def test_range_correction_keeps_nan_as_nan_and_skips_nan_pairs():
    corr = fit_range_correction([1.0, 2.0, math.nan, 3.0, 4.0], [1.0, 2.0, 5.0, 3.0, 4.0], degree=1)
    assert corr.coefficients == pytest.approx((1.0, 0.0), abs=1e-12)
    assert math.isnan(corr(math.nan))


def test_range_correction_is_a_frozen_value_object():
    corr = RangeCorrection((1.0, 0.0))
    with pytest.raises(AttributeError):
        corr.coefficients = (2.0, 0.0)


@pytest.mark.parametrize(
    "name, raw, true, degree",
    [
        ("length_mismatch", [1.0, 2.0, 3.0], [1.0, 2.0], 1),
        ("too_few_points", [1.0, 2.0], [1.0, 2.0], 2),
        ("negative_degree", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], -1),
        ("fractional_degree", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 1.5),
    ],
)
def test_fail__fit_range_correction_rejects(name, raw, true, degree):
    with pytest.raises(ValueError):
        fit_range_correction(raw, true, degree)
