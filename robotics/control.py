"""Small control laws the runtime's behaviours share.

>>> turn_rate(1.0, 0.8, 0.1, 1.0), turn_rate(-0.005, 0.8, 0.1, 1.0)
(0.8, -0.1)
"""

from __future__ import annotations

import math


def turn_rate(remaining_rad: float, max_rate: float, min_rate: float, brake_rad_s2: float) -> float:
    """Signed turn rate (rad/s) toward a remaining angle: the lower of ``max_rate`` and the braking
    curve ``sqrt(2·a·|remaining|)`` (stop exactly at the goal decelerating at ``brake_rad_s2``),
    never under ``min_rate`` (so the wheel lag at the end is a fraction of a degree)."""
    rate = min(max_rate, math.sqrt(2.0 * brake_rad_s2 * abs(remaining_rad)))
    return math.copysign(max(rate, min_rate), remaining_rad)
