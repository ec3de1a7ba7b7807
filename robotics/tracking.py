"""How well a run followed its trajectory: deviation statistics per axis (seeds/003, tables 2 and 3).

The paper judges tracking by the arithmetic-mean and the root-mean-square
deviation between the commanded and the achieved trajectory, per axis. Here the
deviation is ``achieved − commanded`` sample by sample, and four figures come
out per axis: ``mean`` (signed: a steady lag or offset shows here), ``mean_abs``,
``rms`` and ``max_abs``. Angles are compared as given (no wrapping): pass
unwrapped angles.

>>> r = deviation([0.0, 1.0, 2.0, 3.0], [0.0, 1.5, 2.0, 2.5])
>>> {k: round(v, 4) for k, v in r.items()}
{'mean': 0.0, 'mean_abs': 0.25, 'rms': 0.3536, 'max_abs': 0.5}
>>> r = deviation([[0.0, 0.0], [1.0, 1.0]], [[0.1, 0.0], [1.1, 0.8]])
>>> r["mean"].round(3).tolist(), r["max_abs"].round(3).tolist()
([0.1, -0.1], [0.1, 0.2])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["STATISTICS", "deviation", "deviation_by_axis"]

STATISTICS = ("mean", "mean_abs", "rms", "max_abs")


def deviation(commanded, achieved) -> dict[str, np.ndarray | float]:
    """Statistics of ``achieved − commanded``, both (N,) or both (N, k) with N ≥ 1.

    Returns ``{"mean", "mean_abs", "rms", "max_abs"}``: floats for (N,) input,
    (k,) arrays for (N, k). Raises :class:`ValueError` for shapes that differ,
    empty input or a value that is not finite (naming the sample).
    """
    c = np.asarray(commanded, dtype=float)
    a = np.asarray(achieved, dtype=float)
    if c.shape != a.shape:
        raise ValueError(f"commanded {c.shape} and achieved {a.shape} must have the same shape")
    if c.ndim not in (1, 2) or c.shape[0] == 0:
        raise ValueError(f"expected (N,) or (N, k) samples with N >= 1, got shape {c.shape}")
    for name, arr in (("commanded", c), ("achieved", a)):
        bad = np.argwhere(~np.isfinite(arr))
        if bad.size:
            raise ValueError(f"{name} sample {tuple(int(i) for i in bad[0])} is not finite")
    d = a - c
    out = {
        "mean": d.mean(axis=0),
        "mean_abs": np.abs(d).mean(axis=0),
        "rms": np.sqrt(np.mean(d * d, axis=0)),
        "max_abs": np.abs(d).max(axis=0),
    }
    if d.ndim == 1:
        return {k: float(v) for k, v in out.items()}
    return out


def deviation_by_axis(axes: Sequence[str], commanded, achieved) -> dict[str, dict[str, float]]:
    """:func:`deviation` of (N, k) samples as ``{axis: {statistic: value}}`` (plain floats, for a report).

    >>> deviation_by_axis(("x_m", "yaw_rad"), [[0, 0], [0, 0]], [[0.01, 0.0], [0.03, -0.02]])["x_m"]["mean"]
    0.02
    """
    c, a = (np.asarray(v, dtype=float) for v in (commanded, achieved))
    c, a = (v[:, None] if v.ndim == 1 else v for v in (c, a))
    axes = tuple(axes)
    if c.ndim == 2 and len(axes) != c.shape[1]:
        raise ValueError(f"{len(axes)} axis names for {c.shape[1]} columns")
    stats = deviation(c, a)
    return {axis: {k: float(stats[k][j]) for k in STATISTICS} for j, axis in enumerate(axes)}
