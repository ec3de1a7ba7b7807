"""Virtual UWB ranging: a tag's ranges to fixed anchors, with the errors seen in the field.

For each anchor, the true distance ``d`` becomes a raw range::

    d_path = d + nlos + blocked + multipath(x, y)
    raw    = a + b·d_path + c·d_path² + noise + outlier

and is replaced by NaN with probability ``dropout_probability``. ``(a, b, c)`` is
the module's systematic distortion that seeds/002 removes with a quadratic fit
(:func:`robotics.estimation.uwb.fit_range_correction`). The error terms:

* ``nlos``: a random longer path now and then (probability ``nlos_probability``,
  exponential excess of mean ``nlos_bias_m``), wherever the tag is;
* ``blocked``: non-line-of-sight **by geometry** — when the straight line from the tag
  to the anchor crosses ``L`` metres of an obstacle (the caller gives ``L`` per anchor,
  :meth:`sim.world.World.penetration_m`), the signal is slower in the material and
  the first path weaker: ``nlos_excess_per_m · L + nlos_sigma_m · |N(0, 1)|``.
  Positive, and mostly static: it stays while the tag stays in the obstacle's shadow;
* ``multipath``: a static, position-dependent bias per anchor (reflections shift the
  detected leading edge; standing still does not average it away): a random smooth
  field over the floor of standard deviation ``multipath_m`` and correlation length
  ``multipath_length_m`` (a sum of :data:`MULTIPATH_WAVES` plane waves per anchor, drawn
  once by :meth:`UwbRanger.seed_multipath`);
* ``noise``: white, ``sigma_m`` the scale of a Student-t with ``noise_dof`` degrees of
  freedom (heavier tails than a Gaussian, whose std it exceeds by ``√(ν/(ν−2))``;
  ``noise_dof = inf``: Gaussian of std ``sigma_m``);
* ``outlier``: with probability ``outlier_probability`` a late peak taken for the first
  path, uniform in ``[0, outlier_m]``.

Deterministic: every call draws the same number of variates from the given
``numpy.random.Generator`` whatever the probabilities, so a seed reproduces a run; the
field terms (``noise_dof``, outliers, ``nlos_sigma_m``) draw theirs after the others and
only when one of them is on, so switching them off keeps the old sequence exactly.

>>> uwb = UwbRanger([[0, 0, 1.2], [5, 0, 1.2], [5, 8, 1.2], [0, 8, 1.2]], sigma_m=0.0)
>>> np.round(uwb.ranges([0.0, 0.0, 1.2], np.random.default_rng(0)), 6).tolist()
[0.0, 5.0, 9.433981, 8.0]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MULTIPATH_WAVES", "UwbRanger"]

#: plane waves summed per anchor for the multipath field (8: close enough to a Gaussian field, cheap)
MULTIPATH_WAVES = 8


class UwbRanger:
    """Anchors (N, 3) m in the world frame and the error model of the ranges.

    ``sigma_m`` white noise per range; ``nlos_probability`` and ``nlos_bias_m``
    (mean excess path); ``distortion`` = (a, b, c) in raw = a + b·d + c·d²;
    ``dropout_probability`` of a NaN range; the field terms of the module docstring
    (``noise_dof``, ``outlier_probability``, ``outlier_m``, ``nlos_excess_per_m``,
    ``nlos_sigma_m``, ``multipath_m``, ``multipath_length_m``) all off by default.

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
        noise_dof: float = math.inf,
        outlier_probability: float = 0.0,
        outlier_m: float = 0.0,
        nlos_excess_per_m: float = 0.0,
        nlos_sigma_m: float = 0.0,
        multipath_m: float = 0.0,
        multipath_length_m: float = 1.0,
    ) -> None:
        self.anchors = np.array(anchors, dtype=float)
        if self.anchors.ndim != 2 or self.anchors.shape[1] != 3 or len(self.anchors) < 1:
            raise ValueError(f"anchors must be (N, 3), got shape {self.anchors.shape}")
        if not sigma_m >= 0.0 or not nlos_bias_m >= 0.0:
            raise ValueError("sigma_m and nlos_bias_m must be >= 0")
        for name, v in (("outlier_m", outlier_m), ("nlos_excess_per_m", nlos_excess_per_m),
                        ("nlos_sigma_m", nlos_sigma_m), ("multipath_m", multipath_m)):
            if not v >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        if not noise_dof > 2.0:
            raise ValueError(f"noise_dof must be > 2 (a finite variance), got {noise_dof}")
        if not multipath_length_m > 0.0:
            raise ValueError(f"multipath_length_m must be > 0, got {multipath_length_m}")
        for name, p in (("nlos_probability", nlos_probability), ("dropout_probability", dropout_probability),
                        ("outlier_probability", outlier_probability)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        self.sigma_m = float(sigma_m)
        self.nlos_probability = float(nlos_probability)
        self.nlos_bias_m = float(nlos_bias_m)
        self.distortion = tuple(float(v) for v in distortion)
        if len(self.distortion) != 3:
            raise ValueError(f"distortion must be (a, b, c), got {distortion}")
        self.dropout_probability = float(dropout_probability)
        self.noise_dof = float(noise_dof)
        self.outlier_probability = float(outlier_probability)
        self.outlier_m = float(outlier_m)
        self.nlos_excess_per_m = float(nlos_excess_per_m)
        self.nlos_sigma_m = float(nlos_sigma_m)
        self.multipath_m = float(multipath_m)
        self.multipath_length_m = float(multipath_length_m)
        #: the field terms that draw variates of their own (off: the pre-field sequence, exactly)
        self.field_draws = math.isfinite(self.noise_dof) or self.outlier_probability > 0.0 or self.nlos_sigma_m > 0.0
        # multipath plane waves per anchor: wave vectors (N, K, 2) rad/m and phases (N, K); none until seeded
        self._waves: tuple[np.ndarray, np.ndarray] | None = None

    def seed_multipath(self, rng: np.random.Generator) -> None:
        """Draw the static multipath field (once per run; nothing to draw when ``multipath_m`` is 0).

        >>> uwb = UwbRanger([[0, 0, 1]] * 4, multipath_m=0.05, multipath_length_m=0.5)
        >>> uwb.seed_multipath(np.random.default_rng(1))
        >>> b = uwb.multipath_bias([1.0, 2.0, 0.1])
        >>> b.shape, bool(np.all(b == uwb.multipath_bias([1.0, 2.0, 0.5])))   # a function of (x, y) only
        ((4,), True)
        """
        if self.multipath_m <= 0.0:
            self._waves = None
            return
        n, k = len(self.anchors), MULTIPATH_WAVES
        angle = rng.uniform(0.0, 2.0 * math.pi, (n, k))
        wavenumber = 2.0 * math.pi / self.multipath_length_m
        self._waves = (wavenumber * np.stack([np.cos(angle), np.sin(angle)], axis=-1),
                       rng.uniform(0.0, 2.0 * math.pi, (n, k)))

    def multipath_bias(self, position) -> np.ndarray:
        """The static multipath bias (N,) m at ``position`` (3,) m, or (M, N) at positions (M, 3) (zeros until
        :meth:`seed_multipath`)."""
        xy = np.asarray(position, dtype=float)[..., :2]
        if self._waves is None:
            return np.zeros(xy.shape[:-1] + (len(self.anchors),))
        vectors, phases = self._waves
        # (..., N, K): each anchor's waves at each position
        arg = (xy @ vectors.reshape(-1, 2).T).reshape(xy.shape[:-1] + phases.shape) + phases
        return self.multipath_m * math.sqrt(2.0 / MULTIPATH_WAVES) * np.cos(arg).sum(axis=-1)

    def true_ranges(self, position) -> np.ndarray:
        """Exact distances (N,) m from ``position`` (3,) to each anchor.

        >>> UwbRanger([[3, 4, 0]]).true_ranges([0, 0, 0]).tolist()
        [5.0]
        """
        return np.linalg.norm(self.anchors - np.asarray(position, dtype=float).reshape(3), axis=1)

    def ranges(self, position, rng: np.random.Generator | None = None, *, penetration_m=None) -> np.ndarray:
        """One set of raw ranges (N,) m from the tag at ``position`` (3,) m; NaN marks a dropout.

        ``rng`` is a seeded ``numpy.random.Generator``; it may be None only when
        the model has no randomness (all sigmas and probabilities zero).
        ``penetration_m`` (N,): metres of obstacle the line to each anchor crosses (None: none).

        >>> uwb = UwbRanger([[0, 0, 0], [10, 0, 0]], sigma_m=0.0, distortion=(0.1, 1.0, 0.01))
        >>> np.round(uwb.ranges([2.0, 0.0, 0.0]), 6).tolist()
        [2.14, 8.74]
        """
        position = np.asarray(position, dtype=float).reshape(1, 3)
        blocked = None if penetration_m is None else np.asarray(penetration_m, dtype=float).reshape(1, -1)
        return self.ranges_batch(position, rng, penetration_m=blocked)[0]

    def ranges_batch(self, positions, rng: np.random.Generator | None = None, *, penetration_m=None) -> np.ndarray:
        """Raw ranges (M, N) m from the tag at each of ``positions`` (M, 3) m, each row an independent measurement
        (the model of :meth:`ranges`, vectorised: the fit of bench/fit_uwb.py draws 10⁵ measurements a second).

        :meth:`ranges` is this with M = 1, so both draw the same sequence for one measurement; M rows draw the
        (M, N) arrays at once, which is not the sequence of M calls (the same distribution).
        ``penetration_m`` (M, N) or None.

        >>> uwb = UwbRanger([[0, 0, 0], [10, 0, 0]], sigma_m=0.0)
        >>> uwb.ranges_batch([[2.0, 0.0, 0.0], [4.0, 0.0, 0.0]]).tolist()
        [[2.0, 8.0], [4.0, 6.0]]
        """
        p = np.asarray(positions, dtype=float).reshape(-1, 3)
        d = np.linalg.norm(p[:, None, :] - self.anchors[None, :, :], axis=2)
        shape = d.shape
        random = (self.sigma_m > 0.0 or self.nlos_probability > 0.0 or self.dropout_probability > 0.0
                  or self.field_draws)
        if rng is None:
            if random:
                raise ValueError("a noisy UwbRanger needs rng, a seeded numpy.random.Generator")
            noise, nlos_u, excess, drop_u = np.zeros(shape), np.ones(shape), np.zeros(shape), np.ones(shape)
        else:
            noise = rng.standard_normal(shape)
            nlos_u = rng.random(shape)
            excess = rng.exponential(1.0, shape)
            drop_u = rng.random(shape)
        path = d + np.where(nlos_u < self.nlos_probability, self.nlos_bias_m * excess, 0.0)
        if self.field_draws and rng is not None:
            # drawn after the others, only with a field term on: the old sequence is kept without them
            spread = np.abs(rng.standard_normal(shape))
            out_u, out_mag = rng.random(shape), rng.random(shape)
            if math.isfinite(self.noise_dof):  # Student-t: a normal over the root of a scaled chi-square
                noise = noise / np.sqrt(rng.chisquare(self.noise_dof, shape) / self.noise_dof)
        else:
            spread, out_u, out_mag = np.zeros(shape), np.ones(shape), np.zeros(shape)
        if penetration_m is not None:
            blocked = np.asarray(penetration_m, dtype=float).reshape(shape)
            path = path + np.where(blocked > 0.0, self.nlos_excess_per_m * blocked + self.nlos_sigma_m * spread, 0.0)
        if self._waves is not None:
            path = path + self.multipath_bias(p)
        a, b, c = self.distortion
        raw = a + b * path + c * path**2 + self.sigma_m * noise
        if self.outlier_probability > 0.0:
            raw = raw + np.where(out_u < self.outlier_probability, self.outlier_m * out_mag, 0.0)
        return np.where(drop_u < self.dropout_probability, np.nan, raw)
