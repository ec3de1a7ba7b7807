"""UWB positioning: trilateration from anchor ranges, and range calibration.

Trilateration (seeds/002, §2.1) solves ``|p − a_i| = r_i`` for the tag position
``p``. With noisy ranges the spheres rarely meet in one point, so instead of
the paper's case analysis (grow radii until spheres touch, pick or weight the
intersections) we minimise ``Σ (|p − a_i| − r_i)²``: a linearised least-squares
start, then damped Gauss-Newton. It never fails on inconsistent spheres; it
returns the best fit.

Coplanar anchors (all at one height, as in the paper's field with four tripods)
leave a mirror ambiguity: ``p`` and its reflection in the anchor plane fit the
ranges equally well. :func:`trilaterate` then picks the side nearest ``z_hint``
or, without a hint, the side below the anchors (a tag on a ground robot under
anchors on tripods or walls). With a known tag height, ``z_fixed`` solves for
x and y only, which is better conditioned when the tag sits far below or near
the anchor plane.

Range calibration (seeds/002, §2.2, eq. 15) fits the true distance as a
polynomial of the raw range; the paper uses degree 2.

>>> anchors = [[0, 0, 1.2], [5, 0, 1.2], [5, 8, 1.2], [0, 8, 1.2]]
>>> p = np.array([2.0, 3.0, 0.125])
>>> ranges = np.linalg.norm(np.asarray(anchors) - p, axis=1)
>>> np.round(trilaterate(anchors, ranges), 6).tolist()
[2.0, 3.0, 0.125]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["RangeCorrection", "apply_range_correction", "fit_range_correction", "trilaterate"]

# Relative size of the smallest anchor spread direction below which anchors count as coplanar.
_COPLANAR_TOL = 1e-6


def _valid(anchors, ranges) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(anchors, dtype=float)
    r = np.asarray(ranges, dtype=float)
    if a.ndim != 2 or a.shape[1] != 3 or r.shape != (a.shape[0],):
        raise ValueError(f"anchors must be (N, 3) and ranges (N,), got {a.shape} and {r.shape}")
    ok = np.isfinite(r) & np.all(np.isfinite(a), axis=1)
    return a[ok], r[ok]


def _refine(a: np.ndarray, r: np.ndarray, p: np.ndarray, free: np.ndarray, iterations: int) -> np.ndarray:
    """Levenberg-Marquardt on the range residuals over the coordinates where ``free`` is True."""
    p = p.copy()
    lam = 1e-3

    def cost(q: np.ndarray) -> float:
        return float(np.sum((np.linalg.norm(q - a, axis=1) - r) ** 2))

    current = cost(p)
    for _ in range(iterations):
        diff = p - a
        dist = np.linalg.norm(diff, axis=1)
        dist = np.maximum(dist, 1e-12)
        jac = (diff / dist[:, None])[:, free]
        res = dist - r
        jtj = jac.T @ jac
        grad = jac.T @ res
        improved = False
        for _ in range(10):
            try:
                step = np.linalg.solve(jtj + lam * (np.diag(np.diag(jtj)) + 1e-9 * np.eye(len(grad))), -grad)
            except np.linalg.LinAlgError:
                lam *= 10.0
                continue
            trial = p.copy()
            trial[free] += step
            trial_cost = cost(trial)
            if trial_cost <= current:
                p, current = trial, trial_cost
                lam = max(lam * 0.3, 1e-9)
                improved = True
                break
            lam *= 10.0
        if not improved or float(np.max(np.abs(step))) < 1e-10:
            break
    return p


_XY_ONLY = np.array([True, True, False])
_XY_ONLY.setflags(write=False)


def trilaterate(
    anchors,
    ranges,
    z_hint: float | None = None,
    z_fixed: float | None = None,
    iterations: int = 20,
) -> np.ndarray:
    """Tag position (3,) m from anchor positions (N, 3) m and measured ranges (N,) m.

    NaN ranges (dropouts) are ignored. Needs 3 finite ranges, 4 or more for a
    full 3D fix from non-coplanar anchors; with fewer than 3 it raises
    :class:`ValueError` (there is no fix to return). Inconsistent ranges never
    raise: the least-squares best fit comes back.

    ``z_hint`` picks between the mirror solutions of coplanar anchors (default:
    below the anchor plane); ``z_fixed`` holds z at a known tag height and
    solves x and y only.

    >>> anchors = [[0, 0, 1.2], [5, 0, 1.2], [5, 8, 1.2], [0, 8, 1.2]]
    >>> ranges = [3.0, 3.0, 3.0, 3.0]                     # spheres that never meet
    >>> np.round(trilaterate(anchors, ranges), 2).tolist()
    [2.5, 4.0, 1.2]
    >>> np.round(trilaterate(anchors, [3.5, 3.6, 6.5, 6.4], z_fixed=0.125), 3).tolist()
    [2.415, 2.194, 0.125]
    """
    a, r = _valid(anchors, ranges)
    if len(r) < 3:
        raise ValueError(f"need at least 3 finite ranges for a fix, got {len(r)}")
    r = np.abs(r)  # a negative range is noise around zero; its magnitude is the best guess

    # Linearised start: subtracting sphere equations pairwise cancels |p|² (seeds/002, eq. 12).
    lin_a = 2.0 * (a[1:] - a[0])
    lin_b = (np.sum(a[1:] ** 2, axis=1) - np.sum(a[0] ** 2)) - (r[1:] ** 2 - r[0] ** 2)

    if z_fixed is not None:  # before the plane analysis below, which a fixed height does not need
        rhs = lin_b - lin_a[:, 2] * z_fixed
        xy, *_ = np.linalg.lstsq(lin_a[:, :2], rhs, rcond=None)
        start = np.array([xy[0], xy[1], float(z_fixed)])
        return _refine(a, r, start, _XY_ONLY, iterations)

    centroid = a.mean(axis=0)
    _, sv, vt = np.linalg.svd(a - centroid)
    spread = float(sv[0]) if sv[0] > 0.0 else 1.0
    coplanar = len(sv) < 3 or float(sv[2]) < _COPLANAR_TOL * spread
    normal = vt[2] if len(vt) == 3 else np.array([0.0, 0.0, 1.0])

    free = np.array([True, True, True])
    if not coplanar:
        start, *_ = np.linalg.lstsq(lin_a, lin_b, rcond=None)
        return _refine(a, r, start, free, iterations)

    # Coplanar anchors: solve in the plane, then step off it by the mean residual height.
    in_plane, *_ = np.linalg.lstsq(lin_a, lin_b, rcond=None)  # minimum norm: no component along normal...
    in_plane = in_plane - float((in_plane - centroid) @ normal) * normal  # ...relative to the plane itself
    height2 = float(np.mean(r**2 - np.sum((a - in_plane) ** 2, axis=1)))
    height = math.sqrt(max(height2, 0.0))
    side = _pick_side(normal, centroid, z_hint)
    start = in_plane + side * max(height, 1e-3) * normal
    p = _refine(a, r, start, free, iterations)
    # Refinement may cross the plane when the tag is near it; reflect back to the chosen side.
    off = float((p - centroid) @ normal)
    if off * side < 0.0:
        p = p - 2.0 * off * normal
    return p


def _pick_side(normal: np.ndarray, centroid: np.ndarray, z_hint: float | None) -> float:
    """+1 or -1: which side of the anchor plane (along ``normal``) the solution goes."""
    if abs(normal[2]) < 1e-9:
        return 1.0  # vertical anchor plane: z cannot choose; keep a deterministic side
    if z_hint is None:
        return -1.0 if normal[2] > 0.0 else 1.0  # below the anchors
    return 1.0 if (z_hint - centroid[2]) * normal[2] >= 0.0 else -1.0


@dataclass(frozen=True)
class RangeCorrection:
    """A fitted range correction: ``true ≈ polyval(coefficients, raw)``, highest power first.

    Call it on raw ranges (scalar or array, m) to get corrected ranges; NaN stays NaN.

    >>> RangeCorrection((0.0, 0.98, 0.02))(np.array([1.0, 2.0])).round(6).tolist()
    [1.0, 1.98]
    """

    coefficients: tuple[float, ...]

    def __call__(self, raw):
        return np.polyval(np.asarray(self.coefficients, dtype=float), np.asarray(raw, dtype=float))


def fit_range_correction(raw, true, degree: int = 2) -> RangeCorrection:
    """Least-squares polynomial ``true ≈ f(raw)`` of ``degree`` from calibration pairs (m).

    ``raw`` are the ranges the UWB module reported, ``true`` the surveyed
    distances (seeds/002 used 13 distances from 2 m to 8 m, averaged over four
    headings). Pairs with a NaN are skipped. Returns a callable
    :class:`RangeCorrection`; see also :func:`apply_range_correction`.

    >>> raw = np.array([2.0, 3.0, 4.0, 5.0, 6.0])
    >>> corr = fit_range_correction(raw, 0.1 + 0.95 * raw + 0.002 * raw**2)
    >>> np.round(corr.coefficients, 6).tolist()
    [0.002, 0.95, 0.1]
    """
    x = np.asarray(raw, dtype=float).ravel()
    y = np.asarray(true, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"raw and true must have the same length, got {x.shape} and {y.shape}")
    if int(degree) != degree or degree < 0:
        raise ValueError(f"degree must be a non-negative integer, got {degree}")
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(np.unique(x)) <= degree:
        raise ValueError(f"need more than {degree} distinct raw ranges for a degree-{degree} fit, got {len(np.unique(x))}")
    return RangeCorrection(tuple(float(c) for c in np.polyfit(x, y, int(degree))))


def apply_range_correction(raw, correction) -> np.ndarray:
    """Corrected ranges from raw ones; ``correction`` is a :class:`RangeCorrection` or its coefficients.

    >>> apply_range_correction([2.0, 4.0], (0.5, 0.0)).tolist()   # true = 0.5 · raw
    [1.0, 2.0]
    """
    if isinstance(correction, RangeCorrection):
        return correction(raw)
    return np.polyval(np.asarray(correction, dtype=float), np.asarray(raw, dtype=float))
