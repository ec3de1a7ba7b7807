"""Virtual 3-axis magnetometer: the Earth's field seen from a body, with iron distortion and noise.

World frame ENU (x east, y north, z up). Magnetic north lies ``declination``
rad east of true north; the field dips ``dip`` rad below the horizon (positive
in the northern hemisphere)::

    B_world = B · (cos(dip)·sin(decl), cos(dip)·cos(decl), −sin(dip))

The sensor reads ``soft_iron · (R_world_bodyᵀ · (B_world + B_disturbance)) + hard_iron + drift + noise``,
in tesla, body frame: ``B_disturbance`` is the field of the world's steel objects at the sensor (world frame)
and ``drift`` a body-frame hard-iron drift (both from :mod:`sim.magnetic`, given per reading; zero when not). Hard iron is a constant offset (magnetised parts riding
on the robot); soft iron a per-axis gain, (3,), or a full 3×3 matrix. That is
the distortion :func:`robotics.estimation.magcal.fit_ellipsoid` undoes (for the
per-axis case).

>>> mag = Magnetometer(field_strength_t=50e-6, dip=0.0)
>>> np.round(mag.read(np.eye(3)) * 1e6, 6).tolist()        # facing east: north is to the left (+y)
[0.0, 50.0, 0.0]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Magnetometer"]


class Magnetometer:
    """Field model plus sensor errors; ``read`` gives one sample.

    ``field_strength_t`` T (50 µT is typical), ``declination`` and ``dip`` rad,
    ``hard_iron_t`` (3,) T, ``soft_iron`` (3,) gains or (3, 3), ``noise_sigma_t``
    T per axis per sample.

    >>> round(float(np.linalg.norm(Magnetometer(field_strength_t=48e-6).world_field)) * 1e6, 6)
    48.0
    """

    def __init__(
        self,
        field_strength_t: float = 50e-6,
        declination: float = 0.0,
        dip: float = math.radians(60.0),
        *,
        hard_iron_t=(0.0, 0.0, 0.0),
        soft_iron=(1.0, 1.0, 1.0),
        noise_sigma_t: float = 0.0,
    ) -> None:
        if not field_strength_t >= 0.0 or not noise_sigma_t >= 0.0:
            raise ValueError("field_strength_t and noise_sigma_t must be >= 0")
        self.field_strength_t = float(field_strength_t)
        self.declination = float(declination)
        self.dip = float(dip)
        self.hard_iron_t = np.asarray(hard_iron_t, dtype=float).reshape(3)
        soft = np.asarray(soft_iron, dtype=float)
        self.soft_iron = np.diag(soft.reshape(3)) if soft.size == 3 else soft.reshape(3, 3)
        self.noise_sigma_t = float(noise_sigma_t)
        cd = math.cos(self.dip)
        self.world_field = self.field_strength_t * np.array(
            [cd * math.sin(self.declination), cd * math.cos(self.declination), -math.sin(self.dip)]
        )

    def true_field(self, R_world_body) -> np.ndarray:
        """The undistorted field (3,) T in the body frame.

        >>> np.round(Magnetometer(dip=0.0).true_field(np.eye(3)) * 1e6, 6).tolist()
        [0.0, 50.0, 0.0]
        """
        return np.asarray(R_world_body, dtype=float).reshape(3, 3).T @ self.world_field

    def read(self, R_world_body, rng: np.random.Generator | None = None, *, disturbance_t=None,
             drift_t=None) -> np.ndarray:
        """One reading (3,) T in the body frame for attitude ``R_world_body``.

        ``rng`` (a seeded ``numpy.random.Generator``) is needed when ``noise_sigma_t > 0``;
        ``disturbance_t`` (3,) T world frame and ``drift_t`` (3,) T body frame are added when given.

        >>> m = Magnetometer(dip=0.0, hard_iron_t=(1e-6, 0, 0), noise_sigma_t=1e-9)
        >>> np.round(m.read(np.eye(3), np.random.default_rng(0)) * 1e6, 2).tolist()
        [1.0, 50.0, 0.0]
        >>> np.round(m.read(np.eye(3), np.random.default_rng(0), disturbance_t=(0, 5e-6, 0)) * 1e6, 2).tolist()
        [1.0, 55.0, 0.0]
        """
        if disturbance_t is None:
            field = self.true_field(R_world_body)
        else:
            field = np.asarray(R_world_body, dtype=float).reshape(3, 3).T @ (self.world_field + disturbance_t)
        reading = self.soft_iron @ field + self.hard_iron_t
        if drift_t is not None:
            reading = reading + drift_t
        if self.noise_sigma_t > 0.0:
            if rng is None:
                raise ValueError("noise_sigma_t > 0 needs rng, a seeded numpy.random.Generator")
            reading = reading + self.noise_sigma_t * rng.standard_normal(3)
        return reading
