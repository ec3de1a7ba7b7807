"""Attitude from an accelerometer, a magnetometer and a gyroscope.

Conventions (DESIGN.md): body x forward, y left, z up; world x east, y north,
z up. ``R_world_body = Rz(yaw) · Ry(pitch) · Rx(roll)``; yaw is the ENU yaw of
body x (0 = east, +pi/2 = north); positive pitch is nose-down, positive roll is
right side down. The accelerometer reports specific force (REP-145), so at
rest it reads ``R_world_body.T @ (0, 0, +g)``::

    f_body = g · (−sin(pitch), cos(pitch)·sin(roll), cos(pitch)·cos(roll))

which gives roll and pitch (seeds/002, eq. 2–3). The magnetometer, turned back
to level by roll then pitch, gives the horizontal field in a frame that only
differs from the world by yaw; with the world field pointing north (+y) that
level field is ``Bh · (sin(yaw), cos(yaw))`` (seeds/002, eq. 4–7, rewritten for ENU).

>>> R = rotation_zyx(0.1, -0.2, 0.3)
>>> acc = R.T @ [0.0, 0.0, 9.81]
>>> mag = R.T @ [0.0, 20e-6, -40e-6]       # north and down, dip about 63°
>>> roll, pitch = roll_pitch_from_accel(acc)
>>> [round(v, 6) for v in (roll, pitch, yaw_from_mag(mag, roll, pitch))]
[0.1, -0.2, 0.3]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "AttitudeFilter",
    "compass_heading_deg",
    "dip_from_mag",
    "euler_zyx",
    "roll_pitch_from_accel",
    "rotation_from_rotvec",
    "rotation_zyx",
    "rotvec_from_rotation",
    "yaw_from_mag",
]


def rotation_zyx(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """R_world_body = Rz(yaw)·Ry(pitch)·Rx(roll), shape (3, 3).

    >>> np.round(rotation_zyx(0.0, 0.0, math.pi / 2) @ [1.0, 0.0, 0.0], 6).tolist()   # facing north
    [0.0, 1.0, 0.0]
    >>> np.round(rotation_zyx(0.0, 0.3, 0.0) @ [1.0, 0.0, 0.0], 3).tolist()            # nose down
    [0.955, 0.0, -0.296]
    """
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def euler_zyx(R_world_body) -> tuple[float, float, float]:
    """(roll, pitch, yaw) rad of a rotation matrix, inverse of :func:`rotation_zyx`.

    Pitch is in [-pi/2, pi/2], roll and yaw in [-pi, pi]. At gimbal lock
    (pitch = ±pi/2) only roll ∓ yaw is defined; roll is then reported as 0.

    >>> [round(v, 6) for v in euler_zyx(rotation_zyx(0.5, -0.25, 2.0))]
    [0.5, -0.25, 2.0]
    """
    r = np.asarray(R_world_body, dtype=float)
    pitch = math.asin(max(-1.0, min(1.0, -float(r[2, 0])))) + 0.0  # + 0.0 turns -0.0 into 0.0
    if math.hypot(r[2, 1], r[2, 2]) < 1e-9:
        return 0.0, pitch, math.atan2(-float(r[0, 1]), float(r[1, 1]))
    return math.atan2(float(r[2, 1]), float(r[2, 2])), pitch, math.atan2(float(r[1, 0]), float(r[0, 0]))


def _skew(w) -> np.ndarray:
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def rotation_from_rotvec(rotvec) -> np.ndarray:
    """Rotation matrix (3, 3) of a rotation vector (axis · angle, rad): Rodrigues' formula.

    >>> np.round(rotation_from_rotvec([0.0, 0.0, math.pi / 2]) @ [1.0, 0.0, 0.0], 6).tolist()
    [0.0, 1.0, 0.0]
    """
    w = np.asarray(rotvec, dtype=float).reshape(3)
    theta2 = float(w @ w)
    k = _skew(w)
    if theta2 < 1e-12:
        # Taylor series; exact to double precision below 1e-6 rad.
        return np.eye(3) + k + 0.5 * (k @ k)
    theta = math.sqrt(theta2)
    return np.eye(3) + (math.sin(theta) / theta) * k + ((1.0 - math.cos(theta)) / theta2) * (k @ k)


def rotvec_from_rotation(R) -> np.ndarray:
    """Rotation vector (3,) rad, angle in [0, pi], of a rotation matrix (log map of SO(3)).

    >>> np.round(rotvec_from_rotation(rotation_zyx(0.0, 0.0, 0.5)), 6).tolist()
    [0.0, 0.0, 0.5]
    """
    r = np.asarray(R, dtype=float)
    w = 0.5 * np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])  # sin(angle)·axis
    s = math.sqrt(float(w @ w))
    c = 0.5 * (float(np.trace(r)) - 1.0)
    theta = math.atan2(s, c)
    if theta < 1e-6:
        return w * (1.0 + theta * theta / 6.0)
    if math.pi - theta > 1e-4:
        return w * (theta / s)
    # Near a half turn sin(angle) vanishes: read the axis from (R + I)/2 = a·aᵀ (for angle = pi).
    b = 0.5 * (r + np.eye(3))
    i = int(np.argmax(np.diag(b)))
    axis = b[:, i] / math.sqrt(max(b[i, i], 1e-300))
    axis /= np.linalg.norm(axis)
    if float(axis @ w) < 0.0:
        axis = -axis
    return axis * theta


def roll_pitch_from_accel(acc):
    """(roll, pitch) rad from specific force ``acc`` (3,) in the body frame, any unit.

    Valid when the body is not accelerating: the reading is then gravity's
    reaction, ``g·(−sin p, cos p·sin r, cos p·cos r)``. Also takes (N, 3) and
    returns two (N,) arrays.

    >>> [round(v, 6) for v in roll_pitch_from_accel((0.0, 0.0, 9.81))]        # level
    [0.0, 0.0]
    >>> [round(math.degrees(v), 3) for v in roll_pitch_from_accel((0.0, 6.9367, 6.9367))]   # right side down 45°
    [45.0, 0.0]
    """
    a = np.asarray(acc, dtype=float)
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    roll = np.arctan2(ay, az)
    pitch = np.arctan2(-ax, np.hypot(ay, az)) + 0.0  # + 0.0 turns -0.0 into 0.0
    if a.ndim == 1:
        return float(roll), float(pitch)
    return roll, pitch


def yaw_from_mag(mag, roll: float, pitch: float, declination: float = 0.0):
    """Tilt-compensated ENU yaw (rad, in (-pi, pi]) of body x from a body-frame magnetometer reading.

    ``mag`` is the (hard- and soft-iron corrected) field in the body frame, any
    unit; ``roll`` and ``pitch`` come from :func:`roll_pitch_from_accel` or a filter.
    ``declination`` is the angle of magnetic north east of true north (rad); with
    the default 0 the result is the yaw relative to magnetic north. Also takes
    (N, 3) with (N,) roll and pitch.

    >>> round(yaw_from_mag((0.0, 20e-6, -40e-6), 0.0, 0.0), 6)     # field to the left: facing east
    0.0
    >>> round(yaw_from_mag((20e-6, 0.0, -40e-6), 0.0, 0.0), 6)     # field ahead: facing north
    1.570796
    """
    m = np.asarray(mag, dtype=float)
    mx, my, mz = m[..., 0], m[..., 1], m[..., 2]
    cr, sr = np.cos(roll), np.sin(roll)
    cp, sp = np.cos(pitch), np.sin(pitch)
    # Level the reading: Ry(pitch)·Rx(roll)·m equals Rz(yaw)ᵀ·B_world.
    h_x = cp * mx + sp * (sr * my + cr * mz)
    h_y = cr * my - sr * mz
    yaw = np.arctan2(h_x, h_y) - declination
    yaw = np.arctan2(np.sin(yaw), np.cos(yaw))
    if m.ndim == 1:
        return float(yaw)
    return yaw


def dip_from_mag(mag, roll: float, pitch: float) -> float:
    """Dip (inclination) rad of a body-frame field reading: its angle below the horizon, positive down.

    ``mag`` (3,) any unit, calibrated; ``roll`` and ``pitch`` the body's attitude. With the yaw it is
    the field's direction in the world; with its magnitude, a check that the field is the Earth's
    (a steel object nearby changes both: :mod:`server.runtime.estimation.magcheck`).

    >>> round(math.degrees(dip_from_mag((0.0, 25.0, -43.30127), 0.0, 0.0)), 4)     # facing east, 60° dip
    60.0
    >>> R = rotation_zyx(0.2, -0.3, 1.0)
    >>> round(math.degrees(dip_from_mag(R.T @ [0.0, 25.0, -43.30127], 0.2, -0.3)), 4)   # tilted: the same
    60.0
    """
    mx, my, mz = (float(v) for v in mag)
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    # world "up" in body axes is the third row of R_world_body: (−sin p, cos p·sin r, cos p·cos r)
    up = -sp * mx + cp * sr * my + cp * cr * mz
    norm = math.sqrt(mx * mx + my * my + mz * mz)
    return math.asin(max(-1.0, min(1.0, -up / norm))) if norm > 0.0 else math.nan


def compass_heading_deg(yaw: float) -> float:
    """Compass heading in degrees [0, 360) for display: (90° − yaw) mod 360°, 0 = north, 90 = east.

    >>> compass_heading_deg(0.0), compass_heading_deg(math.pi / 2), compass_heading_deg(-math.pi / 2)
    (90.0, 0.0, 180.0)
    """
    return (90.0 - math.degrees(yaw)) % 360.0


class AttitudeFilter:
    """Complementary filter on SO(3) (Mahony style) fusing gyro, accelerometer and magnetometer.

    Each :meth:`update` integrates the bias-corrected gyro rate, then pulls the
    estimate towards the tilt seen by the accelerometer (rate ``k_acc`` 1/s) and
    the yaw seen by the magnetometer (rate ``k_mag`` 1/s); ``k_bias`` (1/s²)
    integrates the same errors into a gyro bias estimate. The magnetometer only
    corrects yaw (its error is taken about world z), so a disturbed field never
    tilts the estimate. The accelerometer weight fades linearly to zero as
    ``| |acc| − g |`` grows to ``acc_gate·g``, so manoeuvres do not tilt it either.
    The bias is only learnt while the estimate agrees with the sensors to within
    ``bias_gate`` (sine of the angle, ~3°), so start-up transients do not wind it up.

    The first update initialises from accelerometer tilt and magnetometer yaw
    (yaw 0 without a magnetometer). Inputs: ``acc`` specific force (m/s², body),
    ``gyro`` (rad/s, body), ``mag`` (any unit, body, calibrated) or None.

    >>> f = AttitudeFilter()
    >>> R = rotation_zyx(0.2, 0.1, -1.0)
    >>> for _ in range(10):
    ...     rpy = f.update(0.01, R.T @ [0, 0, 9.81], [0.0, 0.0, 0.0], R.T @ [0, 20e-6, -40e-6])
    >>> [round(v, 6) for v in rpy]
    [0.2, 0.1, -1.0]
    """

    def __init__(
        self,
        k_acc: float = 2.0,
        k_mag: float = 1.0,
        k_bias: float = 0.2,
        declination: float = 0.0,
        gravity: float = 9.80665,
        acc_gate: float = 0.2,
        bias_gate: float = 0.05,
    ) -> None:
        if min(k_acc, k_mag, k_bias) < 0.0 or gravity <= 0.0 or acc_gate <= 0.0:
            raise ValueError("gains must be >= 0, gravity and acc_gate > 0")
        self.k_acc = float(k_acc)
        self.k_mag = float(k_mag)
        self.k_bias = float(k_bias)
        self.declination = float(declination)
        self.gravity = float(gravity)
        self.acc_gate = float(acc_gate)
        self.bias_gate = float(bias_gate)
        # Horizontal direction of magnetic north in the world (ENU).
        self._north = (math.sin(self.declination), math.cos(self.declination))
        self.reset()

    def reset(self, keep_bias: bool = False) -> None:
        """Forget the estimate: the next update re-initialises from accelerometer and magnetometer.
        ``keep_bias``: keep the gyro bias learnt so far (it is the gyro's, whatever else changed).

        >>> f = AttitudeFilter(); f.reset(); f.initialised
        False
        """
        # Unit quaternion (w, x, y, z) of R_world_body, kept in plain floats: at 3×3 sizes numpy's
        # per-call overhead dominates and this runs every tick of a loop that must hold 1 kHz.
        self._q = (1.0, 0.0, 0.0, 0.0)
        if not keep_bias or not hasattr(self, "_bias"):
            self._bias = [0.0, 0.0, 0.0]
        self.initialised = False

    def observe_at_rest(self, gyro, dt_s: float, tau_s: float = 2.0) -> None:
        """The body is known to be still (its wheels are): the gyro reads its bias alone, so pull the bias
        estimate toward the reading with time constant ``tau_s`` (a zero-angular-rate update). Unlike the
        magnetometer's slow correction this needs no clean field, so the bias stays learnt where the
        compass is disturbed and the gyro must carry the heading.

        >>> f = AttitudeFilter()
        >>> for _ in range(2000):
        ...     f.observe_at_rest((0.001, -0.002, 0.004), 0.01)
        >>> [round(float(v), 6) for v in f.gyro_bias]
        [0.001, -0.002, 0.004]
        """
        k = min(1.0, dt_s / tau_s)
        b = self._bias
        self._bias = [b[0] + k * (float(gyro[0]) - b[0]), b[1] + k * (float(gyro[1]) - b[1]),
                      b[2] + k * (float(gyro[2]) - b[2])]

    @property
    def R_world_body(self) -> np.ndarray:
        """Current attitude as a rotation matrix (3, 3), body to world.

        >>> AttitudeFilter().R_world_body.tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        """
        w, x, y, z = self._q
        return np.array(
            [
                [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
                [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
                [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
            ]
        )

    @property
    def gyro_bias(self) -> np.ndarray:
        """Estimated gyro bias (3,) rad/s, already subtracted from the gyro input.

        >>> AttitudeFilter().gyro_bias.tolist()
        [0.0, 0.0, 0.0]
        """
        return np.array(self._bias)

    def _initialise(self, acc: np.ndarray, mag: np.ndarray | None) -> None:
        roll, pitch = roll_pitch_from_accel(acc) if np.any(acc) else (0.0, 0.0)
        yaw = 0.0
        if mag is not None and np.any(mag):
            yaw = yaw_from_mag(mag, roll, pitch, self.declination)
        cr, sr = math.cos(0.5 * roll), math.sin(0.5 * roll)
        cp, sp = math.cos(0.5 * pitch), math.sin(0.5 * pitch)
        cy, sy = math.cos(0.5 * yaw), math.sin(0.5 * yaw)
        # q = qz(yaw) ⊗ qy(pitch) ⊗ qx(roll)
        self._q = (
            cy * cp * cr + sy * sp * sr,
            cy * cp * sr - sy * sp * cr,
            cy * sp * cr + sy * cp * sr,
            sy * cp * cr - cy * sp * sr,
        )
        self.initialised = True

    @staticmethod
    def _rotate(q: tuple[float, float, float, float], wx: float, wy: float, wz: float):
        """q ⊗ exp(w/2): turn q by the body-frame rotation vector (wx, wy, wz), renormalised."""
        angle = math.sqrt(wx * wx + wy * wy + wz * wz)
        if angle < 1e-12:
            c, k = 1.0, 0.5
        else:
            c, k = math.cos(0.5 * angle), math.sin(0.5 * angle) / angle
        dw, dx, dy, dz = c, k * wx, k * wy, k * wz
        w, x, y, z = q
        nw = w * dw - x * dx - y * dy - z * dz
        nx = w * dx + x * dw + y * dz - z * dy
        ny = w * dy - x * dz + y * dw + z * dx
        nz = w * dz + x * dy - y * dx + z * dw
        n = 1.0 / math.sqrt(nw * nw + nx * nx + ny * ny + nz * nz)
        return nw * n, nx * n, ny * n, nz * n

    @property
    def euler(self) -> tuple[float, float, float]:
        """Current (roll, pitch, yaw) rad.

        >>> AttitudeFilter().euler
        (0.0, 0.0, 0.0)
        """
        w, x, y, z = self._q
        r20 = 2.0 * (x * z - w * y)
        r21, r22 = 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)
        if math.hypot(r21, r22) < 1e-9:
            return euler_zyx(self.R_world_body)
        pitch = math.asin(max(-1.0, min(1.0, -r20))) + 0.0
        yaw = math.atan2(2.0 * (x * y + w * z), 1.0 - 2.0 * (y * y + z * z))
        return math.atan2(r21, r22), pitch, yaw

    def set_yaw(self, yaw: float) -> None:
        """Turn the estimate about world z so that its yaw is ``yaw`` (rad), roll and pitch kept (e.g. back to
        the heading of the last clean magnetometer reading, carried by the gyro, when a disturbance that
        crept in is finally recognised).

        >>> f = AttitudeFilter()
        >>> R = rotation_zyx(0.1, -0.2, 0.5)
        >>> _ = f.update(0.01, R.T @ [0, 0, 9.81], [0.0, 0.0, 0.0], R.T @ [0, 20e-6, -40e-6])
        >>> f.set_yaw(-1.0)
        >>> [round(v, 6) for v in f.euler]
        [0.1, -0.2, -1.0]
        """
        if not self.initialised:
            return
        turn = 0.5 * (float(yaw) - self.euler[2])
        c, s = math.cos(turn), math.sin(turn)
        w, x, y, z = self._q
        # q_z(turn) ⊗ q: a rotation about world z applied on the left
        self._q = (c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w)

    def update(self, dt_s: float, acc, gyro, mag=None) -> tuple[float, float, float]:
        """Advance by ``dt_s`` seconds with one sample of each sensor; returns (roll, pitch, yaw) rad.

        >>> f = AttitudeFilter(k_acc=0.0, k_mag=0.0)
        >>> for _ in range(101):            # the first sample only initialises
        ...     _ = f.update(0.01, [0, 0, 9.81], [0.0, 0.0, 0.5])
        >>> round(f.euler[2], 6)            # 1 s at 0.5 rad/s, pure gyro integration
        0.5
        """
        ax, ay, az = (float(v) for v in acc)
        gx, gy, gz = (float(v) for v in gyro)
        if not self.initialised:
            self._initialise(np.array([ax, ay, az]), None if mag is None else np.asarray(mag, dtype=float).reshape(3))
            return self.euler
        if not dt_s > 0.0:
            raise ValueError(f"dt_s must be positive, got {dt_s}")
        b = self._bias
        # Predict with the gyro first, so the corrections compare sensors and estimate at the same instant.
        q = self._rotate(self._q, (gx - b[0]) * dt_s, (gy - b[1]) * dt_s, (gz - b[2]) * dt_s)
        w, x, y, z = q
        # Third row of R_world_body: world "up" in body axes.
        ux, uy, uz = 2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)
        ex = ey = ez = 0.0
        misalignment = 0.0  # sine of the largest angle between estimate and measurement
        acc_norm = math.sqrt(ax * ax + ay * ay + az * az)
        if acc_norm > 0.0 and self.k_acc > 0.0:
            weight = 1.0 - abs(acc_norm - self.gravity) / (self.acc_gate * self.gravity)
            if weight > 0.0:
                fx, fy, fz = ax / acc_norm, ay / acc_norm, az / acc_norm
                # Measured up × estimated up: rotating by it brings the estimate onto the measurement.
                tx, ty, tz = fy * uz - fz * uy, fz * ux - fx * uz, fx * uy - fy * ux
                misalignment = math.sqrt(tx * tx + ty * ty + tz * tz)
                k = weight * self.k_acc
                ex, ey, ez = k * tx, k * ty, k * tz
        if mag is not None and self.k_mag > 0.0:
            mx, my, mz = (float(v) for v in mag)
            # The measured field in the estimated world frame (rows 0 and 1 of R_world_body).
            hx = (1.0 - 2.0 * (y * y + z * z)) * mx + 2.0 * (x * y - w * z) * my + 2.0 * (x * z + w * y) * mz
            hy = 2.0 * (x * y + w * z) * mx + (1.0 - 2.0 * (x * x + z * z)) * my + 2.0 * (y * z - w * x) * mz
            h_norm = math.hypot(hx, hy)
            if h_norm > 0.0:
                # Signed angle from the measured to the expected horizontal north, about world z.
                err_z = (hx * self._north[1] - hy * self._north[0]) / h_norm
                misalignment = max(misalignment, abs(err_z))
                k = self.k_mag * err_z
                ex, ey, ez = ex + k * ux, ey + k * uy, ez + k * uz  # world z expressed in body axes
        # Learn the bias only near convergence: a large start-up error would wind the integrator up
        # and take tens of seconds to unwind at a gain slow enough to reject noise.
        if self.k_bias > 0.0 and misalignment < self.bias_gate:
            kb = self.k_bias * dt_s
            self._bias = [b[0] - kb * ex, b[1] - kb * ey, b[2] - kb * ez]
        self._q = self._rotate(q, ex * dt_s, ey * dt_s, ez * dt_s)
        return self.euler
