"""Estimation benchmarks: cost per call and positioning accuracy beside seeds/002.

Plain script, prints figures, asserts nothing about time::

    .venv/bin/python bench/bench_estimation.py [--quick]

Scenario for the accuracy figures: the paper's 5 m × 8 m field with four UWB
anchors on tripods at 1.20 m, the tag 0.125 m above ground on a rover driving
a stadium loop at 0.4 m/s (x 1.5..3.5 m, y 1..7 m). UWB ranges at 10 Hz with
5 cm noise; wheel odometry at 100 Hz with a 3 % scale error and slip noise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import best_us  # noqa: E402

from robotics.estimation.attitude import AttitudeFilter, rotation_zyx  # noqa: E402
from robotics.estimation.pose import PoseEstimator  # noqa: E402
from robotics.estimation.uwb import trilaterate  # noqa: E402
from robotics.kinematics.diffdrive import integrate_twist  # noqa: E402
from sim.imu import ImuNoise, VirtualImu  # noqa: E402
from sim.magnetometer import Magnetometer  # noqa: E402
from sim.uwb import UwbRanger  # noqa: E402

ANCHORS = np.array([[0.0, 0.0, 1.2], [5.0, 0.0, 1.2], [5.0, 8.0, 1.2], [0.0, 8.0, 1.2]])
TALL_ANCHORS = np.array([[0.0, 0.0, 0.3], [5.0, 0.0, 2.8], [5.0, 8.0, 0.3], [0.0, 8.0, 2.8]])
TAG_Z = 0.125
PAPER_MEAN_CM, PAPER_MAX_CM = 9.08, 23.0


def bench_trilateration(n: int) -> None:
    rng = np.random.default_rng(0)
    uwb = UwbRanger(ANCHORS, sigma_m=0.05)
    tall = UwbRanger(TALL_ANCHORS, sigma_m=0.05)
    pts = np.column_stack([rng.uniform(0.3, 4.7, n), rng.uniform(0.3, 7.7, n), np.full(n, TAG_Z)])
    cases = {
        "coplanar anchors, z free (default)": (ANCHORS, [uwb.ranges(p, rng) for p in pts], {}),
        "coplanar anchors, z_fixed=0.125": (ANCHORS, [uwb.ranges(p, rng) for p in pts], {"z_fixed": TAG_Z}),
        "anchors at 0.3/2.8 m, 3D": (TALL_ANCHORS, [tall.ranges(p, rng) for p in pts], {}),
    }
    print("trilateration (4 anchors, 5 cm range noise)")
    for name, (anchors, ranges, kw) in cases.items():
        t0 = time.perf_counter()
        est = np.array([trilaterate(anchors, r, **kw) for r in ranges])
        rate = n / (time.perf_counter() - t0)
        err_xy = np.linalg.norm(est[:, :2] - pts[:, :2], axis=1) * 100
        print(
            f"  {name:38s} {rate:8.0f} solves/s   xy error mean {err_xy.mean():5.2f} cm, "
            f"p95 {np.percentile(err_xy, 95):5.2f} cm, max {err_xy.max():5.2f} cm"
        )


def bench_costs(n: int) -> None:
    print("cost per call (best of 3)")
    r = rotation_zyx(0.1, -0.05, 1.0)
    acc, gyro, mag = r.T @ [0, 0, 9.80665], np.array([0.01, -0.02, 0.3]), r.T @ [0.0, 25e-6, -43e-6]
    f = AttitudeFilter()
    f.update(0.01, acc, gyro, mag)
    print(f"  AttitudeFilter.update (acc+gyro+mag)   {best_us(lambda: f.update(0.001, acc, gyro, mag), n):7.1f} µs")
    print(f"  AttitudeFilter.update (acc+gyro)       {best_us(lambda: f.update(0.001, acc, gyro), n):7.1f} µs")
    est = PoseEstimator()
    print(f"  PoseEstimator.predict                  {best_us(lambda: est.predict(0.001, 0.3, 0.1), n):7.1f} µs")
    print(f"  PoseEstimator.predict(yaw=...)         {best_us(lambda: est.predict(0.001, 0.3, 0.1, yaw=0.2), n):7.1f} µs")
    fix = np.array(est.pose[:2])
    print(f"  PoseEstimator.update_uwb               {best_us(lambda: est.update_uwb(fix), n):7.1f} µs")
    ranges = np.linalg.norm(ANCHORS - [2.0, 3.0, TAG_Z], axis=1)
    print(f"  trilaterate (exact ranges)             {best_us(lambda: trilaterate(ANCHORS, ranges), n // 10):7.1f} µs")
    imu = VirtualImu()
    clock = [0.0]

    def imu_step():
        clock[0] += 0.001
        imu.update(clock[0], [clock[0], 0.0, 0.0], r)

    print(f"  VirtualImu.update                      {best_us(imu_step, n):7.1f} µs")


def stadium_twist(t: float, speed: float = 0.4, straight_m: float = 4.0, radius_m: float = 1.0):
    t_straight, t_turn = straight_m / speed, math.pi * radius_m / speed
    phase = t % (2 * (t_straight + t_turn))
    turning = t_straight <= phase < t_straight + t_turn or phase >= 2 * t_straight + t_turn
    return speed, (speed / radius_m if turning else 0.0)


def bench_rover_run(duration_s: float, seed: int, nlos_probability: float) -> None:
    rng = np.random.default_rng(seed)
    uwb = UwbRanger(ANCHORS, sigma_m=0.05, nlos_probability=nlos_probability, nlos_bias_m=0.5)
    imu = VirtualImu(noise=ImuNoise(acc_sigma=0.05, gyro_sigma=0.003, gyro_bias=(0.0, 0.0, 0.01)), rng=rng)
    magnetometer = Magnetometer(noise_sigma_t=0.3e-6)
    att = AttitudeFilter()
    est_odom = PoseEstimator()  # odometry + UWB
    est_imu = PoseEstimator()  # odometry + UWB + attitude-filter yaw
    dt = 0.01
    x, y, yaw = 3.5, 2.0, math.pi / 2
    err_raw, err_fused, err_fused_yaw, yaw_err = [], [], [], []
    for k in range(int(duration_s / dt)):
        t = k * dt
        v, w = stadium_twist(t)
        x, y, yaw = integrate_twist(x, y, yaw, v, w, dt)
        r = rotation_zyx(0.0, 0.0, yaw)
        acc, gyro = imu.update(t, [x, y, 0.0], r)
        roll_e, pitch_e, yaw_e = att.update(dt, acc, gyro, magnetometer.read(r, rng))
        v_odom = v * 1.03 + 0.02 * rng.standard_normal()
        w_odom = w + 0.05 * rng.standard_normal()
        est_odom.predict(dt, v_odom, w_odom)
        est_imu.predict(dt, v_odom, w_odom, yaw=yaw_e if k > 0 else None)
        if k % 10 == 0:
            ranges = uwb.ranges((x, y, TAG_Z), rng)
            if np.count_nonzero(np.isfinite(ranges)) >= 3:
                fix = trilaterate(ANCHORS, ranges)
                est_odom.update_uwb(fix[:2])
                est_imu.update_uwb(fix[:2])
                if t > 5.0:
                    err_raw.append(math.hypot(fix[0] - x, fix[1] - y))
                    err_fused.append(math.hypot(est_odom.pose[0] - x, est_odom.pose[1] - y))
                    err_fused_yaw.append(math.hypot(est_imu.pose[0] - x, est_imu.pose[1] - y))
                    yaw_err.append(abs(math.remainder(yaw_e - yaw, math.tau)))
    print(f"rover stadium loop, {duration_s:.0f} s, UWB 5 cm noise, NLOS {nlos_probability:.0%} (+0.5 m mean), seed {seed}")
    print(f"  {'':34s} {'mean':>8s} {'max':>8s}")
    print(f"  {'paper (seeds/002, real MJR)':34s} {PAPER_MEAN_CM:6.2f}cm {PAPER_MAX_CM:6.2f}cm")
    for name, errs in (
        ("UWB trilateration alone", err_raw),
        ("odometry + UWB (PoseEstimator)", err_fused),
        ("odometry + UWB + IMU/mag yaw", err_fused_yaw),
    ):
        e = np.array(errs) * 100
        print(f"  {name:34s} {e.mean():6.2f}cm {e.max():6.2f}cm")
    print(f"  attitude filter yaw error: mean {math.degrees(np.mean(yaw_err)):.2f}°, max {math.degrees(np.max(yaw_err)):.2f}°")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    n = 2000 if args.quick else 20000
    bench_trilateration(500 if args.quick else 5000)
    print()
    bench_costs(n)
    print()
    bench_rover_run(72.0 if args.quick else 360.0, seed=1, nlos_probability=0.0)
    print()
    bench_rover_run(72.0 if args.quick else 360.0, seed=1, nlos_probability=0.05)


if __name__ == "__main__":
    main()
