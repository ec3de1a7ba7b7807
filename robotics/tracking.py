"""How well an achieved trajectory follows a commanded one: signed mean, mean absolute,
RMS and largest deviation per axis, the figures tracking experiments are reported in.

The deviation is ``achieved − commanded`` sample by sample (same time base; resample
first if needed). Angles must be unwrapped or wrapped by the caller (e.g. pass
``commanded + wrap(achieved − commanded)`` as ``achieved``). Non-finite samples
propagate (NaN in, NaN out): drop them before calling if they mean "no data".

>>> r = deviation([0.0, 1.0, 2.0, 3.0], [0.1, 0.9, 2.1, 3.3])
>>> {k: round(float(v), 4) for k, v in r.items()}
{'mean': 0.1, 'mean_abs': 0.15, 'rms': 0.1732, 'max_abs': 0.3}
>>> r = deviation([[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.5], [1.0, 0.5]])
>>> r["mean"].tolist(), r["rms"].tolist()
([0.0, 0.0], [0.0, 0.5])
"""

from __future__ import annotations

import numpy as np


def deviation(commanded, achieved) -> dict[str, np.ndarray]:
    """Per-axis statistics of ``achieved − commanded`` over the samples (axis 0).

    ``commanded`` and ``achieved``: arrays of the same shape, (N,) for one axis or (N, k)
    for k axes, N ≥ 1. Returns ``{"mean", "mean_abs", "rms", "max_abs"}``, each of shape
    () for (N,) input and (k,) for (N, k). ``ValueError`` for mismatched, empty or
    higher-dimensional input.
    """
    c = np.asarray(commanded, dtype=float)
    a = np.asarray(achieved, dtype=float)
    if c.shape != a.shape:
        raise ValueError(f"commanded {c.shape} and achieved {a.shape} must have the same shape")
    if c.ndim not in (1, 2):
        raise ValueError(f"expected (N,) or (N, k) arrays, got shape {c.shape}")
    if c.shape[0] == 0:
        raise ValueError("need at least one sample")
    d = a - c
    return {
        "mean": d.mean(axis=0),
        "mean_abs": np.abs(d).mean(axis=0),
        "rms": np.sqrt((d * d).mean(axis=0)),
        "max_abs": np.abs(d).max(axis=0),
    }
