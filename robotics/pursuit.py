"""Pure pursuit: follow a polyline path with a differential-drive robot on its estimated pose.

Why pure pursuit (Coulter, *Implementation of the Pure Pursuit Path Tracking Algorithm*, CMU-RI-TR-92-01,
1992): it needs only the pose and the path, has one tuning knob (the look-ahead distance ``L``), cannot
oscillate on a straight line for any ``L`` larger than the pose noise, and its command is an arc, which
is what a differential drive does. A mission's legs (:mod:`server.runtime.behaviours.mission`) are
straight segments between waypoints; the follower steers along them on the fused pose.

Frames: world x east, y north (REP-103); a pose is ``(x, y, yaw)`` m, m, rad, yaw the ENU heading of
body x (forward); body y is left. Each step:

1. project the position on the path (:func:`project`): the nearest point, at or after the segment
   reached so far (so a path that doubles back is followed in order), its distance along the path and
   the signed cross-track error (left of the path positive);
2. the *goal point* ``L`` further along the path (:func:`lookahead_point`), on the last segment's extension
   past the end when less is left: steering at the end point itself would swing the nose round by tens of
   degrees for a centimetre of lateral error in the last few centimetres (a pose estimate that a UWB fix
   moves sideways near the end turned the rover 40° off the leg before it); on the extension it converges
   onto the line and stops where the projection reaches the end;
3. the arc from the pose through the goal point has curvature (Coulter eq. 1)::

       κ = 2·y_b / (x_b² + y_b²)          (x_b, y_b): the goal point in the body frame

4. speed: the cruise speed, limited by the braking law toward the path's end
   (:func:`robotics.control.brake_speed`), scaled down so ``|v·κ|`` stays within the turn-rate limit;
   a goal point more than ``turn_in_place_rad`` off the nose turns in place first (an arc that tight
   would swing the robot far off the path).

The path is done at its end: when the projection has reached it (within :data:`STOP_M` along the last
segment: the braking law brings the robot onto the mark, and what it rolls on after a zero command is
millimetres at the slowest approach speed), or when the position is within a third of
``goal_tolerance_m`` of it with no more than that tolerance left along the path (a loop starts at its end). Pure numpy; no state but the segment reached.

>>> follower = PurePursuit([(0.0, 0.0), (2.0, 0.0)], lookahead_m=0.5, speed_m_s=0.3)
>>> cmd = follower.update((0.0, 0.1, 0.0))        # 10 cm left of the path, facing along it
>>> round(cmd.linear_m_s, 3), cmd.angular_rad_s < 0, cmd.reached     # cos 11° of 0.3 m/s, steering right
(0.294, True, False)
>>> follower.update((1.996, 0.0, 0.0)).reached     # on the mark
True
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from robotics.angles import wrap_pi
from robotics.control import brake_speed

#: the path is done when this little of it is left along the last segment, m
STOP_M = 0.005

__all__ = ["STOP_M", "PathProgress", "PurePursuit", "PursuitCommand", "curvature", "lookahead_point", "path_length",
           "project", "to_body", "to_world"]


def to_body(pose: Sequence[float], point: Sequence[float]) -> tuple[float, float]:
    """A world point (x, y) in the body frame of ``pose`` (x ahead, y to the left).

    >>> [round(v, 6) for v in to_body((1.0, 1.0, math.pi / 2), (1.0, 3.0))]    # facing north, 2 m north
    [2.0, 0.0]
    """
    x, y, yaw = (float(v) for v in pose)
    dx, dy = float(point[0]) - x, float(point[1]) - y
    c, s = math.cos(yaw), math.sin(yaw)
    return c * dx + s * dy, -s * dx + c * dy


def to_world(pose: Sequence[float], point_b: Sequence[float]) -> tuple[float, float]:
    """A body-frame point (x ahead, y left) of ``pose`` in the world; the inverse of :func:`to_body`.

    >>> [round(v, 6) for v in to_world((1.0, 1.0, math.pi / 2), (2.0, 0.0))]
    [1.0, 3.0]
    """
    x, y, yaw = (float(v) for v in pose)
    c, s = math.cos(yaw), math.sin(yaw)
    return x + c * point_b[0] - s * point_b[1], y + s * point_b[0] + c * point_b[1]


def curvature(pose: Sequence[float], point: Sequence[float]) -> float:
    """Curvature 1/m of the arc from ``pose`` (tangent to its heading) through the world ``point``: positive
    turns left. 0 for a point straight ahead (or at the pose itself).

    >>> curvature((0.0, 0.0, 0.0), (1.0, 1.0))          # the arc of radius 1 m to the left
    1.0
    """
    xb, yb = to_body(pose, point)
    d2 = xb * xb + yb * yb
    return 2.0 * yb / d2 if d2 > 0.0 else 0.0


def _as_path(path) -> np.ndarray:
    p = np.asarray(path, dtype=float)
    if p.ndim != 2 or p.shape[1] != 2 or len(p) < 1 or not np.all(np.isfinite(p)):
        raise ValueError(f"a path is one or more finite (x, y) points, got shape {p.shape}")
    return p


def path_length(path) -> float:
    """Total length m of a polyline (N, 2).

    >>> path_length([(0, 0), (3, 0), (3, 4)])
    7.0
    """
    p = _as_path(path)
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum()) if len(p) > 1 else 0.0


class PathProgress(NamedTuple):
    """Where a point projects on a path: ``segment`` index (from point ``segment`` to ``segment + 1``), ``t``
    in [0, 1] along it, ``along_m`` from the path's start, ``cross_track_m`` (signed: left of the path
    positive), ``remaining_m`` to the path's end along it, ``closest`` the projected point."""

    segment: int
    t: float
    along_m: float
    cross_track_m: float
    remaining_m: float
    closest: tuple[float, float]


def project(path, point: Sequence[float], start_segment: int = 0, window: int | None = None) -> PathProgress:
    """The nearest point of ``path`` (N, 2) to ``point``, on segment ``start_segment`` or a later one (at most
    ``window`` segments later: a path that comes back near itself is then followed in order).

    A zero-length segment (a waypoint given twice) is skipped; a one-point path projects on its point.

    >>> pr = project([(0, 0), (2, 0), (2, 2)], (2.5, 1.0))
    >>> pr.segment, round(pr.t, 3), round(pr.along_m, 3), round(pr.cross_track_m, 3), round(pr.remaining_m, 3)
    (1, 0.5, 3.0, -0.5, 1.0)
    """
    p = _as_path(path)
    q = np.asarray(point, dtype=float).reshape(-1)[:2]
    if len(p) == 1:
        return PathProgress(0, 1.0, 0.0, 0.0, 0.0, (float(p[0, 0]), float(p[0, 1])))
    seg = np.diff(p, axis=0)
    lengths = np.linalg.norm(seg, axis=1)
    starts = np.concatenate([[0.0], np.cumsum(lengths)])
    total = float(starts[-1])
    best: PathProgress | None = None
    best_d2 = math.inf
    first = max(0, min(int(start_segment), len(seg) - 1))
    examined = 0
    for i in range(first, len(seg)):
        if lengths[i] <= 0.0:
            continue  # not counted in the window either
        examined += 1
        if window is not None and examined > window + 1:
            break
        rel = q - p[i]
        t = float(np.clip(rel @ seg[i] / lengths[i] ** 2, 0.0, 1.0))
        closest = p[i] + t * seg[i]
        d = q - closest
        d2 = float(d @ d)
        if d2 < best_d2 - 1e-12:
            cross = float(seg[i, 0] * rel[1] - seg[i, 1] * rel[0]) / float(lengths[i])  # left positive
            along = float(starts[i] + t * lengths[i])
            best_d2 = d2
            best = PathProgress(i, t, along, cross, total - along, (float(closest[0]), float(closest[1])))
    if best is None:  # every segment has zero length: the path is one point
        end = p[-1]
        return PathProgress(len(seg) - 1, 1.0, total, 0.0, 0.0, (float(end[0]), float(end[1])))
    return best


def lookahead_point(path, progress: PathProgress, lookahead_m: float, extend: bool = False) -> tuple[float, float]:
    """The point ``lookahead_m`` further along ``path`` than ``progress``; when less is left, the path's end, or
    with ``extend`` a point on the last segment's extension beyond it.

    >>> lookahead_point([(0, 0), (1, 0), (1, 5)], project([(0, 0), (1, 0), (1, 5)], (0.5, 0.2)), 1.0)
    (1.0, 0.5)
    >>> lookahead_point([(0, 0), (1, 0)], project([(0, 0), (1, 0)], (0.8, 0.1)), 0.5, extend=True)
    (1.3, 0.0)
    """
    p = _as_path(path)
    if len(p) == 1:
        return float(p[0, 0]), float(p[0, 1])
    target = progress.along_m + max(0.0, float(lookahead_m))
    seg = np.diff(p, axis=0)
    lengths = np.linalg.norm(seg, axis=1)
    start = 0.0
    for i, length in enumerate(lengths):
        if length > 0.0 and start + length >= target:
            t = (target - start) / length
            point = p[i] + t * seg[i]
            return float(point[0]), float(point[1])
        start += float(length)
    if extend:
        nonzero = np.flatnonzero(lengths > 0.0)
        if len(nonzero):
            i = int(nonzero[-1])
            beyond = target - start
            point = p[-1] + beyond * seg[i] / lengths[i]
            return round(float(point[0]), 12), round(float(point[1]), 12)
    return float(p[-1, 0]), float(p[-1, 1])


class PursuitCommand(NamedTuple):
    """One step's command: body ``linear_m_s`` and ``angular_rad_s`` (left positive), where the pose projects
    on the path, and whether the path is done (then both speeds are 0)."""

    linear_m_s: float
    angular_rad_s: float
    progress: PathProgress
    reached: bool


class PurePursuit:
    """Follow ``path`` ((N, 2) points, m, world frame) with pure pursuit; see the module docstring.

    ``lookahead_m`` the goal point's distance ahead along the path; ``speed_m_s`` the cruise speed;
    ``max_rate_rad_s`` the turn-rate limit; ``decel_m_s2`` the braking toward the end and
    ``turn_brake_rad_s2`` a turn in place's; ``min_rate_rad_s`` the slowest turn in place;
    ``goal_tolerance_m`` when the end counts as reached; ``min_speed_m_s`` the slowest approach
    (so the last centimetres do not take minutes); ``turn_in_place_rad`` the heading error beyond
    which it turns in place first. Invalid parameters raise :class:`ValueError`.
    """

    def __init__(self, path, *, lookahead_m: float = 0.3, speed_m_s: float = 0.2, max_rate_rad_s: float = 1.0,
                 decel_m_s2: float = 0.5, turn_brake_rad_s2: float = 2.0, goal_tolerance_m: float = 0.03,
                 min_speed_m_s: float = 0.02, min_rate_rad_s: float = 0.05,
                 turn_in_place_rad: float = math.radians(60.0)) -> None:
        self.path = _as_path(path)
        for name, v in (("lookahead_m", lookahead_m), ("speed_m_s", speed_m_s), ("max_rate_rad_s", max_rate_rad_s),
                        ("decel_m_s2", decel_m_s2), ("turn_brake_rad_s2", turn_brake_rad_s2),
                        ("goal_tolerance_m", goal_tolerance_m)):
            if not (math.isfinite(v) and v > 0.0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if not 0.0 < turn_in_place_rad <= math.pi:
            raise ValueError(f"turn_in_place_rad must be in (0, pi], got {turn_in_place_rad!r}")
        self.lookahead_m = float(lookahead_m)
        self.speed_m_s = float(speed_m_s)
        self.max_rate_rad_s = float(max_rate_rad_s)
        self.decel_m_s2 = float(decel_m_s2)
        self.turn_brake_rad_s2 = float(turn_brake_rad_s2)
        self.goal_tolerance_m = float(goal_tolerance_m)
        self.min_speed_m_s = min(float(min_speed_m_s), self.speed_m_s)
        self.min_rate_rad_s = min(float(min_rate_rad_s), self.max_rate_rad_s)
        self.turn_in_place_rad = float(turn_in_place_rad)
        self.segment = 0
        self.length_m = path_length(self.path)

    @property
    def goal(self) -> tuple[float, float]:
        return float(self.path[-1, 0]), float(self.path[-1, 1])

    def update(self, pose: Sequence[float], dt_s: float = 0.0) -> PursuitCommand:
        """The command for ``pose`` (x, y, yaw); ``dt_s`` the control step, for the stepped braking law."""
        x, y = float(pose[0]), float(pose[1])
        progress = project(self.path, (x, y), self.segment, window=2)
        self.segment = progress.segment
        goal = self.goal
        to_goal = math.hypot(goal[0] - x, goal[1] - y)
        near_end = progress.remaining_m <= self.goal_tolerance_m  # along the path: a loop's start is not its end
        if (near_end and to_goal <= self.goal_tolerance_m / 3.0) or (progress.remaining_m <= STOP_M and self.length_m > 0.0) \
                or (self.length_m == 0.0 and to_goal <= self.goal_tolerance_m):
            return PursuitCommand(0.0, 0.0, progress, True)
        target = lookahead_point(self.path, progress, self.lookahead_m, extend=True)
        xb, yb = to_body(pose, target)
        if math.hypot(xb, yb) < 1e-9:  # the goal point is where the robot stands: aim at the goal
            xb, yb = to_body(pose, goal)
        alpha = math.atan2(yb, xb)
        if abs(alpha) > self.turn_in_place_rad:
            rate = min(self.max_rate_rad_s, float(brake_speed(alpha, self.turn_brake_rad_s2, dt_s)))
            return PursuitCommand(0.0, math.copysign(max(rate, self.min_rate_rad_s), alpha), progress, False)
        # brake toward the end along the path (or straight, when that is shorter: cutting in at the end)
        remaining = min(progress.remaining_m, to_goal) if self.length_m > 0.0 else to_goal
        v = min(self.speed_m_s, max(self.min_speed_m_s, float(brake_speed(remaining, self.decel_m_s2, dt_s))))
        v *= max(0.0, math.cos(alpha))  # slower while the nose points away from the goal point
        kappa = 2.0 * yb / (xb * xb + yb * yb)
        w = v * kappa
        if abs(w) > self.max_rate_rad_s:  # keep the arc, slow down along it
            v *= self.max_rate_rad_s / abs(w)
            w = math.copysign(self.max_rate_rad_s, w)
        return PursuitCommand(v, w, progress, False)

    def heading_error(self, pose: Sequence[float]) -> float:
        """Signed angle rad from the robot's heading to the direction of the path's current segment.

        >>> round(PurePursuit([(0, 0), (0, 1)]).heading_error((0.0, 0.0, 0.0)), 6)    # facing east, path north
        1.570796
        """
        p = self.path
        if len(p) < 2:
            return 0.0
        i = min(self.segment, len(p) - 2)
        d = p[i + 1] - p[i]
        return wrap_pi(math.atan2(float(d[1]), float(d[0])) - float(pose[2]))
