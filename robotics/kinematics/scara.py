"""Planar 2-link SCARA arm: position and velocity kinematics.

Frame: base frame, x and y in the arm's plane, z up. ``q1`` turns link 1 about
+z at the base, ``q2`` turns link 2 about +z at the elbow, relative to link 1.
``elbow=+1`` picks ``q2`` in [0, pi] (elbow to the right of the line from base to
tool when seen from above), ``elbow=-1`` picks ``q2`` in [-pi, 0].

The four problems of the source paper (seeds/004): forward and inverse position,
forward and inverse velocity through the 2×2 Jacobian, whose determinant is
``l1·l2·sin(q2)``: the arm is singular when stretched (q2 = 0) or folded (q2 = ±pi).
The workspace is built from the forward problem over the joint limits
(:meth:`Scara.workspace`).

>>> arm = Scara(0.3, 0.2)
>>> [round(v, 6) for v in arm.forward(arm.inverse((0.25, 0.25)))]
[0.25, 0.25]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robotics.kinematics import Singular, Unreachable

__all__ = ["Scara", "ScaraWorkspace"]

# Slack for targets a rounding error outside the workspace (full stretch from forward()).
_REACH_EPS = 1e-9


@dataclass(frozen=True)
class ScaraWorkspace:
    """What :meth:`Scara.workspace` returns, for drawing the workspace in a UI (metres, base frame).

    ``points`` (n·n, 2): tool positions on an n × n grid of joint angles over the
    limits (both elbows when the q2 range spans them).

    ``outlines``: elbow (+1, −1) → closed polygon (4·n, 2), the last point joining
    the first (an elbow whose q2 half-range has no width is left out). Each is the image of the border of that elbow's joint rectangle
    ``[q1_min, q1_max] × (q2 range ∩ [0, pi] or [−pi, 0])``; forward kinematics is
    one-to-one inside it (r depends on |q2| alone, monotonically), so the polygon
    bounds exactly the points that elbow reaches. The workspace is the union of the
    two: fill both (nonzero rule). When q1 turns a whole revolution the polygon runs
    out along the outer circle, across a seam and back along the inner one, which
    fills as an annulus.
    """

    points: np.ndarray
    outlines: dict[int, np.ndarray]


class Scara:
    """A 2-link planar arm with link lengths ``l1``, ``l2`` (m) and optional joint limits.

    ``q_min``/``q_max`` are (2,) arrays of radians, or None for no limit.

    >>> arm = Scara(0.3, 0.2, q_min=(-math.pi, 0.0), q_max=(math.pi, math.pi))
    >>> arm.within_limits((0.0, -0.1))
    False
    """

    def __init__(self, l1: float, l2: float, q_min=None, q_max=None) -> None:
        l1, l2 = float(l1), float(l2)
        if not (l1 > 0.0 and l2 > 0.0 and math.isfinite(l1) and math.isfinite(l2)):
            raise ValueError(f"link lengths must be positive and finite, got l1={l1}, l2={l2}")
        self.l1 = l1
        self.l2 = l2
        self.q_min = np.full(2, -np.inf) if q_min is None else np.asarray(q_min, dtype=float).reshape(2)
        self.q_max = np.full(2, np.inf) if q_max is None else np.asarray(q_max, dtype=float).reshape(2)
        if np.any(self.q_min > self.q_max) or np.any(np.isnan(self.q_min)) or np.any(np.isnan(self.q_max)):
            raise ValueError(f"joint limits must satisfy q_min <= q_max, got {self.q_min} and {self.q_max}")

    def __repr__(self) -> str:
        return f"Scara(l1={self.l1}, l2={self.l2}, q_min={self.q_min.tolist()}, q_max={self.q_max.tolist()})"

    @property
    def reach(self) -> tuple[float, float]:
        """Inner and outer radius of the workspace annulus (ignoring joint limits), m.

        >>> [round(r, 6) for r in Scara(0.3, 0.2).reach]
        [0.1, 0.5]
        """
        return abs(self.l1 - self.l2), self.l1 + self.l2

    def within_limits(self, q) -> bool:
        """True if both joints of ``q`` are inside [q_min, q_max].

        >>> Scara(1.0, 1.0, q_min=(-1, -1), q_max=(1, 1)).within_limits((0.5, 1.0))
        True
        """
        q = np.asarray(q, dtype=float).reshape(2)
        return bool(np.all(q >= self.q_min) and np.all(q <= self.q_max))

    def forward(self, q) -> tuple[float, float]:
        """Tool position (x, y) in metres, base frame, for joint angles ``q`` (rad).

        >>> [round(v, 6) for v in Scara(0.3, 0.2).forward((math.pi / 2, -math.pi / 2))]
        [0.2, 0.3]
        """
        q1, q2 = (float(v) for v in np.asarray(q, dtype=float).reshape(2))
        x = self.l1 * math.cos(q1) + self.l2 * math.cos(q1 + q2)
        y = self.l1 * math.sin(q1) + self.l2 * math.sin(q1 + q2)
        return x, y

    def inverse(self, p, elbow: int = +1) -> np.ndarray:
        """Joint angles (2,) rad that put the tool at ``p`` = (x, y) m.

        ``elbow=+1`` gives ``q2`` in [0, pi], ``elbow=-1`` gives ``q2`` in [-pi, 0].
        ``q1`` is taken in (-pi, pi], or shifted by a whole turn if that brings it
        within the limits. When ``l1 == l2`` and ``p`` is the base itself, every
        ``q1`` works and ``q1 = 0`` is returned.

        Raises :class:`Unreachable` if ``p`` lies outside the workspace annulus or
        the solution breaks a joint limit (the other elbow may still reach it).

        >>> arm = Scara(0.3, 0.2)
        >>> np.round(arm.inverse((0.5, 0.0)), 6).tolist()
        [0.0, 0.0]
        >>> np.round(arm.inverse((0.3, 0.2), elbow=+1), 4).tolist()
        [0.0, 1.5708]
        >>> arm.inverse((1.0, 0.0))
        Traceback (most recent call last):
        ...
        robotics.kinematics.Unreachable: target (1, 0) is 1 m from the base, outside the reach [0.1, 0.5] m
        """
        if elbow not in (1, -1):
            raise ValueError(f"elbow must be +1 or -1, got {elbow!r}")
        x, y = (float(v) for v in np.asarray(p, dtype=float).reshape(2))
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"target must be finite, got ({x}, {y})")
        r2 = x * x + y * y
        l1, l2 = self.l1, self.l2
        c2 = (r2 - l1 * l1 - l2 * l2) / (2.0 * l1 * l2)
        if abs(c2) > 1.0 + _REACH_EPS:
            lo, hi = self.reach
            raise Unreachable(
                f"target ({x:g}, {y:g}) is {math.sqrt(r2):.4g} m from the base, outside the reach [{lo:.4g}, {hi:.4g}] m"
            )
        q2 = elbow * math.acos(min(1.0, max(-1.0, c2)))
        k1, k2 = l1 + l2 * math.cos(q2), l2 * math.sin(q2)
        if math.hypot(k1, k2) < 1e-12 * (l1 + l2):
            q1 = 0.0  # equal links folded onto the base: every q1 reaches it
        else:
            q1 = math.atan2(y, x) - math.atan2(k2, k1)
        q1 = math.remainder(q1, math.tau)
        if q1 == -math.pi:
            q1 = math.pi
        # A joint with a range beyond ±pi may need the same angle one turn away.
        for q1_try in (q1, q1 + math.tau, q1 - math.tau):
            if self.within_limits((q1_try, q2)):
                return np.array([q1_try, q2])
        raise Unreachable(
            f"target ({x:g}, {y:g}) needs q=({q1:.4g}, {q2:.4g}) rad with elbow={elbow:+d}, "
            f"outside the joint limits {self.q_min.tolist()}..{self.q_max.tolist()}"
        )

    def jacobian(self, q) -> np.ndarray:
        """Jacobian d(x, y)/d(q1, q2), shape (2, 2), m/rad.

        >>> np.round(Scara(0.3, 0.2).jacobian((0.0, math.pi / 2)), 6).tolist()
        [[-0.2, -0.2], [0.3, 0.0]]
        """
        q1, q2 = (float(v) for v in np.asarray(q, dtype=float).reshape(2))
        s1, c1 = math.sin(q1), math.cos(q1)
        s12, c12 = math.sin(q1 + q2), math.cos(q1 + q2)
        return np.array(
            [
                [-self.l1 * s1 - self.l2 * s12, -self.l2 * s12],
                [self.l1 * c1 + self.l2 * c12, self.l2 * c12],
            ]
        )

    def forward_velocity(self, q, qd) -> np.ndarray:
        """Tool velocity (2,) m/s in the base frame for joint rates ``qd`` (rad/s) at ``q``.

        >>> np.round(Scara(0.3, 0.2).forward_velocity((0.0, 0.0), (1.0, 0.0)), 6).tolist()
        [0.0, 0.5]
        """
        return self.jacobian(q) @ np.asarray(qd, dtype=float).reshape(2)

    def inverse_velocity(self, q, v, tol: float = 1e-6) -> np.ndarray:
        """Joint rates (2,) rad/s that give tool velocity ``v`` (m/s) at ``q``.

        Raises :class:`Singular` when ``|sin(q2)| < tol`` (arm stretched or folded):
        there the Jacobian ``det = l1·l2·sin(q2)`` vanishes and no unique rates exist.

        >>> np.round(Scara(0.3, 0.2).inverse_velocity((0.0, math.pi / 2), (0.0, 0.3)), 6).tolist()
        [1.0, -1.0]
        >>> Scara(0.3, 0.2).inverse_velocity((0.4, 0.0), (0.1, 0.0))
        Traceback (most recent call last):
        ...
        robotics.kinematics.Singular: singular configuration q2=0 rad (arm stretched or folded): |sin(q2)| < 1e-06
        """
        q = np.asarray(q, dtype=float).reshape(2)
        if abs(math.sin(q[1])) < tol:
            raise Singular(
                f"singular configuration q2={q[1]:.4g} rad (arm stretched or folded): |sin(q2)| < {tol:g}"
            )
        return np.linalg.solve(self.jacobian(q), np.asarray(v, dtype=float).reshape(2))

    def _forward_many(self, q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
        """Tool positions (N, 2) for arrays of joint angles (vectorised :meth:`forward`)."""
        return np.column_stack(
            [self.l1 * np.cos(q1) + self.l2 * np.cos(q1 + q2), self.l1 * np.sin(q1) + self.l2 * np.sin(q1 + q2)]
        )

    def workspace(self, n: int = 64) -> ScaraWorkspace:
        """Sample the workspace over the joint limits for a UI: see :class:`ScaraWorkspace`.

        Unlimited joints are taken over [−pi, pi]; a q1 range wider than a turn is cut
        to one turn from ``q_min[0]``; q2 limits are clipped to [−pi, pi].

        >>> ws = Scara(0.3, 0.2, q_min=(-math.pi / 2, 0.0), q_max=(math.pi / 2, math.pi)).workspace(n=8)
        >>> ws.points.shape, sorted(ws.outlines), ws.outlines[1].shape
        ((64, 2), [1], (32, 2))
        >>> r = np.hypot(*ws.points.T)
        >>> bool(r.min() >= 0.1 - 1e-12 and r.max() <= 0.5 + 1e-12)
        True
        """
        if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= 4096:
            raise ValueError(f"n must be an integer in [2, 4096], got {n!r}")
        q1_lo = self.q_min[0] if math.isfinite(self.q_min[0]) else -math.pi
        q1_hi = self.q_max[0] if math.isfinite(self.q_max[0]) else math.pi
        q1_hi = min(q1_hi, q1_lo + math.tau)
        q2_lo, q2_hi = max(self.q_min[1], -math.pi), min(self.q_max[1], math.pi)
        g1, g2 = np.meshgrid(np.linspace(q1_lo, q1_hi, n), np.linspace(q2_lo, q2_hi, n))
        points = self._forward_many(g1.ravel(), g2.ravel())
        halves = {+1: (max(q2_lo, 0.0), q2_hi), -1: (q2_lo, min(q2_hi, 0.0))}
        keep = [e for e, (lo, hi) in halves.items() if lo < hi] or [+1 if q2_lo >= 0.0 else -1]  # q2 pinned
        outlines = {}
        for elbow in keep:
            lo, hi = halves[elbow]
            a1, a2 = np.linspace(q1_lo, q1_hi, n), np.linspace(lo, hi, n)
            border_q1 = np.concatenate([a1, np.full(n, q1_hi), a1[::-1], np.full(n, q1_lo)])
            border_q2 = np.concatenate([np.full(n, lo), a2, np.full(n, hi), a2[::-1]])
            outlines[elbow] = self._forward_many(border_q1, border_q2)
        return ScaraWorkspace(points, outlines)
