"""Pose estimator: odometry dead reckoning, UWB fusion, gating and yaw observability."""

import math

import numpy as np
import pytest

from robotics.estimation.pose import PoseEstimator
from robotics.estimation.uwb import trilaterate
from robotics.kinematics.diffdrive import integrate_twist
from sim.uwb import UwbRanger

ANCHORS = np.array([[0.0, 0.0, 1.2], [5.0, 0.0, 1.2], [5.0, 8.0, 1.2], [0.0, 8.0, 1.2]])
TAG_Z = 0.125


def test_dead_reckoning_follows_a_circle_exactly_without_fixes():
    est = PoseEstimator(1.0, 1.0, 0.0)
    for _ in range(1000):  # 10 s, one full turn
        est.predict(0.01, 0.3, 2 * math.pi / 10.0)
    assert est.pose == pytest.approx((1.0, 1.0, 0.0), abs=1e-9)


def test_uncertainty_grows_while_driving_and_shrinks_with_a_fix():
    est = PoseEstimator(initial_position_sigma_m=0.01)
    before = est.position_sigma_m
    for _ in range(500):
        est.predict(0.01, 0.5, 0.0)
    driven = est.position_sigma_m
    est.update_uwb(est.pose[:2])
    assert before < driven
    assert est.position_sigma_m < driven
    assert est.position_sigma_m < est.uwb_sigma_m


def test_first_fix_takes_over_an_unknown_start():
    est = PoseEstimator()  # 10 m initial sigma
    assert est.update_uwb((3.0, 4.0))
    assert est.pose[:2] == pytest.approx((3.0, 4.0), abs=0.001)


def test_fix_far_from_a_confident_estimate_is_gated_out():
    est = PoseEstimator(2.0, 2.0, 0.0, initial_position_sigma_m=0.05)
    assert not est.update_uwb((3.5, 2.0))  # 1.5 m NLOS jump
    assert est.pose[:2] == (2.0, 2.0)
    assert est.rejections == 1


def test_repeated_consistent_far_fixes_are_accepted_after_max_rejections_to_recover_from_a_kidnap():
    est = PoseEstimator(2.0, 2.0, 0.0, initial_position_sigma_m=0.05, max_rejections=3)
    accepted = [est.update_uwb((4.0, 6.0)) for _ in range(5)]
    assert accepted == [False, False, False, True, True]
    assert est.pose[:2] == pytest.approx((4.0, 6.0), abs=0.01)


def test_nan_fix_is_ignored_without_counting_as_a_rejection():
    est = PoseEstimator(1.0, 1.0)
    assert not est.update_uwb((math.nan, 2.0))
    assert est.rejections == 0 and est.pose[:2] == (1.0, 1.0)


def test_yaw_becomes_observable_from_fixes_while_driving():
    rng = np.random.default_rng(1)
    true_yaw = 0.8
    est = PoseEstimator(1.0, 1.0, 0.0, initial_position_sigma_m=0.1, initial_yaw_sigma_rad=1.0)
    x, y, yaw = 1.0, 1.0, true_yaw
    for k in range(1000):
        x, y, yaw = integrate_twist(x, y, yaw, 0.4, 0.0, 0.01)
        est.predict(0.01, 0.4, 0.0)
        if k % 10 == 0:
            est.update_uwb((x + 0.05 * rng.standard_normal(), y + 0.05 * rng.standard_normal()), sigma_m=0.05)
    assert est.pose[2] == pytest.approx(true_yaw, abs=0.05)


def test_predict_with_yaw_fuses_an_absolute_heading():
    est = PoseEstimator(yaw=0.0, initial_yaw_sigma_rad=1.0)
    for _ in range(50):
        est.predict(0.01, 0.0, 0.0, yaw=1.2)
    assert est.pose[2] == pytest.approx(1.2, abs=1e-3)


def test_yaw_update_wraps_across_pi():
    est = PoseEstimator(yaw=math.pi - 0.05, initial_yaw_sigma_rad=1.0)
    est.update_yaw(-math.pi + 0.05, sigma_rad=1e-4)
    assert abs(math.remainder(est.pose[2] - (-math.pi + 0.05), math.tau)) < 1e-3


def test_covariance_stays_symmetric_positive_definite():
    rng = np.random.default_rng(2)
    est = PoseEstimator()
    for k in range(2000):
        est.predict(0.01, 0.5, 0.3 * math.sin(0.01 * k))
        if k % 10 == 0:
            est.update_uwb(est.pose[:2] + 0.05 * rng.standard_normal(2))
        if k % 7 == 0:
            est.update_yaw(est.pose[2] + 0.02 * rng.standard_normal())
    p = est.covariance
    assert np.allclose(p, p.T, atol=1e-15)
    assert np.all(np.linalg.eigvalsh(p) > 0.0)


def stadium_twist(t, speed=0.4, straight_m=4.0, radius_m=1.0):
    """Body twist driving a stadium loop: straight, half turn left, straight, half turn left."""
    t_straight, t_turn = straight_m / speed, math.pi * radius_m / speed
    phase = t % (2 * (t_straight + t_turn))
    turning = t_straight <= phase < t_straight + t_turn or phase >= 2 * t_straight + t_turn
    return speed, (speed / radius_m if turning else 0.0)


def test_fusing_odometry_with_uwb_beats_uwb_alone_on_a_driven_loop():
    rng = np.random.default_rng(42)
    uwb = UwbRanger(ANCHORS, sigma_m=0.05, nlos_probability=0.02, nlos_bias_m=0.5)
    dt = 0.01
    x, y, yaw = 3.5, 2.0, math.pi / 2  # stadium inside the 5 m × 8 m field, x 1.5..3.5, y 1..7
    est = PoseEstimator()
    fused, raw = [], []
    for k in range(7200):  # two laps, UWB at 10 Hz
        t = k * dt
        v, w = stadium_twist(t)
        x, y, yaw = integrate_twist(x, y, yaw, v, w, dt)
        assert 1.0 < x < 4.0 and 0.5 < y < 7.5
        # Odometry with 3 % scale error and wheel-slip noise on the turn rate.
        est.predict(dt, v * 1.03 + 0.02 * rng.standard_normal(), w + 0.05 * rng.standard_normal())
        if k % 10 == 0:
            fix = trilaterate(ANCHORS, uwb.ranges((x, y, TAG_Z), rng), z_fixed=TAG_Z)
            est.update_uwb(fix[:2])
            if t > 5.0:
                raw.append(math.hypot(fix[0] - x, fix[1] - y))
                fused.append(math.hypot(est.pose[0] - x, est.pose[1] - y))
    assert np.mean(fused) < 0.5 * np.mean(raw)
    assert np.mean(fused) < 0.04
    assert np.max(fused) < 0.23


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("zero_uwb_sigma", dict(uwb_sigma_m=0.0)),
        ("negative_initial_sigma", dict(initial_position_sigma_m=-1.0)),
        ("zero_gate", dict(gate_chi2=0.0)),
    ],
)
def test_fail__constructor_rejects(name, kwargs):
    with pytest.raises(ValueError):
        PoseEstimator(**kwargs)


def test_fail__predict_rejects_a_negative_step():
    with pytest.raises(ValueError):
        PoseEstimator().predict(-0.01, 0.1, 0.0)
