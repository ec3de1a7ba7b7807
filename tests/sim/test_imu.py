"""Virtual IMU against the analytic checks of seeds/000 (noise-free error <= 1e-4), and its error model."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.estimation.attitude import rotation_from_rotvec, rotation_zyx
from sim.imu import ImuNoise, VirtualImu

G = 9.80665
TOL = 1e-4


def rz(angle):
    return rotation_zyx(0.0, 0.0, angle)


# --- paper check 1: static body tilted 45° about x -------------------------------------------


def test_static_body_tilted_45_degrees_about_x_reads_0_707_g_on_y_and_z():
    imu = VirtualImu(gravity=G)
    r = rotation_zyx(math.radians(45.0), 0.0, 0.0)
    for k in range(5):
        acc, gyro = imu.update(0.01 * k, [1.0, 2.0, 0.3], r)
    assert acc[0] == pytest.approx(0.0, abs=TOL)
    assert acc[1] / G == pytest.approx(math.sqrt(0.5), abs=TOL)
    assert acc[2] / G == pytest.approx(math.sqrt(0.5), abs=TOL)
    assert round(acc[1] / G, 3) == round(acc[2] / G, 3) == 0.707
    assert np.allclose(gyro, 0.0, atol=TOL)


@pytest.mark.parametrize(
    "name, roll, pitch, expected_over_g",
    [
        ("level", 0.0, 0.0, (0.0, 0.0, 1.0)),
        ("right_side_down_90", math.pi / 2, 0.0, (0.0, 1.0, 0.0)),
        ("nose_down_90", 0.0, math.pi / 2, (-1.0, 0.0, 0.0)),
        ("upside_down", math.pi, 0.0, (0.0, 0.0, -1.0)),
    ],
)
def test_static_orientations_share_gravity_between_the_axes(name, roll, pitch, expected_over_g):
    imu = VirtualImu(gravity=G)
    r = rotation_zyx(roll, pitch, 0.7)
    for k in range(3):
        acc, _ = imu.update(0.01 * k, [0.0, 0.0, 0.0], r)
    assert np.allclose(acc / G, expected_over_g, atol=TOL)


# --- paper check 2: 5 kg body pushed up by 54.05 N, then free fall ---------------------------


def test_body_pushed_up_reads_1_1_g_then_zero_in_free_fall():
    mass, force, dt = 5.0, 54.05, 0.01
    imu = VirtualImu(gravity=G)
    z, vz = 0.0, 0.0
    readings = {}
    for k in range(751):
        t = k * dt
        acc, gyro = imu.update(t, [0.0, 0.0, z], np.eye(3))
        readings[round(t, 2)] = (acc, gyro)
        # Exact integration of a piecewise-constant acceleration over the next step.
        if t < 2.5 - 1e-9:
            az = 0.0  # resting on the ground
        elif t < 5.0 - 1e-9:
            az = force / mass - G
        else:
            az = -G
        z += vz * dt + 0.5 * az * dt * dt
        vz += az * dt

    at_rest, _ = readings[1.0]
    pushed, _ = readings[4.0]
    falling, gyro = readings[6.0]
    assert at_rest == pytest.approx([0.0, 0.0, G], abs=TOL)
    assert pushed == pytest.approx([0.0, 0.0, force / mass], abs=TOL)
    assert pushed[2] / G == pytest.approx(1.1, abs=0.005)
    assert falling == pytest.approx([0.0, 0.0, 0.0], abs=TOL)
    assert gyro == pytest.approx([0.0, 0.0, 0.0], abs=TOL)


# --- paper check 3: sensor 0.75 m from the axis, body spinning at pi/4 rad/s ----------------


@pytest.mark.parametrize("dt", [0.001, 0.01, 0.05])
def test_sensor_off_the_spin_axis_reads_centripetal_acceleration_and_the_spin_rate(dt):
    omega, radius = math.pi / 4, 0.75
    imu = VirtualImu(gravity=G, lever_arm_m=(radius, 0.0, 0.0))
    for k in range(int(3.0 / dt)):
        acc, gyro = imu.update(k * dt, [0.5, -0.2, 0.0], rz(omega * k * dt))
    assert acc[0] == pytest.approx(-radius * omega**2, abs=TOL)  # towards the axis
    assert round(-acc[0], 4) == 0.4626
    assert acc[1] == pytest.approx(0.0, abs=TOL)
    assert acc[2] == pytest.approx(G, abs=TOL)
    assert gyro == pytest.approx([0.0, 0.0, omega], abs=TOL)


def test_sensor_mounted_rotated_reports_in_its_own_axes():
    # Sensor turned 90° about body z: its x is the body's y (left), so the centripetal pull shows on sensor y.
    omega, radius = math.pi / 4, 0.75
    imu = VirtualImu(gravity=G, lever_arm_m=(radius, 0.0, 0.0), R_body_sensor=rz(math.pi / 2))
    for k in range(100):
        acc, gyro = imu.update(k * 0.01, [0.0, 0.0, 0.0], rz(omega * k * 0.01))
    assert acc == pytest.approx([0.0, radius * omega**2, G], abs=TOL)
    assert gyro == pytest.approx([0.0, 0.0, omega], abs=TOL)


# --- paper check 4: spin-up under constant torque reaches omega at t = I·omega/M -------------


@pytest.mark.parametrize(
    "torque_nm, omega_deg_s, mass_kg",
    [(5.0, 45.0, 10.0), (5.0, 45.0, 5.0), (5.0, 30.0, 5.0), (15.0, 90.0, 5.0), (15.0, 30.0, 20.0)],
)
def test_spin_up_under_constant_torque_reaches_omega_at_i_omega_over_m(torque_nm, omega_deg_s, mass_kg):
    inertia = 0.265 * mass_kg  # the 1.5 m × 0.05 m × 0.05 m bar of seeds/000, table 1
    target = math.radians(omega_deg_s)
    dt = 1e-3
    imu = VirtualImu(gravity=G, lever_arm_m=(0.75, 0.0, 0.0))
    angle, rate = 0.0, 0.0
    times, rates = [], []
    t_reached = None
    for k in range(1, 3000):
        t = k * dt
        # Rigid body about z, semi-implicit Euler: torque until the target rate, then coast.
        if rate < target:
            rate = min(target, rate + torque_nm / inertia * dt)
        angle += rate * dt
        _, gyro = imu.update(t, [0.0, 0.0, 0.0], rz(angle))
        if k > 1:
            assert gyro[2] == pytest.approx(rate, abs=1e-9)
        assert abs(gyro[0]) < TOL and abs(gyro[1]) < TOL
        if k > 1 and gyro[2] < target - 1e-9:
            times.append(t)
            rates.append(gyro[2])
        if t_reached is None and gyro[2] >= target - 1e-9:
            t_reached = t
    expected = inertia * target / torque_nm
    assert t_reached == pytest.approx(expected, abs=dt)
    # The paper's read-out: a line fitted to the spin-up crosses the target at the analytic time.
    slope, intercept = np.polyfit(times, rates, 1)
    assert slope == pytest.approx(torque_nm / inertia, rel=1e-6)
    assert (target - intercept) / slope == pytest.approx(expected, abs=dt)


# --- general identities ----------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    axis=st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.floats(-1, 1)).filter(lambda a: np.linalg.norm(a) > 0.1),
    rate=st.floats(-6.0, 6.0),
    start=st.tuples(st.floats(-3, 3), st.floats(-1.5, 1.5), st.floats(-3, 3)),
)
def test_gyro_reads_a_constant_body_rate_about_any_axis(axis, rate, start):
    w_body = rate * np.asarray(axis) / np.linalg.norm(axis)
    r0 = rotation_zyx(*start)
    imu = VirtualImu()
    dt = 0.01
    for k in range(4):
        _, gyro = imu.update(k * dt, [0, 0, 0], r0 @ rotation_from_rotvec(w_body * k * dt))
    assert np.allclose(gyro, w_body, atol=1e-9)


def test_constant_velocity_reads_gravity_only():
    imu = VirtualImu()
    r = rotation_zyx(0.0, 0.0, 1.0)
    for k in range(10):
        acc, _ = imu.update(0.02 * k, [0.3 * k, -0.1 * k, 0.05 * k], r)
    assert acc == pytest.approx([0.0, 0.0, G], abs=1e-9)


def test_forward_acceleration_shows_on_body_x_whatever_the_heading():
    imu = VirtualImu()
    yaw = 2.0
    heading = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    for k in range(10):
        t = 0.01 * k
        acc, _ = imu.update(t, heading * 0.5 * 2.0 * t * t, rotation_zyx(0.0, 0.0, yaw))  # 2 m/s² forward
    assert acc == pytest.approx([2.0, 0.0, G], abs=1e-6)


def test_first_update_reads_a_body_at_rest_and_second_zero_acceleration():
    imu = VirtualImu()
    r = rotation_zyx(0.0, 0.0, 0.0)
    acc0, gyro0 = imu.update(0.0, [0, 0, 0], r)
    acc1, gyro1 = imu.update(0.1, [1.0, 0, 0], rz(0.1))  # already moving and turning
    assert acc0 == pytest.approx([0, 0, G]) and gyro0 == pytest.approx([0, 0, 0])
    assert acc1 == pytest.approx([0, 0, G])
    assert gyro1 == pytest.approx([0, 0, 1.0])


def test_uneven_time_steps_still_give_the_exact_acceleration_of_a_parabola():
    imu = VirtualImu()
    for t in [0.0, 0.01, 0.025, 0.03, 0.05, 0.08]:
        acc, _ = imu.update(t, [0.0, 1.5 * t * t, 0.0], np.eye(3))  # 3 m/s² north
    assert acc == pytest.approx([0.0, 3.0, G], abs=1e-9)


@pytest.mark.parametrize("name, t", [("same_time", 0.0), ("going_back", -0.1)])
def test_fail__time_must_increase(name, t):
    imu = VirtualImu()
    imu.update(0.0, [0, 0, 0], np.eye(3))
    with pytest.raises(ValueError):
        imu.update(t, [0, 0, 0], np.eye(3))


def test_reset_forgets_the_history():
    imu = VirtualImu()
    imu.update(0.0, [0, 0, 0], np.eye(3))
    imu.update(0.1, [5, 0, 0], np.eye(3))
    imu.reset()
    acc, gyro = imu.update(0.0, [0, 0, 0], rz(1.0))
    assert acc == pytest.approx([0, 0, G]) and gyro == pytest.approx([0, 0, 0])


# --- error model --------------------------------------------------------------------------------


def test_noise_is_off_by_default_and_true_values_match_the_output():
    imu = VirtualImu()
    for k in range(3):
        acc, gyro = imu.update(0.01 * k, [0, 0, 0], rz(0.3 * k))
    assert np.array_equal(acc, imu.true_acc) and np.array_equal(gyro, imu.true_gyro)


def test_noise_model_adds_bias_scale_and_white_noise_with_the_right_statistics():
    noise = ImuNoise(acc_sigma=0.05, gyro_sigma=0.01, acc_bias=(0.1, -0.2, 0.0), gyro_bias=0.02, acc_scale=(1.0, 1.0, 1.01))
    imu = VirtualImu(noise=noise, rng=np.random.default_rng(7))
    accs, gyros = [], []
    for k in range(4000):
        acc, gyro = imu.update(0.01 * k, [0, 0, 0], np.eye(3))
        accs.append(acc)
        gyros.append(gyro)
    accs, gyros = np.array(accs[2:]), np.array(gyros[2:])
    assert accs.mean(axis=0) == pytest.approx([0.1, -0.2, 1.01 * G], abs=0.005)
    assert accs.std(axis=0) == pytest.approx([0.05] * 3, rel=0.05)
    assert gyros.mean(axis=0) == pytest.approx([0.02] * 3, abs=0.001)
    assert gyros.std(axis=0) == pytest.approx([0.01] * 3, rel=0.05)


def test_same_seed_gives_the_same_readings():
    def run(seed):
        imu = VirtualImu(noise=ImuNoise(acc_sigma=0.1, gyro_bias_walk=0.01), rng=np.random.default_rng(seed))
        return np.array([np.concatenate(imu.update(0.01 * k, [0, 0, 0], rz(0.1 * k))) for k in range(50)])

    assert np.array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


def test_saturation_clips_at_full_scale():
    imu = VirtualImu(noise=ImuNoise(acc_range=2 * G, gyro_range=1.0), rng=np.random.default_rng(0))
    for k in range(5):
        acc, gyro = imu.update(0.01 * k, [0, 0, 0], rz(5.0 * 0.01 * k))  # 5 rad/s spin
    assert gyro[2] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("noise_without_rng", dict(noise=ImuNoise(acc_sigma=0.1))),
        ("negative_gravity", dict(gravity=-1.0)),
    ],
)
def test_fail__constructor_rejects(name, kwargs):
    with pytest.raises(ValueError):
        VirtualImu(**kwargs)


@pytest.mark.parametrize(
    "name, kwargs",
    [("negative_sigma", dict(acc_sigma=-0.1)), ("zero_range", dict(gyro_range=0.0)), ("negative_walk", dict(gyro_bias_walk=-1.0))],
)
def test_fail__noise_model_rejects(name, kwargs):
    with pytest.raises(ValueError):
        ImuNoise(**kwargs)
