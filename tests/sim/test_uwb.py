"""Virtual UWB ranger: exact geometry, noise, NLOS bias, distortion, dropouts, determinism."""

import math

import numpy as np
import pytest

from sim.uwb import UwbRanger

ANCHORS = [[0.0, 0.0, 1.2], [5.0, 0.0, 1.2], [5.0, 8.0, 1.2], [0.0, 8.0, 1.2]]
TAG = np.array([2.0, 3.0, 0.125])


def draws(uwb, n=5000, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([uwb.ranges(TAG, rng) for _ in range(n)])


def test_noise_free_ranges_are_the_distances():
    uwb = UwbRanger(ANCHORS, sigma_m=0.0)
    assert uwb.ranges(TAG) == pytest.approx(np.linalg.norm(np.array(ANCHORS) - TAG, axis=1))


def test_noise_is_unbiased_with_the_configured_sigma():
    uwb = UwbRanger(ANCHORS, sigma_m=0.05)
    err = draws(uwb) - uwb.true_ranges(TAG)
    assert err.mean(axis=0) == pytest.approx([0.0] * 4, abs=0.003)
    assert err.std(axis=0) == pytest.approx([0.05] * 4, rel=0.05)


def test_nlos_only_lengthens_ranges_at_the_configured_rate_and_mean():
    uwb = UwbRanger(ANCHORS, sigma_m=0.0, nlos_probability=0.1, nlos_bias_m=0.4)
    err = draws(uwb) - uwb.true_ranges(TAG)
    assert np.all(err >= -1e-12)
    hit = err > 1e-12
    assert hit.mean() == pytest.approx(0.1, abs=0.01)
    assert err[hit].mean() == pytest.approx(0.4, rel=0.05)


def test_quadratic_distortion_follows_a_plus_b_d_plus_c_d_squared():
    a, b, c = 0.1, 1.02, 0.003
    uwb = UwbRanger(ANCHORS, sigma_m=0.0, distortion=(a, b, c))
    d = uwb.true_ranges(TAG)
    assert uwb.ranges(TAG) == pytest.approx(a + b * d + c * d**2)


def test_dropouts_are_nan_at_the_configured_rate():
    uwb = UwbRanger(ANCHORS, dropout_probability=0.2)
    r = draws(uwb)
    assert np.isnan(r).mean() == pytest.approx(0.2, abs=0.01)
    assert np.all(np.isfinite(r[~np.isnan(r)]))


def test_same_seed_same_ranges_whatever_else_changes_in_the_config():
    base = draws(UwbRanger(ANCHORS, sigma_m=0.05), n=20, seed=9)
    again = draws(UwbRanger(ANCHORS, sigma_m=0.05), n=20, seed=9)
    with_dropouts = draws(UwbRanger(ANCHORS, sigma_m=0.05, dropout_probability=0.1), n=20, seed=9)
    assert np.array_equal(base, again)
    # The draw count does not depend on the config, so the noise stream is the same where nothing dropped.
    kept = ~np.isnan(with_dropouts)
    assert np.array_equal(base[kept], with_dropouts[kept])


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("anchors_2d", dict(anchors=[[0.0, 0.0]])),
        ("negative_sigma", dict(anchors=ANCHORS, sigma_m=-0.1)),
        ("probability_above_one", dict(anchors=ANCHORS, nlos_probability=1.5)),
        ("negative_dropout", dict(anchors=ANCHORS, dropout_probability=-0.1)),
        ("distortion_not_three_terms", dict(anchors=ANCHORS, distortion=(0.0, 1.0))),
    ],
)
def test_fail__constructor_rejects(name, kwargs):
    with pytest.raises(ValueError):
        UwbRanger(**kwargs)


def test_fail__noisy_ranges_without_rng():
    with pytest.raises(ValueError):
        UwbRanger(ANCHORS, sigma_m=0.05).ranges(TAG)


def test_ok__noise_free_ranges_without_rng():
    assert not any(math.isnan(v) for v in UwbRanger(ANCHORS, sigma_m=0.0).ranges(TAG))


# ---------------------------------------------------------------- the field's errors (issue 23)
def test_blocked_line_of_sight_lengthens_the_range_by_the_material_crossed():
    uwb = UwbRanger(ANCHORS, sigma_m=0.0, nlos_excess_per_m=0.5)
    free = uwb.ranges(TAG)
    blocked = uwb.ranges(TAG, penetration_m=[0.0, 0.4, 0.0, 1.0])
    assert blocked - free == pytest.approx([0.0, 0.2, 0.0, 0.5])


def test_blocked_spread_only_lengthens():
    uwb = UwbRanger(ANCHORS, sigma_m=0.0, nlos_excess_per_m=0.2, nlos_sigma_m=0.05)
    rng = np.random.default_rng(3)
    err = np.array([uwb.ranges(TAG, rng, penetration_m=[0.5] * 4) for _ in range(2000)]) - uwb.true_ranges(TAG)
    assert np.all(err >= 0.1 - 1e-12)  # at least the static part, never shorter
    assert (err - 0.1).mean() == pytest.approx(0.05 * math.sqrt(2 / math.pi), rel=0.1)  # |N(0, σ²)|


def test_student_t_noise_has_heavier_tails_than_a_gaussian_of_the_same_scale():
    gauss = draws(UwbRanger(ANCHORS, sigma_m=0.05), n=20000) - UwbRanger(ANCHORS).true_ranges(TAG)
    heavy = draws(UwbRanger(ANCHORS, sigma_m=0.05, noise_dof=4.0), n=20000) - UwbRanger(ANCHORS).true_ranges(TAG)
    # beyond 4 scales: ~6e-5 of a Gaussian's samples, ~1.6 % of a Student-t's with 4 degrees of freedom
    assert (np.abs(gauss) > 0.2).mean() < 0.001 < 0.01 < (np.abs(heavy) > 0.2).mean()
    assert np.std(heavy) == pytest.approx(0.05 * math.sqrt(2.0), rel=0.15)  # √(ν/(ν−2))


def test_outliers_are_late_peaks_at_their_rate():
    uwb = UwbRanger(ANCHORS, sigma_m=0.0, outlier_probability=0.05, outlier_m=1.0)
    err = draws(uwb, n=10000) - uwb.true_ranges(TAG)
    hit = err > 1e-12
    assert np.all(err >= -1e-12) and np.all(err <= 1.0 + 1e-12)
    assert hit.mean() == pytest.approx(0.05, abs=0.006) and err[hit].mean() == pytest.approx(0.5, abs=0.05)


def test_multipath_is_static_per_place_and_varies_across_places():
    uwb = UwbRanger(ANCHORS, sigma_m=0.0, multipath_m=0.05, multipath_length_m=0.3)
    uwb.seed_multipath(np.random.default_rng(7))
    here = uwb.ranges(TAG)
    assert np.array_equal(here, uwb.ranges(TAG))  # standing still: the same bias every time
    grid = [(x, y, 0.125) for x in np.linspace(0.5, 4.5, 25) for y in np.linspace(0.5, 7.5, 25)]
    bias = np.array([uwb.multipath_bias(p) for p in grid])
    assert abs(bias.mean()) < 0.01 and bias.std() == pytest.approx(0.05, rel=0.2)
    # 5 cm apart it has barely changed; a metre apart it is another draw
    near = uwb.multipath_bias((2.05, 3.0, 0.1)) - uwb.multipath_bias((2.0, 3.0, 0.1))
    assert np.abs(near).max() < 0.05


def test_without_a_seed_there_is_no_multipath_and_none_when_off():
    assert np.all(UwbRanger(ANCHORS, multipath_m=0.05).multipath_bias(TAG) == 0.0)  # not drawn yet
    off = UwbRanger(ANCHORS)
    off.seed_multipath(np.random.default_rng(1))
    assert np.all(off.multipath_bias(TAG) == 0.0)


def test_the_field_terms_off_keep_the_old_sequence_exactly():
    # only the terms that draw variates of their own change the stream; off, the ranges are the old ones
    old = draws(UwbRanger(ANCHORS, sigma_m=0.05, nlos_probability=0.02, dropout_probability=0.01), n=50, seed=4)
    same = draws(UwbRanger(ANCHORS, sigma_m=0.05, nlos_probability=0.02, dropout_probability=0.01,
                           nlos_excess_per_m=0.3, multipath_m=0.0), n=50, seed=4)  # static terms only, unblocked
    assert np.array_equal(old, same, equal_nan=True)


@pytest.mark.parametrize("kwargs", [dict(noise_dof=2.0), dict(outlier_probability=2.0), dict(outlier_m=-1.0),
                                    dict(nlos_excess_per_m=-0.1), dict(multipath_m=-0.01),
                                    dict(multipath_length_m=0.0)])
def test_fail__field_terms_rejected(kwargs):
    with pytest.raises(ValueError):
        UwbRanger(ANCHORS, **kwargs)
