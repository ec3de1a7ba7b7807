"""Kinematics benchmarks: solves per second, SVG cost per frame, and the tracking of the paper's series.

Plain script, prints figures, asserts nothing about time::

    .venv/bin/python bench/bench_kinematics.py [--quick]

Costs are the best of three runs (bench/common.py), one call at a time as the
control loop makes them. The Stewart forward problem is timed cold (Newton from
the home pose, to poses up to 8 cm and 0.25 rad away) and warm (from the pose of
the previous 10 ms sample of a trajectory, as the simulator and a controller run
it). The tracking table runs the six series of seeds/003 through the simulated
actuators (defaults: 0.25 m/s, 2 m/s²) at 100 Hz and prints the deviation
statistics per moving axis, like the paper's tables 2 and 3.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import best_us  # noqa: E402

from robotics.description import parse, to_svg, transforms  # noqa: E402
from robotics.kinematics.scara import Scara  # noqa: E402
from robotics.kinematics.stewart import StewartPlatform  # noqa: E402
from robotics.tracking import deviation_by_axis  # noqa: E402
from robotics.trajectory import POSE_AXES, STEWART_SERIES, stewart_series  # noqa: E402
from sim.scara import ScaraParams, ScaraSim  # noqa: E402
from sim.stewart import StewartSim  # noqa: E402

BODIES = Path(__file__).resolve().parents[1] / "config" / "bodies"


def row(name: str, us: float) -> None:
    print(f"  {name:52s} {us:9.2f} µs   {1e6 / us:11,.0f} /s")


def bench_scara(n: int) -> None:
    arm = Scara(0.3, 0.2, q_min=np.radians([-170, -150]), q_max=np.radians([170, 150]))
    rng = np.random.default_rng(0)
    qs = rng.uniform([-2.5, 0.2], [2.5, 2.4], size=(n, 2))
    ps = [arm.forward(q) for q in qs]
    it = iter(range(10**12))
    print("SCARA (l1 0.30 m, l2 0.20 m)")
    row("forward(q)", best_us(lambda: arm.forward(qs[next(it) % n]), n))
    row("inverse(p, elbow=+1)", best_us(lambda: arm.inverse(ps[next(it) % n], elbow=+1), n))
    row("jacobian(q)", best_us(lambda: arm.jacobian(qs[next(it) % n]), n))
    row("inverse_velocity(q, v)", best_us(lambda: arm.inverse_velocity(qs[next(it) % n], (0.1, -0.05)), n))
    row("workspace(n=64)", best_us(lambda: arm.workspace(n=64), max(1, n // 100)))


def bench_stewart(n: int) -> None:
    sp = StewartPlatform.symmetric()
    home = np.concatenate(sp.home)
    rng = np.random.default_rng(1)
    poses = home + rng.uniform([-0.08, -0.08, -0.06, -0.25, -0.25, -0.25], [0.08, 0.08, 0.06, 0.25, 0.25, 0.25],
                               size=(n, 6))
    lengths = [sp.leg_lengths(p[:3], p[3:]) for p in poses]
    series = stewart_series("up_left", *sp.home).values
    series_lengths = [sp.leg_lengths(p[:3], p[3:]) for p in series]
    it = iter(range(10**12))
    print("Stewart 6-6 (reference platform: radii 0.5/0.3 m, spreads 20°/100°, stroke 0.45–0.75 m)")
    row("leg_lengths(pose)  (inverse)", best_us(lambda: sp.leg_lengths(poses[next(it) % n][:3],
                                                                       poses[next(it) % n][3:]), n))
    row("saturate(lengths)", best_us(lambda: sp.saturate(lengths[next(it) % n]), n))
    row("jacobian(pose)", best_us(lambda: sp.jacobian(poses[next(it) % n][:3], poses[next(it) % n][3:]), n))
    row("forward(lengths)  cold, from home", best_us(lambda: sp.forward(lengths[next(it) % n]), n))

    state = {"guess": sp.home, "i": 0}

    def warm() -> None:
        i = state["i"] = (state["i"] + 1) % len(series)
        state["guess"] = sp.home if i == 0 else sp.forward(series_lengths[i], guess=state["guess"])

    row("forward(lengths, guess=last)  warm, 10 ms steps", best_us(warm, min(n, 999)))
    cold_iters = []
    for L in lengths[: min(n, 500)]:
        cold_iters.append(_iterations(sp, L, None))
    warm_iters, guess = [], sp.home
    for L in series_lengths[1:]:
        warm_iters.append(_iterations(sp, L, guess))
        guess = sp.forward(L, guess=guess)
    print(f"  Newton and chord steps per solve: cold mean {np.mean(cold_iters):.1f} (max {max(cold_iters)}), "
          f"warm mean {np.mean(warm_iters):.1f} (max {max(warm_iters)})")


def _iterations(sp: StewartPlatform, lengths, guess) -> int:
    for k in range(1, 50):
        try:
            sp.forward(lengths, guess=guess, max_iterations=k)
            return k - 1
        except ValueError:
            continue
    return 50


def bench_description(n: int) -> None:
    walker_text = (BODIES / "walker-flight.xml").read_text(encoding="utf-8")
    walker = parse(walker_text)
    scara = parse((BODIES / "scara.xml").read_text(encoding="utf-8"))
    rng = np.random.default_rng(2)
    qs = [{1: tuple(rng.uniform(-0.5, 0.5, 3)), **{k: float(rng.uniform(-1, 1)) for k in range(2, 8)}}
          for _ in range(max(n // 10, 10))]
    it = iter(range(10**12))
    print("Body descriptions (walker in flight: 7 bodies; SCARA: 3)")
    row("parse(walker-flight.xml)  (4 quotes repaired)", best_us(lambda: parse(walker_text), max(1, n // 20)))
    row("walker.forward(q)", best_us(lambda: walker.forward(qs[next(it) % len(qs)]), n // 4))
    row("transforms(walker, q)  (what a frame updates)", best_us(lambda: transforms(walker, qs[next(it) % len(qs)]),
                                                                 n // 4))
    row("to_svg(walker, q)  (the whole document)", best_us(lambda: to_svg(walker, qs[next(it) % len(qs)]), n // 20))
    row("to_svg(scara, q, y_up=True)", best_us(lambda: to_svg(scara, {1: 0.3, 2: 1.0}, y_up=True), n // 20))
    print(f"  SVG size: walker {len(to_svg(walker).encode())} bytes, scara {len(to_svg(scara).encode())} bytes")


def bench_sim(n: int) -> None:
    sp = StewartPlatform.symmetric()
    print("Simulation steps (10 ms each)")
    arm = ScaraSim(ScaraParams())
    arm.command_velocities((0.3, 0.3))
    row("ScaraSim.step(0.01)  (10 sub-steps)", best_us(lambda: arm.step(0.01), n // 10))
    sim = StewartSim(sp)
    series = stewart_series("roll", *sp.home).values
    state = {"i": 0}

    def stewart_step() -> None:
        state["i"] = (state["i"] + 1) % len(series)
        row_ = series[state["i"]]
        sim.command_pose(row_[:3], row_[3:])
        sim.step(0.01)

    row("StewartSim command_pose + step(0.01) (FK warm)", best_us(stewart_step, min(n // 10, 999)))


def bench_tracking() -> None:
    sp = StewartPlatform.symmetric()
    print("Tracking of the six series of seeds/003 (1000 points, 10 s, 100 Hz; achieved − commanded)")
    print(f"  {'series':12s} {'axis':10s} {'mean':>10s} {'mean |d|':>10s} {'rms':>10s} {'max |d|':>10s}   unit")
    for name in STEWART_SERIES:
        s = stewart_series(name, *sp.home)
        sim = StewartSim(sp)
        achieved = []
        for values in s.values:
            sim.command_pose(values[:3], values[3:])
            sim.step(0.01)
            achieved.append(np.concatenate(sim.pose))
        report = deviation_by_axis(POSE_AXES, s.values, np.array(achieved))
        moving = [a for a, col in zip(POSE_AXES, s.values.T) if np.ptp(col) > 0]
        for axis in moving:
            r = report[axis]
            scale, unit = (1e3, "mm") if axis.endswith("_m") else (math.degrees(1.0), "deg")
            print(f"  {name:12s} {axis:10s} {r['mean'] * scale:10.4f} {r['mean_abs'] * scale:10.4f} "
                  f"{r['rms'] * scale:10.4f} {r['max_abs'] * scale:10.4f}   {unit}")
            name = ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls per figure")
    args = ap.parse_args()
    n = 2000 if args.quick else 20000
    bench_scara(n)
    bench_stewart(n // 4)
    bench_description(n)
    bench_sim(n)
    if not args.quick:
        bench_tracking()
    return 0


if __name__ == "__main__":
    sys.exit(main())
