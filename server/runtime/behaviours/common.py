"""Shared by the rover's automatic motions: when the wheels count as still, rounding for status."""

from __future__ import annotations

import math

STILL_RAD_S = 0.02  # wheels count as still below this turn rate …
STILL_M_S = 0.01  # … and this speed


def still(values: dict[str, float]) -> bool:
    w = values.get("angular_rad_s", 0.0)
    v = values.get("linear_m_s", 0.0)
    return abs(w) < STILL_RAD_S and abs(v) < STILL_M_S


def rounded(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), nd)
