"""Planar pose (x, y, yaw) of a wheeled robot: wheel odometry fused with UWB fixes.

An extended Kalman filter on the world-frame state ``[x, y, yaw]`` (m, m, rad;
world x east, y north, yaw the ENU yaw of body x):

- :meth:`PoseEstimator.predict` dead-reckons with the body twist from the
  wheel encoders (exact arc, :func:`robotics.kinematics.diffdrive.integrate_twist`)
  and grows the covariance with the distance and angle travelled (wheel slip);
- :meth:`PoseEstimator.update_uwb` corrects with an (x, y) fix from
  :func:`robotics.estimation.uwb.trilaterate`, after an innovation gate that
  drops NLOS outliers;
- :meth:`PoseEstimator.update_yaw` (or ``predict(..., yaw=...)``) corrects with an
  absolute yaw, e.g. from :class:`robotics.estimation.attitude.AttitudeFilter`.

Without a yaw source, yaw becomes observable from successive UWB fixes once the
robot drives: the filter's cross-covariance between heading and position does it.

>>> est = PoseEstimator()
>>> for _ in range(100):
...     est.predict(0.01, 0.5, 0.0)
>>> [round(v, 6) for v in est.pose]
[0.5, 0.0, 0.0]
>>> est.update_uwb((0.52, 0.0))
True
"""

from __future__ import annotations

import math

import numpy as np

from robotics.kinematics.diffdrive import integrate_twist
from robotics.angles import wrap_pi

__all__ = ["PoseEstimator"]




class PoseEstimator:
    """EKF fusing wheel odometry, UWB (x, y) fixes and optional absolute yaw.

    Parameters (all standard deviations):

    - ``x, y, yaw``: initial pose; ``initial_position_sigma_m`` (default 10 m,
      so the first UWB fix takes over) and ``initial_yaw_sigma_rad`` (default pi).
    - ``odom_sigma_m_per_sqrt_m``: position random walk per √metre driven (slip).
    - ``odom_yaw_sigma_rad_per_sqrt_rad``: yaw random walk per √radian turned.
    - ``drift_sigma_m_per_sqrt_s``, ``drift_yaw_sigma_rad_per_sqrt_s``: random walk
      per √second regardless of motion (pushes, unmodelled slip).
    - ``uwb_sigma_m``: default noise of one UWB fix per axis.
    - ``yaw_sigma_rad``: default noise of an absolute yaw.
    - ``gate_chi2``: Mahalanobis² gate for UWB fixes (2 d.o.f.; 13.8 = 99.9 %).
      After ``max_rejections`` consecutive rejections the next fix is accepted
      anyway with the position covariance reset, so a filter that has drifted
      (or was kidnapped) recovers instead of rejecting forever.

    >>> est = PoseEstimator(x=1.0, y=2.0, yaw=0.5, initial_position_sigma_m=0.01)
    >>> est.update_uwb((5.0, 5.0))      # 400 σ away: gated out as an outlier
    False
    """

    def __init__(
        self,
        x: float = 0.0,
        y: float = 0.0,
        yaw: float = 0.0,
        *,
        initial_position_sigma_m: float = 10.0,
        initial_yaw_sigma_rad: float = math.pi,
        odom_sigma_m_per_sqrt_m: float = 0.05,
        odom_yaw_sigma_rad_per_sqrt_rad: float = 0.05,
        drift_sigma_m_per_sqrt_s: float = 0.01,
        drift_yaw_sigma_rad_per_sqrt_s: float = 0.005,
        uwb_sigma_m: float = 0.07,
        yaw_sigma_rad: float = 0.03,
        gate_chi2: float = 13.8,
        max_rejections: int = 10,
    ) -> None:
        for name, value in (
            ("initial_position_sigma_m", initial_position_sigma_m),
            ("initial_yaw_sigma_rad", initial_yaw_sigma_rad),
            ("uwb_sigma_m", uwb_sigma_m),
            ("yaw_sigma_rad", yaw_sigma_rad),
            ("gate_chi2", gate_chi2),
        ):
            if not value > 0.0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.state = np.array([float(x), float(y), wrap_pi(float(yaw))])
        self.covariance = np.diag(
            [initial_position_sigma_m**2, initial_position_sigma_m**2, initial_yaw_sigma_rad**2]
        )
        self.odom_var_per_m = odom_sigma_m_per_sqrt_m**2
        self.odom_yaw_var_per_rad = odom_yaw_sigma_rad_per_sqrt_rad**2
        self.drift_var_per_s = drift_sigma_m_per_sqrt_s**2
        self.drift_yaw_var_per_s = drift_yaw_sigma_rad_per_sqrt_s**2
        self.uwb_sigma_m = float(uwb_sigma_m)
        self.yaw_sigma_rad = float(yaw_sigma_rad)
        self.gate_chi2 = float(gate_chi2)
        self.max_rejections = int(max_rejections)
        self.rejections = 0

    @property
    def pose(self) -> tuple[float, float, float]:
        """Current (x, y, yaw) in m, m, rad.

        >>> PoseEstimator(1.0, 2.0, 0.5).pose
        (1.0, 2.0, 0.5)
        """
        return float(self.state[0]), float(self.state[1]), float(self.state[2])

    @property
    def position_sigma_m(self) -> float:
        """Root of the mean position variance (m): a one-number confidence for the dashboard.

        >>> PoseEstimator(initial_position_sigma_m=0.2).position_sigma_m
        0.2
        """
        return math.sqrt(0.5 * (self.covariance[0, 0] + self.covariance[1, 1]))

    def predict(self, dt_s: float, v: float, omega: float, yaw: float | None = None) -> None:
        """Dead-reckon ``dt_s`` seconds at body speed ``v`` (m/s) and turn rate ``omega`` (rad/s).

        ``v`` and ``omega`` come from the wheel encoders
        (:func:`robotics.kinematics.diffdrive.body_twist`); ``omega`` may come
        from the gyro instead. If ``yaw`` (rad) is given it is fused right after
        as an absolute heading (:meth:`update_yaw`).

        >>> est = PoseEstimator(yaw=math.pi / 2)
        >>> est.predict(1.0, 1.0, 0.0)
        >>> [round(v, 6) for v in est.pose]
        [0.0, 1.0, 1.570796]
        """
        if not dt_s >= 0.0:
            raise ValueError(f"dt_s must be >= 0, got {dt_s}")
        x, y, th = self.state
        nx, ny, nth = integrate_twist(x, y, th, v, omega, dt_s)
        dist = abs(v) * dt_s
        mid = th + 0.5 * omega * dt_s
        # Jacobian of the motion w.r.t. the state (midpoint approximation of the arc).
        f = np.array([[1.0, 0.0, -v * dt_s * math.sin(mid)], [0.0, 1.0, v * dt_s * math.cos(mid)], [0.0, 0.0, 1.0]])
        q_xy = self.odom_var_per_m * dist + self.drift_var_per_s * dt_s
        q_th = self.odom_yaw_var_per_rad * abs(omega) * dt_s + self.drift_yaw_var_per_s * dt_s
        self.covariance = f @ self.covariance @ f.T + np.diag([q_xy, q_xy, q_th])
        self.state = np.array([nx, ny, nth])
        if yaw is not None:
            self.update_yaw(yaw)

    def _correct(self, h: np.ndarray, innovation: np.ndarray, r: np.ndarray) -> None:
        s = h @ self.covariance @ h.T + r
        k = self.covariance @ h.T @ np.linalg.inv(s)
        self.state = self.state + k @ innovation
        self.state[2] = wrap_pi(float(self.state[2]))
        # Joseph form: stays symmetric positive definite whatever the rounding.
        i_kh = np.eye(3) - k @ h
        self.covariance = i_kh @ self.covariance @ i_kh.T + k @ r @ k.T

    def update_uwb(self, position_xy, sigma_m: float | None = None) -> bool:
        """Correct with a UWB fix ``position_xy`` = (x, y) m; returns False if gated out.

        ``sigma_m`` overrides ``uwb_sigma_m`` for this fix. A fix with a NaN is
        ignored (returns False, not counted as a rejection).

        >>> est = PoseEstimator()
        >>> est.update_uwb((3.0, 4.0)), [round(v, 3) for v in est.pose[:2]]
        (True, [3.0, 4.0])
        """
        z = np.asarray(position_xy, dtype=float).reshape(-1)[:2]
        if not np.all(np.isfinite(z)):
            return False
        sigma = self.uwb_sigma_m if sigma_m is None else float(sigma_m)
        h = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
        r = np.eye(2) * sigma**2
        innovation = z - self.state[:2]
        s = self.covariance[:2, :2] + r
        d2 = float(innovation @ np.linalg.solve(s, innovation))
        if d2 > self.gate_chi2:
            self.rejections += 1
            if self.rejections <= self.max_rejections:
                return False
            # Too many in a row: trust UWB again from scratch rather than the drifted estimate.
            self.covariance[:2, :] = 0.0
            self.covariance[:, :2] = 0.0
            self.covariance[0, 0] = self.covariance[1, 1] = float(innovation @ innovation) + sigma**2
        self.rejections = 0
        self._correct(h, innovation, r)
        return True

    def update_yaw(self, yaw: float, sigma_rad: float | None = None) -> None:
        """Correct with an absolute yaw (rad, ENU), e.g. from the attitude filter.

        >>> est = PoseEstimator()
        >>> est.update_yaw(1.0, sigma_rad=1e-6)
        >>> round(est.pose[2], 6)
        1.0
        """
        sigma = self.yaw_sigma_rad if sigma_rad is None else float(sigma_rad)
        # Scalar measurement of one state: the Kalman update needs no matrix inverse.
        p = self.covariance
        s = float(p[2, 2]) + sigma * sigma
        k = p[:, 2] / s
        self.state = self.state + k * wrap_pi(float(yaw) - float(self.state[2]))
        self.state[2] = wrap_pi(float(self.state[2]))
        p = p - np.outer(k, k) * s
        self.covariance = 0.5 * (p + p.T)
