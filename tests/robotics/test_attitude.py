"""Attitude: accelerometer tilt, tilt-compensated heading and the complementary filter, on known truth."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.estimation.attitude import (
    AttitudeFilter,
    compass_heading_deg,
    euler_zyx,
    roll_pitch_from_accel,
    rotation_from_rotvec,
    rotation_zyx,
    rotvec_from_rotation,
    yaw_from_mag,
)
from sim.imu import ImuNoise, VirtualImu
from sim.magnetometer import Magnetometer

G = 9.80665


def world_field(declination=0.0, dip=math.radians(60), strength=50e-6):
    return Magnetometer(strength, declination, dip).world_field


angles = st.tuples(
    st.floats(-math.pi + 1e-3, math.pi - 1e-3),  # roll
    st.floats(-math.pi / 2 + 0.05, math.pi / 2 - 0.05),  # pitch, away from gimbal lock
    st.floats(-math.pi + 1e-3, math.pi - 1e-3),  # yaw
)


# --- conventions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, rpy, body_vec, world_vec",
    [
        ("yaw_zero_faces_east", (0, 0, 0), (1, 0, 0), (1, 0, 0)),
        ("yaw_plus_half_pi_faces_north", (0, 0, math.pi / 2), (1, 0, 0), (0, 1, 0)),
        ("positive_pitch_is_nose_down", (0, 0.5, 0), (1, 0, 0), (math.cos(0.5), 0, -math.sin(0.5))),
        ("positive_roll_is_right_side_down", (0.5, 0, 0), (0, -1, 0), (0, -math.cos(0.5), -math.sin(0.5))),
    ],
)
def test_rotation_zyx_follows_the_design_conventions(name, rpy, body_vec, world_vec):
    assert np.allclose(rotation_zyx(*rpy) @ body_vec, world_vec)


def test_rotation_zyx_is_rz_ry_rx():
    r, p, y = 0.3, -0.2, 1.3
    assert np.allclose(
        rotation_zyx(r, p, y), rotation_zyx(0, 0, y) @ rotation_zyx(0, p, 0) @ rotation_zyx(r, 0, 0)
    )


@settings(max_examples=200, deadline=None)
@given(rpy=angles)
def test_euler_of_rotation_returns_the_angles(rpy):
    assert np.allclose(euler_zyx(rotation_zyx(*rpy)), rpy, atol=1e-9)


@pytest.mark.parametrize("name, pitch", [("nose_straight_down", math.pi / 2), ("nose_straight_up", -math.pi / 2)])
def test_euler_at_gimbal_lock_reports_zero_roll_and_an_equivalent_rotation(name, pitch):
    r = rotation_zyx(0.4, pitch, 1.0)
    roll, p, yaw = euler_zyx(r)
    assert roll == 0.0 and p == pytest.approx(pitch)
    assert np.allclose(rotation_zyx(roll, p, yaw), r, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    axis=st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.floats(-1, 1)).filter(lambda a: np.linalg.norm(a) > 1e-3),
    angle=st.floats(0.0, math.pi),
)
def test_rotvec_of_rotation_returns_the_rotvec_up_to_a_half_turn(axis, angle):
    w = angle * np.asarray(axis) / np.linalg.norm(axis)
    back = rotvec_from_rotation(rotation_from_rotvec(w))
    assert np.allclose(rotation_from_rotvec(back), rotation_from_rotvec(w), atol=1e-9)
    if angle < math.pi - 1e-6:
        assert np.allclose(back, w, atol=1e-7)


@pytest.mark.parametrize(
    "name, w",
    [
        ("zero", (0.0, 0.0, 0.0)),
        ("tiny", (1e-9, -2e-9, 3e-10)),
        ("half_turn_x", (math.pi, 0.0, 0.0)),
        ("half_turn_diagonal", tuple(math.pi * np.array([1, -1, 1]) / math.sqrt(3))),
        ("just_under_half_turn", (0.0, 0.0, math.pi - 1e-7)),
    ],
)
def test_rotvec_round_trip_at_the_edge_cases(name, w):
    r = rotation_from_rotvec(w)
    assert np.allclose(r @ r.T, np.eye(3), atol=1e-12)
    assert np.allclose(rotation_from_rotvec(rotvec_from_rotation(r)), r, atol=1e-9)


# --- accelerometer tilt and magnetometer heading ----------------------------------------------


@settings(max_examples=300, deadline=None)
@given(rpy=angles)
def test_roll_pitch_from_accel_recovers_the_tilt_of_a_resting_body(rpy):
    r = rotation_zyx(*rpy)
    acc = r.T @ [0.0, 0.0, G]  # specific force at rest
    roll, pitch = roll_pitch_from_accel(acc)
    assert roll == pytest.approx(rpy[0], abs=1e-9)
    assert pitch == pytest.approx(rpy[1], abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(
    rpy=angles,
    declination=st.floats(-0.5, 0.5),
    dip=st.floats(-1.3, 1.3),
)
def test_yaw_from_mag_recovers_the_true_yaw_on_random_orientations_with_dip(rpy, declination, dip):
    r = rotation_zyx(*rpy)
    acc = r.T @ [0.0, 0.0, G]
    mag = r.T @ world_field(declination, dip)
    roll, pitch = roll_pitch_from_accel(acc)
    yaw = yaw_from_mag(mag, roll, pitch, declination=declination)
    assert math.remainder(yaw - rpy[2], math.tau) == pytest.approx(0.0, abs=1e-8)


def test_yaw_from_mag_without_declination_is_relative_to_magnetic_north():
    decl = math.radians(10)
    mag = world_field(decl)  # body aligned with the world: true yaw 0 (east)
    assert yaw_from_mag(mag, 0.0, 0.0) == pytest.approx(decl)
    assert yaw_from_mag(mag, 0.0, 0.0, declination=decl) == pytest.approx(0.0, abs=1e-12)


def test_untilted_heading_would_be_wrong_so_tilt_compensation_matters():
    r = rotation_zyx(0.4, 0.3, 1.0)
    mag = r.T @ world_field()
    assert abs(yaw_from_mag(mag, 0.0, 0.0) - 1.0) > 0.1
    assert yaw_from_mag(mag, 0.4, 0.3) == pytest.approx(1.0, abs=1e-9)


def test_accel_and_mag_functions_take_batches():
    rng = np.random.default_rng(2)
    rpy = np.column_stack([rng.uniform(-3, 3, 50), rng.uniform(-1.4, 1.4, 50), rng.uniform(-3, 3, 50)])
    rs = np.array([rotation_zyx(*a) for a in rpy])
    acc = np.einsum("nji,j->ni", rs, [0.0, 0.0, G])
    mag = np.einsum("nji,j->ni", rs, world_field())
    roll, pitch = roll_pitch_from_accel(acc)
    yaw = yaw_from_mag(mag, roll, pitch)
    assert np.allclose(np.column_stack([roll, pitch, yaw]), rpy, atol=1e-9)


@pytest.mark.parametrize(
    "name, yaw, heading",
    [("east", 0.0, 90.0), ("north", math.pi / 2, 0.0), ("west", math.pi, 270.0), ("south", -math.pi / 2, 180.0),
     ("north_east", math.pi / 4, 45.0)],
)
def test_compass_heading_is_ninety_minus_yaw(name, yaw, heading):
    assert compass_heading_deg(yaw) == pytest.approx(heading)


# --- complementary filter --------------------------------------------------------------------


def _wrap(a):
    return np.angle(np.exp(1j * np.asarray(a)))


def test_filter_first_update_initialises_from_accel_and_mag():
    r = rotation_zyx(0.3, -0.2, 2.5)
    f = AttitudeFilter()
    rpy = f.update(0.01, r.T @ [0, 0, G], [0, 0, 0], r.T @ world_field())
    assert rpy == pytest.approx((0.3, -0.2, 2.5), abs=1e-9)


def test_filter_converges_from_a_wrong_start_to_the_true_attitude():
    truth = rotation_zyx(-0.4, 0.25, -2.0)
    f = AttitudeFilter()
    f.update(0.01, [0, 0, G], [0, 0, 0], world_field())  # starts level, facing east
    for _ in range(2000):
        rpy = f.update(0.01, truth.T @ [0, 0, G], [0, 0, 0], truth.T @ world_field())
    assert _wrap(np.subtract(rpy, (-0.4, 0.25, -2.0))) == pytest.approx([0, 0, 0], abs=1e-3)


def test_filter_mag_error_corrects_yaw_only_and_never_tilts():
    level = np.eye(3)
    f = AttitudeFilter(k_acc=0.0)
    f.update(0.01, [0, 0, G], [0, 0, 0], None)  # yaw 0 without a magnetometer
    truth_yaw = 1.0
    mag = rotation_zyx(0, 0, truth_yaw).T @ world_field()
    for _ in range(500):
        roll, pitch, yaw = f.update(0.01, level @ [0, 0, G], [0, 0, 0], mag)
    assert yaw == pytest.approx(truth_yaw, abs=0.01)
    assert abs(roll) < 1e-9 and abs(pitch) < 1e-9


def test_filter_tracks_a_tumbling_body_through_the_virtual_imu_with_noise_and_gyro_bias():
    rng = np.random.default_rng(11)
    dt = 0.01
    imu = VirtualImu(noise=ImuNoise(acc_sigma=0.05, gyro_sigma=0.005, gyro_bias=(0.02, -0.01, 0.015)), rng=rng)
    magnetometer = Magnetometer(noise_sigma_t=0.3e-6)
    f = AttitudeFilter()
    errors = []
    for k in range(3000):
        t = k * dt
        rpy_true = (0.4 * math.sin(0.5 * t), 0.3 * math.sin(0.7 * t + 1.0), 0.8 * t)
        r = rotation_zyx(*rpy_true)
        acc, gyro = imu.update(t, [0, 0, 0], r)
        est = f.update(dt, acc, gyro, magnetometer.read(r, rng))
        if t > 10.0:
            # Compare rotations, not angles: the angle gap between estimate and truth.
            gap = rotvec_from_rotation(rotation_zyx(*rpy_true).T @ rotation_zyx(*est))
            errors.append(np.linalg.norm(gap))
    assert np.degrees(np.mean(errors)) < 0.5
    assert np.degrees(np.max(errors)) < 1.0
    assert f.gyro_bias == pytest.approx([0.02, -0.01, 0.015], abs=0.003)


def test_filter_ignores_the_accelerometer_during_strong_linear_acceleration():
    f = AttitudeFilter(k_mag=0.0)
    f.update(0.01, [0, 0, G], [0, 0, 0])
    for _ in range(200):
        roll, pitch, _ = f.update(0.01, [8.0, 0.0, G], [0, 0, 0])  # hard braking-like 0.8 g forward
    assert abs(pitch) < 1e-9 and abs(roll) < 1e-9


def test_filter_reset_reinitialises_on_the_next_update():
    f = AttitudeFilter()
    f.update(0.01, [0, 0, G], [0, 0, 0])
    f.reset()
    r = rotation_zyx(0.1, 0.2, 0.0)
    assert f.update(0.01, r.T @ [0, 0, G], [0, 0, 0]) == pytest.approx((0.1, 0.2, 0.0), abs=1e-9)


@pytest.mark.parametrize("name, dt", [("zero", 0.0), ("negative", -0.01), ("nan", math.nan)])
def test_fail__filter_update_rejects_a_non_positive_step(name, dt):
    f = AttitudeFilter()
    f.update(0.01, [0, 0, G], [0, 0, 0])
    with pytest.raises(ValueError):
        f.update(dt, [0, 0, G], [0, 0, 0])


@pytest.mark.parametrize(
    "name, kwargs", [("negative_gain", dict(k_acc=-1.0)), ("zero_gravity", dict(gravity=0.0)), ("zero_gate", dict(acc_gate=0.0))]
)
def test_fail__filter_constructor_rejects(name, kwargs):
    with pytest.raises(ValueError):
        AttitudeFilter(**kwargs)
