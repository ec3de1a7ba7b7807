"""Virtual 3-axis accelerometer and gyroscope computed from successive poses of a body.

After seeds/000 (a virtual IMU for CoppeliaSim, checked against analytic cases):

- accelerometer: velocity from successive position differences, acceleration
  from successive velocity differences, then specific force in the sensor frame
  (eq. 2–4, REP-145)::

      acc = R_world_sensorᵀ · (dv/dt − g_vec),   g_vec = (0, 0, −gravity)

  so a sensor at rest and level reads +gravity on z, and reads 0 in free fall;
- gyroscope: the relative rotation between two samples, ``R_prevᵀ · R_now``
  (eq. 6–7), turned into a rotation vector and divided by the time step: the
  mean angular rate over the step, in the sensor frame. (The paper differences
  Euler angles; the rotation vector is exact for any axis and has no gimbal lock.)

The sensor may sit at a lever arm ``lever_arm_m`` from the body origin (body
frame) and be mounted with a rotation ``R_body_sensor``; a sensor off the spin
axis then feels the centripetal acceleration.

Timing: the second difference ``(p_k − 2 p_{k−1} + p_{k−2})`` is centred on the
previous sample, so the motion term of the accelerometer is the acceleration
at the previous sample, in that sample's sensor axes, held for one step (a
one-sample delay, like a real sensor's filter group delay); the gravity term
uses the current attitude, so tilt has no delay. The error stays second order
in the step: a constant-rate spin reads its centripetal term to ~1e-6 m/s².

The first update has no history and returns a body at rest (gravity only, zero
rate); the second has one velocity and returns zero acceleration (gravity only)
with the gyro already measured. Noise, bias and scale errors are off unless an
:class:`ImuNoise` and a seeded ``numpy.random.Generator`` are given.

>>> imu = VirtualImu()
>>> acc, gyro = imu.update(0.0, [0, 0, 0], np.eye(3))
>>> np.round(acc, 5).tolist(), gyro.tolist()
([0.0, 0.0, 9.80665], [0.0, 0.0, 0.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robotics.estimation.attitude import rotvec_from_rotation

__all__ = ["ImuNoise", "VirtualImu"]


def _vec3(value, default: float) -> np.ndarray:
    return np.broadcast_to(np.asarray(default if value is None else value, dtype=float), (3,)).copy()


@dataclass
class ImuNoise:
    """Error model of a MEMS IMU; every term defaults to "perfect".

    - ``acc_sigma`` m/s², ``gyro_sigma`` rad/s: white noise, standard deviation per sample.
    - ``acc_bias`` m/s², ``gyro_bias`` rad/s: constant offsets, (3,) or scalar.
    - ``acc_scale``, ``gyro_scale``: per-axis gain (1 = perfect), (3,) or scalar.
    - ``acc_bias_walk`` m/s²/√s, ``gyro_bias_walk`` rad/s/√s: bias random walk.
    - ``acc_range`` m/s², ``gyro_range`` rad/s: saturation (full scale).

    The measurement is ``clip(scale · true + bias + noise, ±range)``.

    >>> ImuNoise(gyro_sigma=0.01).acc_scale.tolist()
    [1.0, 1.0, 1.0]
    """

    acc_sigma: float = 0.0
    gyro_sigma: float = 0.0
    acc_bias: np.ndarray | float | None = None
    gyro_bias: np.ndarray | float | None = None
    acc_scale: np.ndarray | float | None = None
    gyro_scale: np.ndarray | float | None = None
    acc_bias_walk: float = 0.0
    gyro_bias_walk: float = 0.0
    acc_range: float = math.inf
    gyro_range: float = math.inf

    def __post_init__(self) -> None:
        self.acc_bias = _vec3(self.acc_bias, 0.0)
        self.gyro_bias = _vec3(self.gyro_bias, 0.0)
        self.acc_scale = _vec3(self.acc_scale, 1.0)
        self.gyro_scale = _vec3(self.gyro_scale, 1.0)
        for name in ("acc_sigma", "gyro_sigma", "acc_bias_walk", "gyro_bias_walk"):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not (self.acc_range > 0.0 and self.gyro_range > 0.0):
            raise ValueError("acc_range and gyro_range must be positive")


class VirtualImu:
    """Accelerometer + gyroscope from a body's pose history; see the module docstring.

    ``gravity`` m/s²; ``lever_arm_m`` (3,) sensor position in the body frame;
    ``R_body_sensor`` (3, 3) sensor mounting; ``noise`` an :class:`ImuNoise`
    (needs ``rng``, a seeded ``numpy.random.Generator``).

    >>> imu = VirtualImu(lever_arm_m=(0.75, 0.0, 0.0))
    >>> w = math.pi / 4
    >>> for k in range(3):
    ...     R = np.array([[math.cos(w * k * 0.01), -math.sin(w * k * 0.01), 0],
    ...                   [math.sin(w * k * 0.01), math.cos(w * k * 0.01), 0], [0, 0, 1]])
    ...     acc, gyro = imu.update(k * 0.01, [0, 0, 0], R)
    >>> round(float(acc[0]), 4), round(float(gyro[2]), 6)     # centripetal 0.75·(pi/4)², rate pi/4
    (-0.4626, 0.785398)
    """

    def __init__(
        self,
        gravity: float = 9.80665,
        *,
        lever_arm_m=(0.0, 0.0, 0.0),
        R_body_sensor=None,
        noise: ImuNoise | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if not gravity >= 0.0:
            raise ValueError(f"gravity must be >= 0, got {gravity}")
        self.gravity = float(gravity)
        self.g_world = np.array([0.0, 0.0, -self.gravity])
        self.lever_arm_m = np.asarray(lever_arm_m, dtype=float).reshape(3)
        self.R_body_sensor = np.eye(3) if R_body_sensor is None else np.asarray(R_body_sensor, dtype=float).reshape(3, 3)
        if noise is not None and rng is None:
            raise ValueError("a noise model needs rng, a seeded numpy.random.Generator")
        self.noise = noise
        self.rng = rng
        self.reset()

    def reset(self) -> None:
        """Forget the pose history (the next update is a "first" update again).

        >>> imu = VirtualImu(); imu.reset(); len(imu._history)
        0
        """
        self._history: list[tuple[float, np.ndarray, np.ndarray]] = []
        self._acc_bias = None if self.noise is None else self.noise.acc_bias.copy()
        self._gyro_bias = None if self.noise is None else self.noise.gyro_bias.copy()
        self.true_acc = np.array([0.0, 0.0, self.gravity])
        self.true_gyro = np.zeros(3)

    def update(self, t: float, position, rotation) -> tuple[np.ndarray, np.ndarray]:
        """Feed the body pose at time ``t`` (s): ``position`` (3,) m world, ``rotation`` R_world_body.

        Returns (acc m/s², gyro rad/s), both (3,) in the sensor frame. The
        noise-free values are also kept in ``true_acc`` and ``true_gyro``.
        ``t`` must increase from call to call.

        >>> imu = VirtualImu()
        >>> for k in range(3):    # free fall from rest
        ...     acc, _ = imu.update(0.1 * k, [0, 0, -0.5 * 9.80665 * (0.1 * k) ** 2], np.eye(3))
        >>> (np.round(acc, 9) + 0.0).tolist()    # + 0.0 folds -0.0 into 0.0
        [0.0, 0.0, 0.0]
        """
        t = float(t)
        r_body = np.asarray(rotation, dtype=float).reshape(3, 3)
        p_body = np.asarray(position, dtype=float).reshape(3)
        r_sensor = r_body @ self.R_body_sensor
        p_sensor = p_body + r_body @ self.lever_arm_m
        hist = self._history
        if hist and not t > hist[-1][0]:
            raise ValueError(f"time must increase: got t={t} after t={hist[-1][0]}")
        hist.append((t, p_sensor, r_sensor))
        if len(hist) > 3:
            del hist[0]

        motion = np.zeros(3)  # kinematic acceleration in the sensor frame
        gyro = np.zeros(3)
        if len(hist) >= 2:
            (t1, p1, r1), (t2, p2, r2) = hist[-2], hist[-1]
            dt = t2 - t1
            gyro = rotvec_from_rotation(r1.T @ r2) / dt
            if len(hist) == 3:
                t0, p0, _ = hist[0]
                v_prev = (p1 - p0) / (t1 - t0)
                v_now = (p2 - p1) / dt
                # Centred on the previous sample, so expressed in that sample's sensor axes.
                motion = r1.T @ ((v_now - v_prev) / (0.5 * (t2 - t0)))
        acc = motion - r_sensor.T @ self.g_world
        self.true_acc, self.true_gyro = acc, gyro
        if self.noise is None:
            return acc.copy(), gyro.copy()
        return self._corrupt(acc, gyro, hist[-1][0] - hist[-2][0] if len(hist) > 1 else 0.0)

    def _corrupt(self, acc: np.ndarray, gyro: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        n, rng = self.noise, self.rng
        assert n is not None and rng is not None
        # Always draw the same number of variates, so a seed gives the same stream whatever is enabled.
        walk = rng.standard_normal(6)
        white = rng.standard_normal(6)
        root_dt = math.sqrt(dt)
        self._acc_bias = self._acc_bias + n.acc_bias_walk * root_dt * walk[:3]
        self._gyro_bias = self._gyro_bias + n.gyro_bias_walk * root_dt * walk[3:]
        acc_m = n.acc_scale * acc + self._acc_bias + n.acc_sigma * white[:3]
        gyro_m = n.gyro_scale * gyro + self._gyro_bias + n.gyro_sigma * white[3:]
        return np.clip(acc_m, -n.acc_range, n.acc_range), np.clip(gyro_m, -n.gyro_range, n.gyro_range)
