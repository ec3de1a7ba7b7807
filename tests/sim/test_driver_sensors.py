"""The sim driver's inertial and UWB sensors: IMU, magnetometer and UWB ranges on the rover's 3D pose."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drivers.sim import SimDriver
from robotics.estimation.attitude import roll_pitch_from_accel, yaw_from_mag

ANCHORS = [[0.0, 0.0, 2.5], [6.0, 0.0, 2.5], [6.0, 4.0, 2.5], [0.0, 4.0, 2.5]]
STEEP = {"center": [0.7, 1.0], "size": [1.0, 1.2], "yaw_deg": 180, "slope_deg": 20}
WORLD = {"size_m": [6.0, 4.0], "ramps": [STEEP]}
IMU = {"acc_sigma_m_s2": 0.05, "gyro_sigma_rad_s": 0.003, "gyro_bias_rad_s": [0.0, 0.0, 0.004]}
MAG = {"hard_iron_ut": [4.0, -2.5, 1.5], "soft_iron": [1.03, 0.97, 1.0], "noise_ut": 0.3}
UWB = {"anchors": ANCHORS, "sigma_m": 0.05}
ACC = [f"imu_acc_{a}_m_s2" for a in "xyz"]
GYRO = [f"imu_gyro_{a}_rad_s" for a in "xyz"]
MAGC = [f"mag_{a}_ut" for a in "xyz"]
RANGES = [f"uwb_range_{i}_m" for i in range(4)]


def make(seed: int = 1, world: dict | None = None, **settings) -> SimDriver:
    d = SimDriver({"rate_hz": 100.0, **settings}, world or WORLD, seed=seed)
    d.open()
    d.activate()
    return d


def vec(values: dict, names: list[str]) -> np.ndarray:
    return np.array([values[n] for n in names])


def test_sensor_channels_and_units_when_their_tables_are_given() -> None:
    d = SimDriver({"imu": {}, "magnetometer": {}, "uwb": {"anchors": ANCHORS}}, WORLD)
    specs = {c.name: c for c in d.channels()}
    assert [specs[n].unit for n in ACC + GYRO + MAGC + RANGES] == ["m/s²"] * 3 + ["rad/s"] * 3 + ["µT"] * 3 + ["m"] * 4
    assert list(specs)[:10] == [c.name for c in SimDriver({}, WORLD).channels()]  # appended after the others


def test_sensors_off_without_their_tables_or_with_enabled_false() -> None:
    plain = {c.name for c in SimDriver({}, WORLD).channels()}
    off = SimDriver({"imu": {"enabled": False}, "magnetometer": {"enabled": False},
                     "uwb": {"enabled": False}}, WORLD)
    assert {c.name for c in off.channels()} == plain
    assert not any(n.startswith(("imu_", "mag_", "uwb_")) for n in plain)


def test_level_and_at_rest_reads_gravity_up_and_no_rate() -> None:
    d = make(imu={}, noise=False)
    for _ in range(5):
        v = d.read(0.01).values
    assert vec(v, ACC) == pytest.approx([0.0, 0.0, 9.80665], abs=1e-9)
    assert vec(v, GYRO) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


def test_gyro_reads_the_turn_rate_in_place() -> None:
    d = make(imu={}, noise=False)
    d.write({"wheel_left": -4.0, "wheel_right": 4.0})
    for _ in range(100):
        frame = d.read(0.01)
    assert frame.values["imu_gyro_z_rad_s"] == pytest.approx(frame.values["angular_rad_s"], rel=1e-3)
    assert frame.values["imu_gyro_z_rad_s"] == pytest.approx(2 * 4.0 * 0.05 / 0.30, rel=1e-3)


def test_on_the_steep_ramp_the_accelerometer_gives_the_true_tilt() -> None:
    d = make(imu={}, noise=False)
    d.debug({"teleport": [0.7, 1.0, math.pi]})  # on the ramp, facing uphill (west)
    for _ in range(5):
        frame = d.read(0.01)
    roll, pitch = roll_pitch_from_accel(vec(frame.values, ACC))
    assert (roll, pitch) == pytest.approx((frame.truth["roll"], frame.truth["pitch"]), abs=1e-9)
    assert frame.truth["pitch"] == pytest.approx(-math.radians(20.0))  # nose up is negative pitch


@pytest.mark.parametrize("yaw", [0.0, 1.0, -2.5, math.pi / 2])
def test_magnetometer_gives_the_yaw_in_microtesla(yaw: float) -> None:
    d = make(imu={}, magnetometer={"field_strength_ut": 48.0}, noise=False, start_pose=[3.0, 2.0, math.degrees(yaw)])
    v = d.read(0.01).values
    m = vec(v, MAGC)
    assert np.linalg.norm(m) == pytest.approx(48.0)
    assert yaw_from_mag(m, 0.0, 0.0) == pytest.approx(math.remainder(yaw, math.tau), abs=1e-9)


def test_magnetometer_iron_distortion_is_kept_without_noise() -> None:
    d = make(magnetometer=MAG, noise=False)
    v = d.read(0.01).values
    b = 50.0 * np.array([0.0, math.cos(math.radians(60.0)), -math.sin(math.radians(60.0))])  # facing east
    assert vec(v, MAGC) == pytest.approx(np.array([1.03, 0.97, 1.0]) * b + [4.0, -2.5, 1.5])


def test_uwb_ranges_are_held_between_measurements_at_their_rate() -> None:
    d = make(uwb={**UWB, "rate_hz": 10.0})
    sets = [tuple(vec(d.read(0.01).values, RANGES)) for _ in range(100)]  # 1 s at 100 Hz
    assert 10 <= len(set(sets)) <= 11
    assert all(sets[i] == sets[i - 1] for i in range(1, 9))  # held until the next measurement, 0.1 s on


def test_uwb_ranges_follow_the_distortion_and_truth_has_the_true_distances() -> None:
    d = make(uwb={**UWB, "distortion": [0.1, 1.02, 0.005]}, noise=False)
    frame = d.read(0.01)
    true = np.array(frame.truth["uwb_true_m"])
    tag = np.array([3.0, 2.0, 0.15])
    assert true == pytest.approx(np.linalg.norm(np.array(ANCHORS) - tag, axis=1))
    assert vec(frame.values, RANGES) == pytest.approx(0.1 + 1.02 * true + 0.005 * true**2)


def test_uwb_tag_height_comes_from_the_settings() -> None:
    d = make(uwb={**UWB, "tag_height_m": 0.5}, noise=False)
    true = np.array(d.read(0.01).truth["uwb_true_m"])
    assert true == pytest.approx(np.linalg.norm(np.array(ANCHORS) - [3.0, 2.0, 0.5], axis=1))


def test_uwb_dropouts_are_reported_as_nan() -> None:
    d = make(uwb={**UWB, "dropout_probability": 1.0})
    v = d.read(0.01).values
    assert all(isinstance(v[n], float) and math.isnan(v[n]) for n in RANGES)


def test_uwb_noise_is_about_sigma() -> None:
    d = make(uwb={**UWB, "sigma_m": 0.05, "rate_hz": 100.0})
    err = []
    for _ in range(300):
        frame = d.read(0.01)
        err.extend(vec(frame.values, RANGES) - np.array(frame.truth["uwb_true_m"]))
    assert np.std(err) == pytest.approx(0.05, rel=0.15)
    assert abs(np.mean(err)) < 0.01


def test_noise_false_turns_the_random_errors_off() -> None:
    d = make(imu=IMU, magnetometer=MAG, uwb={**UWB, "nlos_probability": 0.5, "dropout_probability": 0.5},
             noise=False)
    frame = d.read(0.01)
    assert vec(frame.values, GYRO) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)  # no bias either
    assert vec(frame.values, RANGES) == pytest.approx(frame.truth["uwb_true_m"])


def test_seeded_runs_are_identical_and_streams_are_independent() -> None:
    def run(**settings) -> list[np.ndarray]:
        d = make(seed=7, **settings)
        d.write({"wheel_left": 3.0, "wheel_right": 5.0})
        return [vec(d.read(0.01).values, ACC + GYRO) for _ in range(50)]

    a = run(imu=IMU)
    assert all(np.array_equal(x, y) for x, y in zip(a, run(imu=IMU)))
    # adding the magnetometer and UWB draws from their own generators: the IMU's samples do not change
    assert all(np.array_equal(x, y) for x, y in zip(a, run(imu=IMU, magnetometer=MAG, uwb=UWB)))
    assert not all(np.array_equal(x, y) for x, y in zip(a, [vec(v, ACC + GYRO) for v in
                                                             [make(seed=8, imu=IMU).read(0.01).values]]))


def test_reopen_replays_the_same_sensor_streams() -> None:
    d = make(imu=IMU, magnetometer=MAG, uwb=UWB)
    first = [dict(d.read(0.01).values) for _ in range(20)]
    d.close()
    d.open()
    d.activate()
    assert [dict(d.read(0.01).values) for _ in range(20)] == first


def test_sampling_at_a_lower_acquisition_rate_measures_the_mean_rate_between_samples() -> None:
    d = make(imu={}, noise=False, rate_hz=10.0)
    d.write({"wheel_left": -4.0, "wheel_right": 4.0})
    for _ in range(100):
        frame = d.read(0.01)
    assert frame.values["imu_gyro_z_rad_s"] == pytest.approx(frame.values["angular_rad_s"], rel=1e-3)


def test_inactive_sensor_channels_are_omitted() -> None:
    d = make(imu=IMU, magnetometer=MAG, uwb=UWB)
    d.set_acquisition(100.0, ACC + RANGES[:1])
    assert set(d.read(0.01).values) == set(ACC + RANGES[:1])


@pytest.mark.parametrize("settings", [
    {"imu": {"acc_sigma": 0.1}},                      # unknown key (the unit suffix is part of the name)
    {"imu": {"gyro_bias_rad_s": [0.0, 0.1]}},
    {"imu": {"acc_sigma_m_s2": -1.0}},
    {"imu": "yes"},
    {"magnetometer": {"soft_iron": [1.0, 1.0]}},
    {"magnetometer": {"noise_ut": "low"}},
    {"magnetometer": {"enabled": "no"}},
    {"uwb": {"sigma_m": 0.05}},                        # no anchors
    {"uwb": {"anchors": [[0, 0, 2.5], [6, 0, 2.5]]}},  # too few
    {"uwb": {"anchors": ANCHORS, "rate_hz": 0}},
    {"uwb": {"anchors": ANCHORS, "distortion": [1.0, 0.0]}},
    {"uwb": {"anchors": ANCHORS, "dropout_probability": 1.5}},
    {"uwb": {"anchors": ANCHORS, "nlos": 0.1}},
])
def test_fail__bad_sensor_settings(settings: dict) -> None:
    with pytest.raises(ValueError):
        SimDriver(settings, WORLD)


# ---------------------------------------------------------------- the field's disturbances (issue 23)
STEEL = {"position": [3.5, 2.0, -0.05], "moment_am2": [0.5, 2.0, -3.0]}


def mag_reading(world: dict | None = None, pose=(3.0, 2.0, 0.0), steps: int = 3, **mag) -> np.ndarray:
    d = make(world=world or {"size_m": [6.0, 4.0]}, magnetometer={"noise_ut": 0.0, **mag}, start_pose=[*pose[:2],
                                                                                                       pose[2]])
    for _ in range(steps):
        v = d.read(0.01).values
    return vec(v, MAGC)


def test_a_steel_object_adds_its_dipole_field_at_the_sensor_in_body_axes() -> None:
    from sim.magnetic import SteelObject

    clean = mag_reading()
    bent = mag_reading(world={"size_m": [6.0, 4.0], "steel": [STEEL]})
    expected = SteelObject(3.5, 2.0, -0.05, (0.5, 2.0, -3.0)).field_t([3.0, 2.0, 0.0]) * 1e6  # facing east: body = world
    assert bent - clean == pytest.approx(expected, abs=1e-9)
    assert np.linalg.norm(expected) > 2.0  # half a metre from it: a few µT


def test_the_sensor_lever_arm_is_where_the_field_is_felt() -> None:
    world = {"size_m": [6.0, 4.0], "steel": [STEEL]}
    centre, ahead = mag_reading(world=world), mag_reading(world=world, lever_arm_m=[0.2, 0.0, 0.0])
    assert np.linalg.norm(ahead - centre) > 1.0  # 20 cm nearer the steel
    assert mag_reading(lever_arm_m=[0.2, 0.0, 0.0]) == pytest.approx(mag_reading())  # no steel: the arm is moot


def test_hard_iron_drifts_with_the_motor_current_and_heats_up() -> None:
    drift = {"drift_ut_per_a": [[1.0, 0, 0], [1.0, 0, 0]], "drift_ut_per_k": [0, 0.5, 0], "heating_k_per_a2": 50.0,
             "thermal_tau_s": 10.0}
    plain = make(world={"size_m": [6.0, 4.0]}, magnetometer={"noise_ut": 0.0})
    drifting = make(world={"size_m": [6.0, 4.0]}, magnetometer={"noise_ut": 0.0, **drift})
    for command, ticks in (({"wheel_left": -5.0, "wheel_right": 5.0}, 300), ({"wheel_left": 0.0, "wheel_right": 0.0},
                                                                             200)):
        for d in (plain, drifting):
            d.write(command)
        for _ in range(ticks):
            a, b = plain.read(0.01), drifting.read(0.01)
        if command["wheel_left"]:  # turning: the leads' field and a warming body
            assert b.truth["mag_drift_ut"] > 0.5 and b.truth["mag_temperature_rise_k"] > 0.5
    # stopped: the leads carry the motors' idle current only (x, 1 µT/A); the warm parts still offset the reading
    # along body y, exactly by the temperature's coefficient
    rise = b.truth["mag_temperature_rise_k"]
    offset = vec(b.values, MAGC) - vec(a.values, MAGC)
    assert rise > 0.5 and b.truth["mag_steel_ut"] == 0.0
    assert offset[1:] == pytest.approx([0.5 * rise, 0.0], abs=1e-6) and 0.0 <= offset[0] <= 0.2


def test_uwb_nlos_through_a_box_lengthens_the_blocked_range_and_truth_says_so() -> None:
    box = {"center": [4.5, 3.2], "size": [0.6, 0.4], "height_m": 3.0}  # between the tag and anchor 2 (6, 4)
    world = {"size_m": [6.0, 4.0], "boxes": [box]}
    uwb = {"anchors": ANCHORS, "nlos_excess_per_m": 0.5, "sigma_m": 0.0}  # no noise, no random NLOS, no dropouts
    clear = make(world={"size_m": [6.0, 4.0]}, uwb=uwb, start_pose=[3.0, 2.5, 0.0]).read(0.01)
    blocked = make(world=world, uwb=uwb, start_pose=[3.0, 2.5, 0.0])
    frame = blocked.read(0.01)
    crossed = frame.truth["uwb_blocked_m"]
    assert crossed[2] > 0.3 and crossed[0] == crossed[1] == crossed[3] == 0.0
    extra = vec(frame.values, RANGES) - vec(clear.values, RANGES)
    assert extra == pytest.approx([0.0, 0.0, 0.5 * crossed[2], 0.0], abs=1e-9)


def test_without_the_new_keys_every_reading_is_what_it_was() -> None:
    # the field's models switched off explicitly give exactly the default driver's samples (streams unchanged)
    base = dict(imu=IMU, magnetometer=MAG, uwb=UWB)
    off = dict(imu=IMU, magnetometer={**MAG, "lever_arm_m": [0.0, 0.0, 0.0], "drift_ut_per_k": [0.0, 0.0, 0.0]},
               uwb={**UWB, "multipath_m": 0.0, "outlier_probability": 0.0, "nlos_sigma_m": 0.0})
    a, b = make(seed=5, **base), make(seed=5, **off)
    for d in (a, b):
        d.write({"wheel_left": 6.0, "wheel_right": 4.0})
    for _ in range(200):
        fa, fb = a.read(0.01), b.read(0.01)
        assert fa.values == fb.values or all(
            (x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(fa.values.values(), fb.values.values()))


def test_noise_false_turns_the_uwb_field_terms_off_but_keeps_the_steel() -> None:
    world = {"size_m": [6.0, 4.0], "steel": [STEEL]}
    d = make(world=world, noise=False, uwb={**UWB, "multipath_m": 0.1, "outlier_probability": 0.5, "outlier_m": 1.0,
                                            "noise_dof": 3.0}, magnetometer={})
    frame = d.read(0.01)
    assert vec(frame.values, RANGES) == pytest.approx(frame.truth["uwb_true_m"], abs=1e-12)
    assert frame.truth["mag_steel_ut"] > 1.0
