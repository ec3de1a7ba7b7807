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
