"""Cost of one simulator step and one sim-driver read (figures, never assertions).

Run: ``.venv/bin/python bench/bench_sim.py``. A 1 kHz control loop has 1 ms per
tick for everything; this shows the simulator's share of it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from drivers.sim import SimDriver
from sim.rover import RangerParams, RoverParams, RoverSim
from sim.world import World

WORLD = {
    "size_m": [6.0, 4.0],
    "boxes": [{"center": [4.5, 1.0], "size": [0.4, 0.4], "yaw_deg": 20}, {"center": [2.0, 3.2], "size": [0.8, 0.3]}],
    "ramps": [{"center": [1.5, 1.0], "size": [1.0, 0.8], "slope_deg": 10}],
}
N = 5000


def per_call_us(fn, n: int = N) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    world = World.from_config(WORLD)
    three = (RangerParams("front"), RangerParams("left", 0.0, 0.125, math.pi / 2), RangerParams("right", 0.0, -0.125, -math.pi / 2))
    for label, params in (("1 ranger", RoverParams()), ("3 rangers", RoverParams(rangers=three))):
        free = RoverSim(params, world, np.random.default_rng(0), (3.0, 2.0, 0.0))
        us = per_call_us(lambda i: free.step(0.001, 4.0 + math.sin(i / 100.0), 4.0))
        print(f"step, open floor, {label:9s}: {us:7.1f} µs")
        pressed = RoverSim(params, world, np.random.default_rng(0), (5.0, 2.0, 0.0))
        for _ in range(300):
            pressed.step(0.01, 20.0, 20.0)
        us = per_call_us(lambda i: pressed.step(0.001, 20.0, 20.0))
        print(f"step, pushing a wall, {label:9s}: {us:7.1f} µs  (collided={pressed.collided})")
    d = SimDriver({}, WORLD)
    d.open()
    d.activate()
    d.write({"wheel_left": 5.0, "wheel_right": 4.0})
    print(f"SimDriver.read(0.001): {per_call_us(lambda i: d.read(0.001)):7.1f} µs")
    d.close()
    sim = RoverSim(RoverParams(), world, np.random.default_rng(0), (3.0, 2.0, 0.0))
    t0 = time.perf_counter()
    for i in range(6000):
        sim.step(0.01, 12.0, 10.0 + 3.0 * math.sin(i / 200.0))
    wall = time.perf_counter() - t0
    print(f"60 s of sim time at dt 0.01: {wall:.2f} s wall ({60.0 / wall:.0f}× real time)")


if __name__ == "__main__":
    main()
