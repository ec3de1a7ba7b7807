"""The one braking law, and the small control laws built on it.

Anything that must stop on a mark decelerating at ``a`` — a ramped joint reference
(``server/runtime/controllers/ramp.py``), a simulated servo (``sim/servo.py``), a turn in
place — asks :func:`brake_speed` how fast it may go for the next step. The law is the
*discrete-time* one: a motion updated in steps of ``dt`` (velocity first, then position by
``velocity·dt``, the semi-implicit Euler step every caller uses) that moves one step at ``v = n·a·dt``
and then brakes covers ``a·dt²·(n + (n−1) + … + 1) = v(v + a·dt)/(2a)`` before it stands still, so
the fastest speed for a step that still stops within a distance ``d`` solves
``v² + a·dt·v − 2·a·d = 0``:

    v_brake = sqrt((a·dt/2)² + 2·a·d) − a·dt/2

The continuous law ``sqrt(2·a·d)`` (the ``dt → 0`` limit, ``dt_s = 0`` here) is faster by
about ``a·dt/2`` and overshoots a stepped motion by about ``v·dt/2``: 2.5 mrad for a joint
at 0.5 rad/s stepped at 10 ms. Pure: numbers or numpy arrays in, the same out; no state.

>>> float(brake_speed(0.25, 2.0))              # the continuous limit: sqrt(2·2·0.25)
1.0
>>> round(float(brake_speed(0.25, 2.0, 0.01)), 6)   # stepped at 10 ms: a little slower
0.99005
>>> turn_rate(1.0, 0.8, 0.1, 1.0), turn_rate(-0.005, 0.8, 0.1, 1.0)
(0.8, -0.1)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["brake_distance", "brake_speed", "turn_rate"]


def brake_speed(distance, a_max, dt_s: float = 0.0):
    """The fastest speed (distance's unit per s) to move at for the next step of ``dt_s`` such that braking
    at ``a_max`` after it stops within ``|distance|`` (the module docstring derives it). ``dt_s = 0``: the
    continuous law.

    Element-wise on numpy arrays; ``a_max > 0`` and ``dt_s >= 0`` are the caller's to ensure.

    >>> v = brake_speed(np.array([0.0, 0.1, 1.0]), 2.0, 0.01)
    >>> [round(float(x), 5) for x in v]
    [0.0, 0.62253, 1.99002]
    """
    half = 0.5 * a_max * dt_s
    return np.sqrt(half * half + 2.0 * a_max * np.abs(distance)) - half


def brake_distance(speed, a_max, dt_s: float = 0.0):
    """How far a motion travels that moves one step of ``dt_s`` at ``|speed|`` and then brakes at ``a_max``
    (the inverse of :func:`brake_speed`): ``v·(v + a·dt)/(2a)``.

    >>> round(float(brake_distance(brake_speed(0.3, 4.0, 0.002), 4.0, 0.002)), 12)
    0.3
    """
    v = np.abs(speed)
    return v * (v + a_max * dt_s) / (2.0 * a_max)


def turn_rate(remaining_rad: float, max_rate: float, min_rate: float, brake_rad_s2: float,
              dt_s: float = 0.0) -> float:
    """Signed turn rate (rad/s) toward a remaining angle: the lower of ``max_rate`` and
    :func:`brake_speed` (stop at the goal decelerating at ``brake_rad_s2``; ``dt_s`` the step, 0 for
    the continuous law), never under ``min_rate`` (so the wheel lag at the end is a fraction of a degree)."""
    rate = min(max_rate, float(brake_speed(remaining_rad, brake_rad_s2, dt_s)))
    return math.copysign(max(rate, min_rate), remaining_rad)
