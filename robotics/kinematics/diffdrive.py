"""Differential drive: body twist ↔ wheel speeds, and odometry integration.

Body frame REP-103: x forward, y left, z up. A positive angular rate (about +z)
turns left, so the right wheel runs faster. Wheel speeds are in rad/s, positive
when the wheel rolls the robot forward.

>>> left, right = wheel_speeds(0.5, 0.0, 0.3, 0.05)
>>> round(left, 6), round(right, 6)
(10.0, 10.0)
"""

from __future__ import annotations

import math

__all__ = ["wheel_speeds", "body_twist", "integrate_twist"]


def _check_geometry(track_m: float, wheel_radius_m: float) -> None:
    if not (track_m > 0.0 and math.isfinite(track_m)):
        raise ValueError(f"track_m must be positive and finite, got {track_m}")
    if not (wheel_radius_m > 0.0 and math.isfinite(wheel_radius_m)):
        raise ValueError(f"wheel_radius_m must be positive and finite, got {wheel_radius_m}")


def wheel_speeds(linear: float, angular: float, track_m: float, wheel_radius_m: float) -> tuple[float, float]:
    """Wheel speeds (left, right) in rad/s for a body twist: ``linear`` m/s, ``angular`` rad/s.

    ``track_m`` is the distance between the wheel contact points.

    >>> [round(w, 6) for w in wheel_speeds(0.0, 1.0, 0.3, 0.05)]
    [-3.0, 3.0]
    """
    _check_geometry(track_m, wheel_radius_m)
    half = 0.5 * angular * track_m
    return (linear - half) / wheel_radius_m, (linear + half) / wheel_radius_m


def body_twist(left: float, right: float, track_m: float, wheel_radius_m: float) -> tuple[float, float]:
    """Body twist (linear m/s, angular rad/s) from wheel speeds ``left``, ``right`` in rad/s.

    >>> [round(v, 6) for v in body_twist(-3.0, 3.0, 0.3, 0.05)]
    [0.0, 1.0]
    """
    _check_geometry(track_m, wheel_radius_m)
    v_left, v_right = left * wheel_radius_m, right * wheel_radius_m
    return 0.5 * (v_left + v_right), (v_right - v_left) / track_m


def integrate_twist(
    x: float, y: float, yaw: float, linear: float, angular: float, dt_s: float
) -> tuple[float, float, float]:
    """Planar pose (x, y, yaw) in the world after holding a body twist for ``dt_s``.

    Exact for a constant twist (the path is a circular arc), so step size does
    not bias dead reckoning. ``yaw`` is the ENU yaw of body x (0 = east) and the
    result is wrapped to [-pi, pi).

    >>> [round(v, 6) for v in integrate_twist(0.0, 0.0, 0.0, math.pi / 2, math.pi / 2, 1.0)]
    [1.0, 1.0, 1.570796]
    """
    dtheta = angular * dt_s
    if abs(dtheta) < 1e-9:
        # Straight line (second-order in dtheta, so the arc formula's 0/0 is avoided).
        mid = yaw + 0.5 * dtheta
        dx, dy = linear * dt_s * math.cos(mid), linear * dt_s * math.sin(mid)
    else:
        radius = linear / angular
        dx = radius * (math.sin(yaw + dtheta) - math.sin(yaw))
        dy = -radius * (math.cos(yaw + dtheta) - math.cos(yaw))
    new_yaw = (yaw + dtheta + math.pi) % math.tau - math.pi
    return x + dx, y + dy, new_yaw
