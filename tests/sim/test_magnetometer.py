"""Virtual magnetometer: field geometry, iron distortion, noise and determinism."""

import math

import numpy as np
import pytest

from robotics.estimation.attitude import roll_pitch_from_accel, rotation_zyx, yaw_from_mag
from sim.magnetometer import Magnetometer


@pytest.mark.parametrize(
    "name, declination_deg, dip_deg, expected_ut",
    [
        ("north_horizontal", 0.0, 0.0, (0.0, 50.0, 0.0)),
        ("straight_down", 0.0, 90.0, (0.0, 0.0, -50.0)),
        ("east_declination", 90.0, 0.0, (50.0, 0.0, 0.0)),
        ("dip_60", 0.0, 60.0, (0.0, 25.0, -43.30127)),
    ],
)
def test_world_field_points_to_magnetic_north_and_dips_down(name, declination_deg, dip_deg, expected_ut):
    mag = Magnetometer(50e-6, math.radians(declination_deg), math.radians(dip_deg))
    assert mag.world_field * 1e6 == pytest.approx(expected_ut, abs=1e-5)


def test_reading_is_the_world_field_in_body_axes():
    mag = Magnetometer()
    r = rotation_zyx(0.3, -0.4, 2.0)
    assert mag.read(r) == pytest.approx(r.T @ mag.world_field, abs=1e-18)
    assert np.linalg.norm(mag.read(r)) == pytest.approx(50e-6)


def test_heading_from_a_reading_matches_the_body_yaw_with_declination():
    decl = math.radians(-7.0)
    mag = Magnetometer(declination=decl, dip=math.radians(55))
    for yaw in np.linspace(-3.0, 3.0, 13):
        r = rotation_zyx(0.2, 0.1, yaw)
        roll, pitch = roll_pitch_from_accel(r.T @ [0, 0, 9.81])
        assert yaw_from_mag(mag.read(r), roll, pitch, declination=decl) == pytest.approx(yaw, abs=1e-9)


def test_hard_and_soft_iron_distort_as_modelled():
    mag = Magnetometer(dip=0.0, hard_iron_t=(1e-6, 2e-6, 3e-6), soft_iron=(2.0, 0.5, 1.0))
    assert mag.read(np.eye(3)) == pytest.approx([1e-6, 27e-6, 3e-6], abs=1e-15)


def test_full_soft_iron_matrix_is_accepted():
    soft = np.array([[1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    mag = Magnetometer(dip=0.0, soft_iron=soft)
    assert mag.read(np.eye(3)) == pytest.approx([5e-6, 50e-6, 0.0], abs=1e-15)


def test_noise_has_the_configured_spread_and_a_seed_repeats_it():
    mag = Magnetometer(noise_sigma_t=0.5e-6)
    a = np.array([mag.read(np.eye(3), np.random.default_rng(1)) for _ in range(1)])
    b = np.array([mag.read(np.eye(3), np.random.default_rng(1)) for _ in range(1)])
    assert np.array_equal(a, b)
    rng = np.random.default_rng(2)
    samples = np.array([mag.read(np.eye(3), rng) for _ in range(4000)])
    assert samples.std(axis=0) == pytest.approx([0.5e-6] * 3, rel=0.05)
    assert samples.mean(axis=0) == pytest.approx(mag.world_field, abs=0.05e-6)


@pytest.mark.parametrize(
    "name, kwargs", [("negative_field", dict(field_strength_t=-1e-6)), ("negative_noise", dict(noise_sigma_t=-1.0))]
)
def test_fail__constructor_rejects(name, kwargs):
    with pytest.raises(ValueError):
        Magnetometer(**kwargs)


def test_fail__noisy_read_without_rng():
    with pytest.raises(ValueError):
        Magnetometer(noise_sigma_t=1e-7).read(np.eye(3))
