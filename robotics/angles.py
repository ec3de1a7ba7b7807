"""Angle wrapping, once for the whole project (it used to exist in three copies).

>>> round(wrap_pi(3.5 * math.pi), 6), round(wrap_pi(-math.pi), 6)
(-1.570796, -3.141593)
>>> wrap_deg(190.0), wrap_deg(-180.0), wrap_deg(540.0)
(-170.0, 180.0, 180.0)
"""

from __future__ import annotations

import math


def wrap_pi(angle_rad: float) -> float:
    """An angle in [-pi, pi)."""
    return (angle_rad + math.pi) % math.tau - math.pi


def wrap_deg(angle_deg: float) -> float:
    """An angle in (-180, 180] degrees (the shorter way to turn: +180 rather than -180)."""
    a = math.fmod(angle_deg, 360.0)
    if a > 180.0:
        a -= 360.0
    elif a <= -180.0:
        a += 360.0
    return a
