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

from typing import Any

import numpy as np

__all__ = ["apply", "fit_ellipsoid", "fit_horizontal_ellipse", "fit_magnetometer"]


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
    offset, semi_axes = _fit_axis_aligned(m, "ellipsoid", "turn the sensor through more orientations")
    radius = float(np.prod(semi_axes) ** (1.0 / 3.0)) if field_strength is None else float(field_strength)
    return offset, radius / semi_axes


def fit_horizontal_ellipse(xy) -> tuple[np.ndarray, np.ndarray]:
    """Axis-aligned ellipse through (N, 2) points: (centre (2,), semi-axes (2,)).

    The 2D twin of :func:`fit_ellipsoid`, for a robot turning on level ground, whose
    magnetometer only sweeps a horizontal circle of the field (the 3D fit is then
    rank-deficient).

    >>> t = np.linspace(0.0, 2.0 * np.pi, 50, endpoint=False)
    >>> c, ax = fit_horizontal_ellipse(np.column_stack([3.0 + 20.0 * np.cos(t), -2.0 + 25.0 * np.sin(t)]))
    >>> np.round(c, 6).tolist(), np.round(ax, 6).tolist()
    ([3.0, -2.0], [20.0, 25.0])
    """
    m = np.asarray(xy, dtype=float)
    if m.ndim != 2 or m.shape[1] != 2:
        raise ValueError(f"points must be (N, 2), got shape {m.shape}")
    return _fit_axis_aligned(m, "ellipse", "turn through a full revolution")


def _fit_axis_aligned(m: np.ndarray, shape: str, advice: str) -> tuple[np.ndarray, np.ndarray]:
    """Least squares ``Σ a_i x_i² + b_i x_i = 1`` in n dimensions: (centre (n,), semi-axes (n,))."""
    n = m.shape[1]
    m = m[np.all(np.isfinite(m), axis=1)]
    if len(m) < 2 * n:
        raise ValueError(f"need at least {2 * n} finite samples for an {shape} fit, got {len(m)}")
    # Centre and normalise first: it keeps the design matrix well conditioned in any unit (T or µT).
    centre = m.mean(axis=0)
    spread = float(np.sqrt(np.mean(np.sum((m - centre) ** 2, axis=1))))
    if not spread > 0.0:
        raise ValueError(f"samples are all equal: cannot fit an {shape}")
    x = (m - centre) / spread
    coef, _, rank, _ = np.linalg.lstsq(np.column_stack([x**2, x]), np.ones(len(x)), rcond=None)
    if rank < 2 * n:
        raise ValueError(f"samples do not span an {shape}: {advice}")
    quad, lin = coef[:n], coef[n:]
    if np.any(quad <= 0.0):
        raise ValueError(f"least-squares surface is not an {shape}: {advice}")
    g = 1.0 + float(np.sum(lin**2 / (4.0 * quad)))
    return centre + (-lin / (2.0 * quad)) * spread, np.sqrt(g / quad) * spread


def apply(samples, offset, scale) -> np.ndarray:
    """Calibrated readings ``(samples − offset) · scale`` for (3,) or (N, 3) raw readings.

    >>> apply([12.0, -5.0, 2.0], [10.0, -5.0, 2.0], [0.5, 1.0, 1.0]).tolist()
    [1.0, 0.0, 0.0]
    """
    return (np.asarray(samples, dtype=float) - np.asarray(offset, dtype=float)) * np.asarray(scale, dtype=float)


def fit_magnetometer(samples_ut) -> dict[str, Any]:
    """Hard-iron offset and per-axis scale from raw (N, 3) readings (µT).

    A rover turning in place on level ground only sweeps a horizontal circle of the
    field: the z reading barely changes, and the 3D ellipsoid fit
    (:func:`robotics.estimation.magcal.fit_ellipsoid`) is then rank-deficient. So when
    z spreads less than a fifth of the horizontal radius the horizontal ellipse is
    fitted (z offset 0, z scale 1: a level turn cannot see them; they hardly matter
    for the heading of a level robot), otherwise the full ellipsoid.

    >>> t = np.linspace(0.0, 4.0 * np.pi, 200)
    >>> raw = np.column_stack([5.0 + 26.0 * np.cos(t), -3.0 + 24.0 * np.sin(t), np.full(t.size, -43.0)])
    >>> cal = fit_magnetometer(raw)
    >>> cal["method"], [round(v, 3) for v in cal["offset_ut"]], round(cal["scale"][0] * 26.0, 3)
    ('horizontal_ellipse', [5.0, -3.0, 0.0], 24.98)
    """
    m = np.asarray(samples_ut, dtype=float).reshape(-1, 3)
    m = m[np.all(np.isfinite(m), axis=1)]
    if len(m) < 8:
        raise ValueError(f"too few magnetometer samples ({len(m)})")
    xy_radius = float(np.sqrt(np.mean(np.sum((m[:, :2] - m[:, :2].mean(axis=0)) ** 2, axis=1))))
    z_spread = float(np.std(m[:, 2]))
    if z_spread < 0.2 * xy_radius:
        centre, semi = fit_horizontal_ellipse(m[:, :2])
        radius = float(np.sqrt(semi[0] * semi[1]))
        offset = np.array([centre[0], centre[1], 0.0])
        scale = np.array([radius / semi[0], radius / semi[1], 1.0])
        calibrated = (m[:, :2] - centre) * scale[:2]
        norms = np.linalg.norm(calibrated, axis=1)
        method = "horizontal_ellipse"
    else:
        offset, scale = fit_ellipsoid(m)
        norms = np.linalg.norm((m - offset) * scale, axis=1)
        radius = float(np.median(norms))
        method = "ellipsoid"
    return {"offset_ut": [float(v) for v in offset], "scale": [float(v) for v in scale], "method": method,
            "samples": int(len(m)), "radius_ut": round(radius, 4),
            "residual_rms_ut": round(float(np.sqrt(np.mean((norms - radius) ** 2))), 4)}
