"""Magnetometer calibration: hard-iron offset and per-axis (soft-iron) scale from an ellipsoid fit.

Turning the sensor slowly through many orientations, its raw readings lie on
an axis-aligned ellipsoid ``Σ ((m_i − o_i) / l_i)² = 1`` with centre ``o`` (hard
iron) and semi-axes ``l`` (soft iron scale). Least squares on the algebraic form
``A x² + B y² + C z² + D x + E y + F z = 1`` (seeds/002, §1.2 ②) gives both;
the calibrated reading is ``(m − o) · scale`` (seeds/002, eq. 8).

The samples cannot tell the field's true magnitude, so ``scale`` is fixed up to
one common factor: by default the calibrated field keeps the geometric mean
of the semi-axes as its radius; pass ``field_strength`` to pin it (e.g. the
local field in tesla). Rotated soft iron (cross-axis terms) is not modelled.

>>> rng = np.random.default_rng(0)
>>> u = rng.normal(size=(200, 3)); u /= np.linalg.norm(u, axis=1, keepdims=True)
>>> raw = u * [60.0, 45.0, 50.0] + [10.0, -5.0, 2.0]
>>> offset, scale = fit_ellipsoid(raw, field_strength=50.0)
>>> np.round(offset, 6).tolist(), np.round(scale * [60.0, 45.0, 50.0], 6).tolist()
([10.0, -5.0, 2.0], [50.0, 50.0, 50.0])
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_ellipsoid", "apply"]


def fit_ellipsoid(samples, field_strength: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fit an axis-aligned ellipsoid to (N, 3) raw readings; returns (offset (3,), scale (3,)).

    Needs N >= 6 readings spread over many orientations (a flat or one-sided
    cloud raises :class:`ValueError`). Works in any unit; ``offset`` comes back in
    the samples' unit and ``scale`` is dimensionless (or field unit / sample unit
    when ``field_strength`` is given).

    >>> u = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], dtype=float)
    >>> offset, scale = fit_ellipsoid(u * [2.0, 1.0, 1.0] + 3.0)
    >>> np.round(offset, 6).tolist(), np.round(scale, 4).tolist()
    ([3.0, 3.0, 3.0], [0.63, 1.2599, 1.2599])
    """
    m = np.asarray(samples, dtype=float)
    if m.ndim != 2 or m.shape[1] != 3:
        raise ValueError(f"samples must be (N, 3), got shape {m.shape}")
    m = m[np.all(np.isfinite(m), axis=1)]
    if len(m) < 6:
        raise ValueError(f"need at least 6 finite samples for an ellipsoid fit, got {len(m)}")
    # Centre and normalise first: it keeps the design matrix well conditioned in any unit (T or µT).
    centre = m.mean(axis=0)
    spread = float(np.sqrt(np.mean(np.sum((m - centre) ** 2, axis=1))))
    if not spread > 0.0:
        raise ValueError("samples are all equal: cannot fit an ellipsoid")
    x = (m - centre) / spread
    design = np.column_stack([x**2, x])
    coef, _, rank, _ = np.linalg.lstsq(design, np.ones(len(x)), rcond=None)
    if rank < 6:
        raise ValueError("samples do not span an ellipsoid: turn the sensor through more orientations")
    quad, lin = coef[:3], coef[3:]
    if np.any(quad <= 0.0):
        raise ValueError("least-squares surface is not an ellipsoid: turn the sensor through more orientations")
    centre_n = -lin / (2.0 * quad)
    g = 1.0 + float(np.sum(lin**2 / (4.0 * quad)))
    semi_axes = np.sqrt(g / quad) * spread
    offset = centre + centre_n * spread
    radius = float(np.prod(semi_axes) ** (1.0 / 3.0)) if field_strength is None else float(field_strength)
    return offset, radius / semi_axes


def apply(samples, offset, scale) -> np.ndarray:
    """Calibrated readings ``(samples − offset) · scale`` for (3,) or (N, 3) raw readings.

    >>> apply([12.0, -5.0, 2.0], [10.0, -5.0, 2.0], [0.5, 1.0, 1.0]).tolist()
    [1.0, 0.0, 0.0]
    """
    return (np.asarray(samples, dtype=float) - np.asarray(offset, dtype=float)) * np.asarray(scale, dtype=float)
