"""Virtual UWB ranging: a tag's ranges to fixed anchors, with the errors seen in the field.

For each anchor, the true distance ``d`` becomes a raw range::

    d_path = d + nlos                       (nlos > 0 with probability nlos_probability)
    raw    = a + b·d_path + c·d_path² + noise,   noise ~ N(0, sigma_m²)

and is replaced by NaN with probability ``dropout_probability``. ``(a, b, c)`` is
the module's systematic distortion that seeds/002 removes with a quadratic fit
(:func:`robotics.estimation.uwb.fit_range_correction`). Non-line-of-sight paths
are longer, never shorter: the NLOS excess is exponential with mean ``nlos_bias_m``.

Deterministic: every call draws the same number of variates from the given
``numpy.random.Generator``, so a seed reproduces a run whatever is enabled.

>>> uwb = UwbRanger([[0, 0, 1.2], [5, 0, 1.2], [5, 8, 1.2], [0, 8, 1.2]], sigma_m=0.0)
>>> np.round(uwb.ranges([0.0, 0.0, 1.2], np.random.default_rng(0)), 6).tolist()
[0.0, 5.0, 9.433981, 8.0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["UwbRanger"]


class UwbRanger:
    """Anchors (N, 3) m in the world frame and the error model of the ranges.

    ``sigma_m`` white noise per range; ``nlos_probability`` and ``nlos_bias_m``
    (mean excess path); ``distortion`` = (a, b, c) in raw = a + b·d + c·d²;
    ``dropout_probability`` of a NaN range.

    >>> UwbRanger([[0, 0, 0]] * 4).anchors.shape
    (4, 3)
    """

    def __init__(
        self,
        anchors,
        sigma_m: float = 0.05,
        *,
        nlos_probability: float = 0.0,
        nlos_bias_m: float = 0.3,
        distortion=(0.0, 1.0, 0.0),
        dropout_probability: float = 0.0,
    ) -> None:
        self.anchors = np.array(anchors, dtype=float)
        if self.anchors.ndim != 2 or self.anchors.shape[1] != 3 or len(self.anchors) < 1:
            raise ValueError(f"anchors must be (N, 3), got shape {self.anchors.shape}")
        if not sigma_m >= 0.0 or not nlos_bias_m >= 0.0:
            raise ValueError("sigma_m and nlos_bias_m must be >= 0")
        for name, p in (("nlos_probability", nlos_probability), ("dropout_probability", dropout_probability)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        self.sigma_m = float(sigma_m)
        self.nlos_probability = float(nlos_probability)
        self.nlos_bias_m = float(nlos_bias_m)
        self.distortion = tuple(float(v) for v in distortion)
        if len(self.distortion) != 3:
            raise ValueError(f"distortion must be (a, b, c), got {distortion}")
        self.dropout_probability = float(dropout_probability)

    def true_ranges(self, position) -> np.ndarray:
        """Exact distances (N,) m from ``position`` (3,) to each anchor.

        >>> UwbRanger([[3, 4, 0]]).true_ranges([0, 0, 0]).tolist()
        [5.0]
        """
        return np.linalg.norm(self.anchors - np.asarray(position, dtype=float).reshape(3), axis=1)

    def ranges(self, position, rng: np.random.Generator | None = None) -> np.ndarray:
        """One set of raw ranges (N,) m from the tag at ``position`` (3,) m; NaN marks a dropout.

        ``rng`` is a seeded ``numpy.random.Generator``; it may be None only when
        the model has no randomness (all sigmas and probabilities zero).

        >>> uwb = UwbRanger([[0, 0, 0], [10, 0, 0]], sigma_m=0.0, distortion=(0.1, 1.0, 0.01))
        >>> np.round(uwb.ranges([2.0, 0.0, 0.0]), 6).tolist()
        [2.14, 8.74]
        """
        d = self.true_ranges(position)
        n = len(d)
        random = self.sigma_m > 0.0 or self.nlos_probability > 0.0 or self.dropout_probability > 0.0
        if rng is None:
            if random:
                raise ValueError("a noisy UwbRanger needs rng, a seeded numpy.random.Generator")
            noise, nlos_u, excess, drop_u = np.zeros(n), np.ones(n), np.zeros(n), np.ones(n)
        else:
            noise = rng.standard_normal(n)
            nlos_u = rng.random(n)
            excess = rng.exponential(1.0, n)
            drop_u = rng.random(n)
        path = d + np.where(nlos_u < self.nlos_probability, self.nlos_bias_m * excess, 0.0)
        a, b, c = self.distortion
        raw = a + b * path + c * path**2 + self.sigma_m * noise
        return np.where(drop_u < self.dropout_probability, np.nan, raw)
