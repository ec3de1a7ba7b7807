"""Inertial and UWB sensing: cost per tick and accuracy, beside seeds/002's figures (figures, never assertions).

Run: ``.venv/bin/python bench/bench_sensing.py [--quick]``. Everything runs on the runtime's own robot
(:class:`server.runtime.experiments.runner.OfflineRobot`: the real driver, estimation stages, supervisor,
controller and behaviours, ticked back to back), without the HTTP server:

1. one control tick (read → estimate → behaviour → controller → write) with the IMU alone, with the
   magnetometer and with UWB, and the sim driver's ``read()`` alone (the loop holds 100 Hz–1 kHz: the read and
   the estimator are its biggest share);
2. position error over a drive round a 1 m circle, fused (odometry + IMU + UWB) and UWB alone, on the
   default profile (config/rover-sim.toml: a kind simulator) and on the field profile
   (config/rover-field.toml: NLOS, multipath, heavy tails, outliers, slip), beside seeds/002's UWB figures;
3. the seed experiments (:mod:`server.runtime.experiments`) on the field profile, ours beside the paper's:
   ``heading_turns`` (encoder-only vs encoder + magnetometer, seeds/002 Table 3), ``deployment_line`` and
   ``deployment_rectangle`` (UWB error per step against the true landing point, the fused estimate's, the
   true landing error). ``--quick`` runs fewer targets, trials and steps.

The "peer" of these figures is the paper's real rover (seeds/002 §3): the sim is fitted to it
(docs/sensing.md, "Fitted parameters"), so the ratios say how close the fit is, not how good a robot is.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import best_us  # noqa: E402

from server.config import REPO_ROOT  # noqa: E402
from server.runtime.controllers.rover import RoverSetpoint  # noqa: E402
from server.runtime.experiments import paper, run_offline  # noqa: E402
from server.runtime.experiments.runner import OfflineRobot  # noqa: E402

FIELD = REPO_ROOT / "config" / "rover-field.toml"
OFF = {"magnetometer": {"enabled": False}, "uwb": {"enabled": False}}


def bench_tick(n: int) -> None:
    print(f"one control tick on the runtime's robot (OfflineRobot.tick: read → estimate → controller → write), "
          f"best of 3 × {n}")
    cases = {
        # the profile's tilt rule needs the IMU: it is the least a rover runs with
        "IMU only": {"driver": {**OFF, "imu": {}}},
        "+ IMU + magnetometer": {"driver": {**OFF, "imu": {}, "magnetometer": {}}},
        "+ IMU + magnetometer + UWB (rover-sim)": {},
    }
    for label, overrides in cases.items():
        bot = OfflineRobot(overrides=overrides)
        bot.start()
        bot.loop.set_setpoint(RoverSetpoint(0.0, 0.5))  # in place: no wall to meet
        tick = best_us(lambda: bot.tick(), n)
        read = best_us(lambda: bot.driver.read(bot.dt_s), n)
        print(f"  {label:42s} tick {tick:7.1f} µs   driver.read {read:7.1f} µs")
    bot = OfflineRobot(FIELD)
    bot.start()
    bot.loop.set_setpoint(RoverSetpoint(0.0, 0.5))  # in place: no wall to meet
    print(f"  {'field profile (every disturbance on)':42s} tick {best_us(lambda: bot.tick(), n):7.1f} µs   "
          f"driver.read {best_us(lambda: bot.driver.read(bot.dt_s), n):7.1f} µs")


def circle(profile: Path | None, seconds: float, start: list[float]) -> dict[str, np.ndarray]:
    bot = OfflineRobot(profile, overrides={"driver": {"start_pose": start}, "safety": {"command_timeout_s": 5.0}})
    bot.tick(100)
    bot.start()
    fused, alone = [], []
    for k in range(round(seconds / bot.dt_s)):
        bot.loop.set_setpoint(RoverSetpoint(0.3, 0.3))  # a 1 m circle
        bot.tick()
        if k < 500:
            continue
        t, v = bot.truth, bot.loop.snapshot()["values"]
        if v.get("est_x_m") is not None and math.isfinite(v["est_x_m"]):
            fused.append(math.hypot(v["est_x_m"] - t["x"], v["est_y_m"] - t["y"]))
        if v.get("uwb_x_m") is not None and math.isfinite(v["uwb_x_m"]):
            alone.append(math.hypot(v["uwb_x_m"] - t["x"], v["uwb_y_m"] - t["y"]))
    return {"fused": np.array(fused) * 100, "uwb": np.array(alone) * 100}


def bench_position(seconds: float) -> None:
    print(f"position error, {seconds:.0f} s round a 1 m circle at 0.3 m/s (after 5 s), cm")
    print(f"  {'':44s} {'mean':>7s} {'p95':>7s} {'max':>7s}  mean ÷ paper's")
    print(f"  {'paper (seeds/002, real rover, UWB at each step)':44s} {paper.DEPLOYMENT_UWB_MEAN_CM:7.2f} {'':7s} "
          f"{paper.DEPLOYMENT_UWB_MAX_CM:7.2f}")
    for label, profile, start in (("rover-sim", None, [3.0, 1.0, 0.0]), ("rover-field", FIELD, [2.5, 3.0, 0.0])):
        run = circle(profile, seconds, start)
        for kind in ("fused", "uwb"):
            e = run[kind]
            name = f"{label}: {'fused' if kind == 'fused' else 'UWB alone'}"
            print(f"  {name:44s} {e.mean():7.2f} {np.percentile(e, 95):7.2f} {e.max():7.2f}  "
                  f"{e.mean() / paper.DEPLOYMENT_UWB_MEAN_CM:6.2f}")


def bench_experiments(quick: bool) -> None:
    heading_params = {"targets_deg": [90.0, 180.0, 270.0, 360.0], "trials": 2} if quick else {}
    r = run_offline("heading_turns", FIELD, params=heading_params)
    print(f"heading_turns on the field profile ({r['status']['outcome']}; seeds/002 Table 3 beside it)")
    print(f"  {'method':10s} {'ours mean°':>10s} {'paper':>7s} {'ratio':>6s}  {'ours var°²':>10s} {'paper':>7s}  "
          f"{'≤ 5°':>8s}  disturbed")
    for row in r["overall"]:
        o, p = row["ours"], row["paper"]
        ratio = o["mean_deviation_deg"] / p["mean_deviation_deg"]
        print(f"  {row['method']:10s} {o['mean_deviation_deg']:10.2f} {p['mean_deviation_deg']:7.2f} {ratio:6.2f}  "
              f"{o['mean_variance_deg2']:10.2f} {p['mean_variance_deg2']:7.2f}  "
              f"{o['within_5_deg']:4d}/{row['trials']:<3d}  {o['compass_disturbed']}")
    print()
    print("deployments on the field profile: UWB fix per step against the true landing point, cm")
    print(f"  {'':22s} {'UWB mean':>9s} {'UWB max':>8s} {'fused mean':>11s} {'fused max':>10s} {'steps':>6s}  "
          f"UWB mean ÷ paper's")
    print(f"  {'paper (both, real)':22s} {paper.DEPLOYMENT_UWB_MEAN_CM:9.2f} {paper.DEPLOYMENT_UWB_MAX_CM:8.2f}")
    for name, params in (("deployment_line", {"trials": 1, "steps": 4} if quick else {}),
                         ("deployment_rectangle", {"steps": 8} if quick else {})):
        r = run_offline(name, FIELD, params=params)
        o = r["summary"]["ours"]
        landing = [row["arrival_error_cm"] for row in r["rows"] if row.get("arrival_error_cm") is not None]
        print(f"  {name:22s} {o['uwb_mean_cm']:9.2f} {o['uwb_max_cm']:8.2f} {o['fused_mean_cm']:11.2f} "
              f"{o['fused_max_cm']:10.2f} {o['steps']:6d}  {o['uwb_mean_cm'] / paper.DEPLOYMENT_UWB_MEAN_CM:6.2f}"
              f"   (true landing error mean {np.mean(landing) if landing else float('nan'):.2f} cm; "
              f"{r['status']['outcome']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    bench_tick(500 if args.quick else 2000)
    print()
    bench_position(60.0 if args.quick else 300.0)
    print()
    bench_experiments(args.quick)


if __name__ == "__main__":
    main()
