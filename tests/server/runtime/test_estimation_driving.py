"""Fusion while driving on the field profile: the fused estimate beats raw UWB round a 1 m circle (issue 23).

The runtime's own robot (:class:`~server.runtime.experiments.runner.OfflineRobot`: the real driver, estimator,
supervisor and controller, ticked back to back; no timing) drives ``config/rover-field.toml`` (NLOS shadows,
multipath, heavy tails, outliers, slip) round a 1 m circle at 0.3 m/s, as bench/bench_sensing.py does, and the
fused estimate and the raw UWB fixes are compared with the simulator's true pose after the first 5 s.

Before the fix the estimator kept the step-and-fix odometry noise (1.5 cm/√m) while the compass was not
calibrated: the dead-reckoned track, on a compass 2.9° off on average, was trusted over the fixes and the
estimate lagged behind them (13.5 cm against raw UWB's 13.9 cm: 0.97×); with the uncalibrated compass's
odometry noise (5 cm/√m, server/runtime/estimation/position.py) it is 9.7 cm (0.70×). The test asks for at
most 0.85×. Calibrated, the compass is right and the fused estimate is ~4 cm (docs/sensing.md, "Driving").
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from server.config import REPO_ROOT
from server.runtime.controllers.rover import RoverSetpoint
from server.runtime.experiments.runner import OfflineRobot

FIELD = REPO_ROOT / "config" / "rover-field.toml"
DRIVE_S = 45.0
SKIP_S = 5.0
#: fused mean error at most this share of raw UWB's (the goal is < 1; before the fix 0.97, after 0.70)
MAX_RATIO = 0.85


def drive_circle(seconds: float) -> dict[str, np.ndarray]:
    bot = OfflineRobot(FIELD, overrides={"driver": {"start_pose": [2.5, 3.0, 0.0], "seed": 1},
                                         "safety": {"command_timeout_s": 5.0}})
    bot.tick(100)
    bot.start()
    fused, uwb = [], []
    for k in range(round(seconds / bot.dt_s)):
        bot.loop.set_setpoint(RoverSetpoint(0.3, 0.3))  # a 1 m circle round (2.5, 4.0)
        bot.tick()
        if k * bot.dt_s < SKIP_S:
            continue
        t, pos = bot.truth, bot.stage.position  # what est_x_m, est_y_m and uwb_x_m, uwb_y_m carry
        fused.append(math.hypot(float(pos.pose.state[0]) - t["x"], float(pos.pose.state[1]) - t["y"]))
        if all(map(math.isfinite, pos.uwb_fix)):
            uwb.append(math.hypot(pos.uwb_fix[0] - t["x"], pos.uwb_fix[1] - t["y"]))
    assert bot.state.value == "running"
    assert not bot.driver.sim.collided
    assert not bot.stage.attitude.heading_calibrated  # the case of the fix: the compass not calibrated yet
    return {"fused": np.array(fused), "uwb": np.array(uwb)}


@pytest.mark.timeout(900)  # 4500 ticks of the whole loop: ~30 s alone, more on a loaded machine
def test_driving_a_circle_on_the_field_the_fused_estimate_beats_raw_uwb() -> None:
    run = drive_circle(DRIVE_S)
    fused, uwb = run["fused"], run["uwb"]
    assert len(fused) > 3500 and len(uwb) > 3500
    print(f"\nfield profile, 1 m circle at 0.3 m/s: fused mean {100 * fused.mean():.2f} cm (max "
          f"{100 * fused.max():.2f}), raw UWB mean {100 * uwb.mean():.2f} cm (max {100 * uwb.max():.2f}), "
          f"ratio {fused.mean() / uwb.mean():.2f}")
    assert fused.mean() < MAX_RATIO * uwb.mean()
    assert fused.max() < uwb.max()
