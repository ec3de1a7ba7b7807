"""Magnetometer calibration: the ellipsoid fit recovers hard-iron offset and soft-iron scale."""

import math

import numpy as np
import pytest

from robotics.estimation.attitude import rotation_zyx, yaw_from_mag
from robotics.estimation.magcal import apply, fit_ellipsoid
from sim.magnetometer import Magnetometer

HARD = np.array([12e-6, -7e-6, 20e-6])
SOFT = np.array([1.15, 0.9, 1.05])


def random_attitudes(rng, n):
    return [rotation_zyx(rng.uniform(-math.pi, math.pi), rng.uniform(-1.5, 1.5), rng.uniform(-math.pi, math.pi)) for _ in range(n)]


def readings(mag, rng, n=600):
    return np.array([mag.read(r, rng) for r in random_attitudes(rng, n)])


def test_fit_recovers_a_known_offset_and_scale_from_noisy_readings():
    rng = np.random.default_rng(5)
    mag = Magnetometer(50e-6, dip=math.radians(60), hard_iron_t=HARD, soft_iron=SOFT, noise_sigma_t=0.2e-6)
    offset, scale = fit_ellipsoid(readings(mag, rng), field_strength=50e-6)
    assert offset == pytest.approx(HARD, abs=0.2e-6)
    assert scale * SOFT == pytest.approx([1.0, 1.0, 1.0], abs=0.01)


def test_calibrated_readings_lie_on_a_sphere_of_the_field_strength():
    rng = np.random.default_rng(6)
    mag = Magnetometer(48e-6, hard_iron_t=HARD, soft_iron=SOFT, noise_sigma_t=0.1e-6)
    raw = readings(mag, rng)
    offset, scale = fit_ellipsoid(raw, field_strength=48e-6)
    norms = np.linalg.norm(apply(raw, offset, scale), axis=1)
    assert norms.mean() == pytest.approx(48e-6, rel=0.005)
    assert norms.std() < 0.5e-6
    assert np.linalg.norm(raw, axis=1).std() > 5e-6  # it was far from a sphere before


def test_without_field_strength_the_radius_is_the_geometric_mean_of_the_semi_axes():
    rng = np.random.default_rng(7)
    mag = Magnetometer(50e-6, hard_iron_t=HARD, soft_iron=SOFT)
    offset, scale = fit_ellipsoid(readings(mag, rng, 100))
    assert scale == pytest.approx(50e-6 * np.prod(SOFT) ** (1 / 3) / (50e-6 * SOFT), rel=1e-9)
    assert offset == pytest.approx(HARD, abs=1e-12)


def test_calibration_fixes_the_tilt_compensated_heading():
    rng = np.random.default_rng(8)
    mag = Magnetometer(50e-6, dip=math.radians(65), hard_iron_t=HARD, soft_iron=SOFT, noise_sigma_t=0.1e-6)
    offset, scale = fit_ellipsoid(readings(mag, rng))
    raw_err, cal_err = [], []
    for r in random_attitudes(rng, 200):
        roll, pitch = math.atan2(r[2, 1], r[2, 2]), math.asin(-r[2, 0])
        yaw = math.atan2(r[1, 0], r[0, 0])
        m = mag.read(r, rng)
        raw_err.append(abs(math.remainder(yaw_from_mag(m, roll, pitch) - yaw, math.tau)))
        cal_err.append(abs(math.remainder(yaw_from_mag(apply(m, offset, scale), roll, pitch) - yaw, math.tau)))
    assert math.degrees(np.mean(raw_err)) > 10.0
    assert math.degrees(np.mean(cal_err)) < 0.5


def test_fit_works_the_same_in_microtesla_and_tesla():
    rng = np.random.default_rng(9)
    raw = readings(Magnetometer(50e-6, hard_iron_t=HARD, soft_iron=SOFT, noise_sigma_t=0.1e-6), rng, 200)
    off_t, sc_t = fit_ellipsoid(raw)
    off_ut, sc_ut = fit_ellipsoid(raw * 1e6)
    assert off_ut == pytest.approx(off_t * 1e6, rel=1e-9)
    assert sc_ut == pytest.approx(sc_t, rel=1e-9)


def test_nan_rows_are_skipped():
    rng = np.random.default_rng(10)
    raw = readings(Magnetometer(50e-6, hard_iron_t=HARD, soft_iron=SOFT), rng, 50)
    raw[3] = np.nan
    offset, _ = fit_ellipsoid(raw)
    assert offset == pytest.approx(HARD, abs=1e-12)


def test_apply_undoes_a_known_distortion_exactly():
    true = np.array([[10.0, 0.0, -5.0], [0.0, 3.0, 1.0]])
    raw = true / [2.0, 0.5, 1.0] + [1.0, 2.0, 3.0]
    assert apply(raw, [1.0, 2.0, 3.0], [2.0, 0.5, 1.0]) == pytest.approx(true)


@pytest.mark.parametrize(
    "name, samples",
    [
        ("too_few", np.eye(3)),
        ("wrong_shape", np.zeros((10, 2))),
        ("all_equal", np.ones((20, 3))),
        ("flat_circle", np.column_stack([np.cos(np.arange(30)), np.sin(np.arange(30)), np.zeros(30)])),
        ("one_direction_only", np.outer(np.linspace(1, 2, 20), [1.0, 1.0, 1.0])),
    ],
)
def test_fail__fit_ellipsoid_rejects(name, samples):
    with pytest.raises(ValueError):
        fit_ellipsoid(samples)
