"""The source papers' figures the experiments are compared with, each with where it comes from.

seeds/002 (江朝军, 倪江生, 张军, 李汉: *基于IMU及UWB的微型弹跳机器人传感器节点位姿检测研究*, Southeast
University; ``/work/shared/seeds/002_5c4a946e9becbbdf.txt``) — a jumping sensor node in a 5 m × 8 m field:

* §3.2 and Table 3: heading adjustments of 45°, 90°, …, 360°, 5 trials each, "adjusted" within 5°.
  Encoder-only: mean deviation 4.64°, mean variance 13.25 (deg²); encoder + magnetometer correction:
  3.64°, 0.65. The text gives only these overall figures; Table 3's per-target rows and Fig. 15/16 are
  not in the source text we have, so the per-target rows show ours alone (``None`` beside them).
* §3.3: a straight deployment of 8 jumps (2 trials) starting at (250, 200) cm and a rectangle of 16 jumps,
  about 2 m × 2 m, clockwise, 4 per side (1 trial) starting at (150, 300) cm; an anchor at each corner of
  the field (§2.2: anchors 120 cm up on tripods, the tag 12.5 cm above the ground); UWB against the
  measured landing points: mean error 9.08 cm, "basically within 23 cm", over both runs.
* §2.2: after the quadratic range fit (eq. 15) the range errors stay "basically within ±5 cm".

seeds/000 (a virtual accelerometer and gyroscope in CoppeliaSim, checked against analytic motion):

* a sensor 0.75 m from the axis of a body spinning at π/4 rad/s reads a radial acceleration of 0.463 m/s²
  (r·ω²), errors "no more than 1e-4" for accelerations and rates;
* the static and constant-velocity cases: accelerometer errors ~1e-4 m/s², gyro ≤ 5e-4 rad/s;
* Table 1: spin-up under a constant torque, analytic time ``t = I·ω/M`` against the simulator's, errors
  0.008–0.018 s.
"""

from __future__ import annotations

SEED_002 = "seeds/002 (Southeast University, IMU and UWB pose detection of a jumping sensor node)"
SEED_000 = "seeds/000 (a virtual accelerometer and gyroscope for CoppeliaSim)"

#: §3.2, Table 3: (mean deviation °, mean variance deg²) per method, over the 8 targets × 5 trials
HEADING_TURNS = {"encoder": (4.64, 13.25), "compass": (3.64, 0.65)}
HEADING_TARGETS_DEG = tuple(range(45, 361, 45))
HEADING_TRIALS = 5
HEADING_SUCCESS_DEG = 5.0

#: §3.3: the field, its anchors (§2.2 heights) and the two deployments
FIELD_SIZE_M = (5.0, 8.0)
ANCHOR_HEIGHT_M = 1.2
TAG_HEIGHT_M = 0.125
LINE_START_M = (2.5, 2.0)
LINE_STEPS = 8
LINE_TRIALS = 2
RECTANGLE_START_M = (1.5, 3.0)
RECTANGLE_STEPS = 16  # 4 per side, clockwise
RECTANGLE_SIDE_M = 2.0
#: UWB fix against the true landing points, over both deployments: mean, max (cm)
DEPLOYMENT_UWB_MEAN_CM = 9.08
DEPLOYMENT_UWB_MAX_CM = 23.0

#: seeds/000: the spinning body's case and the error levels it reports
SPIN_RADIUS_M = 0.75
SPIN_RATE_RAD_S = 0.7853981633974483  # π/4
SPIN_RADIAL_M_S2 = 0.463
IMU_ACC_ERROR_M_S2 = 1e-4
IMU_GYRO_ERROR_RAD_S = 5e-4
SPINUP_TIME_ERROR_S = (0.008, 0.018)

__all__ = ["ANCHOR_HEIGHT_M", "DEPLOYMENT_UWB_MAX_CM", "DEPLOYMENT_UWB_MEAN_CM", "FIELD_SIZE_M", "HEADING_SUCCESS_DEG",
           "HEADING_TARGETS_DEG", "HEADING_TRIALS", "HEADING_TURNS", "IMU_ACC_ERROR_M_S2", "IMU_GYRO_ERROR_RAD_S",
           "LINE_START_M", "LINE_STEPS", "LINE_TRIALS", "RECTANGLE_SIDE_M", "RECTANGLE_START_M", "RECTANGLE_STEPS",
           "SEED_000", "SEED_002", "SPINUP_TIME_ERROR_S", "SPIN_RADIAL_M_S2", "SPIN_RADIUS_M", "SPIN_RATE_RAD_S",
           "TAG_HEIGHT_M"]
