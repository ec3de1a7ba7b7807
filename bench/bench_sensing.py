"""Inertial and UWB sensing: cost per tick and accuracy (figures, never assertions).

Run: ``.venv/bin/python bench/bench_sensing.py [--quick]``. Uses the default profile
(config/rover-sim.toml) through the server's own builders, without the HTTP server:

1. the sim driver's ``read()`` with and without the IMU, magnetometer and UWB (the
   control loop must hold 1 kHz: the read is its biggest share);
2. the estimator stage (:class:`server.estimation.EstimationStage`) per tick at 1 kHz,
   ticks with a new UWB measurement (trilateration) apart from the others;
3. position error over a long drive round a 1 m circle over the 5° hump, fused
   (odometry + UWB + IMU/magnetometer yaw) and UWB alone, beside seeds/002's figures;
4. the heading command and the magnetometer calibration run in a loop that ticks like
   the server's (read → estimator → behavior → ramped controller → write), against the
   simulator's true heading.
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

from server.app import build_driver  # noqa: E402
from server.config import DEFAULT_CONFIG, load_config  # noqa: E402
from server.controller import Limits, RoverController  # noqa: E402
from server.estimation import build_estimation  # noqa: E402
from server.navigation import HeadingBehavior, MagCalibrationBehavior  # noqa: E402

PAPER_MEAN_CM, PAPER_MAX_CM = 9.08, 23.0
CLEAN_MAG = {"magnetometer": {"hard_iron_ut": [0.0, 0.0, 0.0], "soft_iron": [1.0, 1.0, 1.0]}}


def setup(overrides: dict):
    cfg = load_config(DEFAULT_CONFIG, overrides=overrides)
    driver = build_driver(cfg)
    driver.open()
    driver.activate()
    stage = build_estimation(cfg, [c.name for c in driver.channels()])
    return cfg, driver, stage


def bench_read(n: int) -> None:
    print("SimDriver.read(0.001), sampling every read (1 kHz acquisition), best of 3")
    base = {"rate_hz": 1000.0}
    off = {"imu": {"enabled": False}, "magnetometer": {"enabled": False}, "uwb": {"enabled": False}}
    cases = {
        "no inertial/UWB sensors": {**off},
        "+ IMU": {**off, "imu": {}},
        "+ IMU + magnetometer": {**off, "imu": {}, "magnetometer": {}},
        "+ IMU + magnetometer + UWB (profile)": {},
    }
    for label, drv in cases.items():
        cfg, driver, _ = setup({"loop": {"rate_hz": 1000}, "driver": {**base, **drv}})
        driver.write({"wheel_left": 5.0, "wheel_right": 4.0})
        print(f"  {label:40s} {best_us(lambda: driver.read(0.001), n):7.1f} µs")


def bench_stage(seconds: float) -> None:
    cfg, driver, stage = setup({"loop": {"rate_hz": 1000}, "driver": {"rate_hz": 1000.0}})
    driver.write({"wheel_left": 5.0, "wheel_right": 4.0})
    plain, uwb, total = [], [], []
    fixes = stage.fixes
    for k in range(round(seconds / 0.001)):
        t0 = time.perf_counter()
        frame = driver.read(0.001)
        t1 = time.perf_counter()
        stage.process(frame.values, 0.001, k * 0.001)
        t2 = time.perf_counter()
        (uwb if stage.fixes != fixes else plain).append(t2 - t1)
        fixes = stage.fixes
        total.append(t2 - t0)

    def fmt(v) -> str:
        a = np.array(v) * 1e6
        return f"median {np.median(a):6.1f}  p99 {np.percentile(a, 99):7.1f}  max {a.max():7.1f} µs  (n={len(a)})"

    values = dict(frame.values)

    def plain_tick() -> None:
        stage.process(dict(values), 0.001, 0.0)

    def uwb_tick() -> None:
        stage._last_ranges = None  # as if the ranges were new: trilaterate and fuse
        stage.process(dict(values), 0.001, 0.0)

    print(f"EstimationStage.process, floor (best of 3 × 2000 calls on one frame): "
          f"{best_us(plain_tick, 2000):.1f} µs per tick, {best_us(uwb_tick, 2000):.1f} µs with a UWB fix")
    print(f"EstimationStage.process at 1 kHz, {seconds:.0f} s driving (UWB at 10 Hz)")
    print(f"  tick without a UWB measurement  {fmt(plain)}")
    print(f"  tick with one (trilateration)   {fmt(uwb)}")
    print(f"  mean per tick                   {np.mean(np.array(plain + uwb)) * 1e6:6.1f} µs")
    print(f"  read + stage per tick           {fmt(total)}")


def circle(seconds: float, uwb: dict, odom_error: float, seed: int = 1) -> dict[str, np.ndarray]:
    r_true = 0.05 * (1.0 + odom_error)
    _, driver, stage = setup({"driver": {"seed": seed, "start_pose": [3.0, 1.0, 0.0], "rover": {"wheel_radius_m": r_true},
                                         **CLEAN_MAG, "uwb": uwb}})
    v, w, track = 0.3, 0.3, 0.30
    driver.write({"wheel_left": (v - 0.5 * w * track) / r_true, "wheel_right": (v + 0.5 * w * track) / r_true})
    fused, alone = [], []
    for k in range(round(seconds / 0.01)):
        frame = driver.read(0.01)
        stage.process(frame.values, 0.01, k * 0.01)
        if k < 500:
            continue
        t, val = frame.truth, frame.values
        fused.append(math.hypot(val["est_x_m"] - t["x"], val["est_y_m"] - t["y"]))
        if math.isfinite(val["uwb_x_m"]):
            alone.append(math.hypot(val["uwb_x_m"] - t["x"], val["uwb_y_m"] - t["y"]))
    return {"fused": np.array(fused) * 100, "uwb": np.array(alone) * 100}


def bench_position(seconds: float) -> None:
    print(f"position error, {seconds:.0f} s round a 1 m circle at 0.3 m/s over the 5° hump (after 5 s)")
    print(f"  {'':52s} {'mean':>7s} {'p95':>7s} {'max':>7s}")
    print(f"  {'paper (seeds/002, real rover)':52s} {PAPER_MEAN_CM:5.2f}cm {'':7s} {PAPER_MAX_CM:5.2f}cm")
    cases = {
        "profile UWB (5 cm, 2 % NLOS, 1 % dropouts), odom +3 %": ({}, 0.03),
        "5 cm noise only, odom exact": ({"nlos_probability": 0.0, "dropout_probability": 0.0}, 0.0),
        "10 % NLOS (+0.3 m mean), odom +3 %": ({"nlos_probability": 0.1}, 0.03),
    }
    for label, (uwb, odom) in cases.items():
        run = circle(seconds, uwb, odom)
        for kind in ("fused", "uwb"):
            e = run[kind]
            name = f"{label} — {'fused' if kind == 'fused' else 'UWB alone'}"
            print(f"  {name:52s} {e.mean():5.2f}cm {np.percentile(e, 95):5.2f}cm {e.max():5.2f}cm")


class MiniLoop:
    """The server's tick without the server: read → stage → behavior → controller → write."""

    def __init__(self, overrides: dict) -> None:
        self.cfg, self.driver, self.stage = setup(overrides)
        self.controller = RoverController(Limits.from_config(self.cfg), self.cfg["robot"]["wheel_radius_m"],
                                          self.cfg["robot"]["track_m"])
        self.dt = 1.0 / self.cfg["loop"]["rate_hz"]
        self.frame = None
        self.t = 0.0
        lim = self.cfg["limits"]
        self.brake = 0.5 * min(lim["angular_accel_rad_s2"], lim["angular_decel_rad_s2"]) / self.stage.time_scale

    def tick(self, behavior=None):
        self.frame = self.driver.read(self.dt)
        self.stage.process(self.frame.values, self.dt, self.t)
        self.t += self.dt
        sp = (0.0, 0.0)
        done = False
        if behavior is not None:
            out = behavior.update(self.frame.values, self.dt, self.t)
            done = out is None
            sp = (0.0, 0.0) if out is None else out
        self.driver.write(self.controller.update(self.dt, "track", *sp))
        return done

    def run(self, behavior, limit_s: float = 300.0) -> float:
        t0 = self.t
        while not self.tick(behavior):
            if self.t - t0 > limit_s:
                raise RuntimeError("behavior did not finish")
        for _ in range(round(1.0 / self.dt)):  # let the wheels stop
            self.tick()
        return self.t - t0

    def true_heading_error(self, target: float) -> float:
        true = (90.0 - math.degrees(self.frame.truth["yaw"])) % 360.0
        return (true - target + 180.0) % 360.0 - 180.0


def bench_heading(seeds: list[int]) -> None:
    print("heading command, 8 targets 45°…360° in turn, true heading after the stop (100 Hz loop, real time)")
    for seed in seeds:
        loop = MiniLoop({"driver": {"seed": seed, **CLEAN_MAG}})
        for _ in range(100):
            loop.tick()
        errors, steps, times = [], [], []
        for target in range(45, 361, 45):
            b = HeadingBehavior(loop.stage, target, loop.cfg["heading"], loop.cfg["limits"]["angular_rad_s"], loop.brake)
            times.append(loop.run(b))
            assert b.outcome == "reached", b.outcome
            errors.append(loop.true_heading_error(target))
            steps.append(b.steps)
        e = np.abs(errors)
        print(f"  seed {seed}: |error| mean {e.mean():.2f}°, max {e.max():.2f}° "
              f"(signed {', '.join(f'{v:+.2f}' for v in errors)}); steps {steps}; "
              f"{np.mean(times):.1f} s per 45° command")


def bench_magcal() -> None:
    print("magnetometer calibration run (profile iron: hard [4, -2.5, 1.5] µT, soft [1.03, 0.97, 1])")
    loop = MiniLoop({})
    for _ in range(100):
        loop.tick()
    before = abs(loop.true_heading_error((loop.frame.values["heading_deg"])))
    cal = loop.cfg["calibration"]
    results = []
    b = MagCalibrationBehavior(loop.stage, cal["mag_revolutions"], cal["mag_turn_rate_rad_s"], cal["mag_timeout_s"],
                               loop.brake, results.append)
    t0 = time.perf_counter()
    duration = loop.run(b)
    wall = time.perf_counter() - t0
    r = results[0]
    fit_t0 = time.perf_counter()
    from server.navigation import fit_magnetometer
    fit_magnetometer(b.samples)
    fit_us = (time.perf_counter() - fit_t0) * 1e6
    for _ in range(200):
        loop.tick()
    after = abs(loop.true_heading_error(loop.frame.values["heading_deg"]))
    print(f"  {duration:.1f} s of turning, {r['samples']} samples, method {r['method']}, fit {fit_us:.0f} µs "
          f"(in a worker thread, once; the rover holds still meanwhile)")
    print(f"  offset {np.round(r['offset_ut'], 2).tolist()} µT, scale {np.round(r['scale'], 4).tolist()}, "
          f"residual {r['residual_rms_ut']} µT")
    print(f"  heading error before {before:.2f}°, after {after:.2f}°  ({wall:.1f} s wall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    bench_read(1000 if args.quick else 5000)
    print()
    bench_stage(5.0 if args.quick else 30.0)
    print()
    bench_position(60.0 if args.quick else 300.0)
    print()
    bench_heading([1] if args.quick else [1, 2, 3])
    print()
    bench_magcal()


if __name__ == "__main__":
    main()
