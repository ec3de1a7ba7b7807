"""Planar position fixes from fiducial markers at known places: range, bearing and facing → pose.

A camera that sees a marker of known size measures where it is relative to the
robot; with the marker's surveyed place in the world (the *marker map*) that
becomes a fix of the robot's own place, the way UWB ranges to anchors do.

Measurement model, planar (world x east, y north; yaw the ENU yaw of body x):
the robot at ``(x, y, yaw)`` sees marker ``m`` at ``(mx, my)`` whose printed face
looks towards ``psi`` (its outward normal, ENU) as

* ``range_m   = |(mx, my) − (x, y)|``, horizontal distance from the body origin;
* ``bearing   = atan2(my − y, mx − x) − yaw``, CCW from body x (left positive);
* ``facing    = psi − yaw``, the direction of the marker's normal in the body
  frame (from the marker's pose; noisier than range and bearing, and optional).

Three numbers per marker with facing, two without: one marker with its facing,
or two markers without, fix all of ``(x, y, yaw)`` (:func:`fix_pose`, weighted
Gauss-Newton; covariance ``(JᵀWJ)⁻¹`` at the solution). With the heading known
from elsewhere (the estimator's yaw), each marker alone fixes the position
(:func:`fix_position`), whose covariance carries the heading's uncertainty:
that is the fix an odometry+UWB filter fuses like a UWB fix.

Noise of a marker measurement (:func:`observation_sigmas`): the corners are
found to about ``corner_sigma_px`` pixels, so the apparent size ``f·L/r`` of a
marker of side ``L`` is good to that, and the range error grows as ``r²``;
bearing is good to about a pixel's angle; facing needs a big marker. The corner
accuracy default comes from the sim camera (tests/sim/test_camera.py: corners within
0.75 px, mostly under 0.5, on the 640×480 sim image).

>>> marker_map = {1: (4.0, 2.0, math.pi), 2: (4.0, 0.0, math.pi)}
>>> obs = [observe((1.0, 1.0, 0.0), marker_map[i], i) for i in (1, 2)]
>>> fix = fix_pose(obs, marker_map)
>>> [round(v, 6) for v in (fix.x, fix.y, fix.yaw)], fix.used
([1.0, 1.0, 0.0], (1, 2))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from robotics.angles import wrap_pi

__all__ = [
    "MarkerFix", "MarkerFixError", "MarkerObservation", "fix_pose", "fix_position", "observation_sigmas", "observe",
]


class MarkerFixError(ValueError):
    """The observations cannot fix what was asked (too few, unknown markers, degenerate geometry)."""


@dataclass(frozen=True)
class MarkerObservation:
    """One marker seen from the robot (body frame, planar; see the module docstring).

    ``facing_rad`` is NaN when not measured. Sigmas are standard deviations.

    >>> MarkerObservation(3, 2.0, 0.1).has_facing
    False
    """

    marker_id: int
    range_m: float
    bearing_rad: float
    facing_rad: float = math.nan
    range_sigma_m: float = 0.05
    bearing_sigma_rad: float = 0.01
    facing_sigma_rad: float = 0.2

    def __post_init__(self) -> None:
        if not (math.isfinite(self.range_m) and self.range_m > 0.0 and math.isfinite(self.bearing_rad)):
            raise ValueError(f"marker {self.marker_id}: range_m must be finite and > 0 and bearing_rad finite")
        for name in ("range_sigma_m", "bearing_sigma_rad", "facing_sigma_rad"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0.0):
                raise ValueError(f"marker {self.marker_id}: {name} must be finite and > 0, got {v}")

    @property
    def has_facing(self) -> bool:
        return math.isfinite(self.facing_rad)


@dataclass(frozen=True)
class MarkerFix:
    """A fix: pose ``(x, y, yaw)`` (m, m, rad) or, from :func:`fix_position`, ``yaw`` as given.

    ``covariance`` is 3×3 over ``(x, y, yaw)`` (:func:`fix_pose`) or 2×2 over
    ``(x, y)`` (:func:`fix_position`); ``used`` the marker ids it rests on;
    ``chi2`` the weighted squared residual and ``dof`` its degrees of freedom
    (measurements − unknowns): ``chi2/dof`` far above 1 means an observation does
    not fit the map (a misread id, a moved marker).
    """

    x: float
    y: float
    yaw: float
    covariance: np.ndarray = field(repr=False)
    used: tuple[int, ...]
    chi2: float = 0.0
    dof: int = 0

    @property
    def position(self) -> tuple[float, float]:
        return self.x, self.y

    @property
    def position_sigma_m(self) -> float:
        """The larger standard deviation of the position (the long axis of its ellipse), m."""
        return math.sqrt(max(float(np.linalg.eigvalsh(self.covariance[:2, :2]).max()), 0.0))


def observe(pose: Sequence[float], marker: Sequence[float], marker_id: int = 0, **sigmas: float) -> MarkerObservation:
    """The noise-free observation of ``marker`` = (mx, my, psi) from ``pose`` = (x, y, yaw).

    >>> o = observe((0.0, 0.0, math.pi / 2), (0.0, 2.0, -math.pi / 2))   # straight ahead, facing us
    >>> round(o.range_m, 6), round(o.bearing_rad, 6), round(o.facing_rad, 6)
    (2.0, 0.0, -3.141593)
    """
    x, y, yaw = (float(v) for v in pose)
    mx, my, psi = (float(v) for v in marker)
    return MarkerObservation(marker_id, math.hypot(mx - x, my - y), wrap_pi(math.atan2(my - y, mx - x) - yaw),
                             wrap_pi(psi - yaw), **sigmas)


def observation_sigmas(range_m: float, marker_size_m: float, focal_px: float,
                       corner_sigma_px: float = 0.5) -> tuple[float, float, float]:
    """(range, bearing, facing) standard deviations of one marker seen at ``range_m``.

    Range from the apparent size: ``r = f·L/s`` with ``s`` good to ``corner_sigma_px``
    gives ``σr = r²·σpx/(f·L)``; bearing ``σpx/f``. Facing comes from perspective alone
    (near frontal, turning the square by θ changes its width only to second order):
    its near edge looks taller than its far edge by ``s²·θ/f`` px, so
    ``σθ = √2·σpx·f/s²`` rad, at least 2°: useless for a marker 20 px wide (0.6 rad),
    good to ~3° at 80 px.

    >>> [round(v, 4) for v in observation_sigmas(2.0, 0.2, 500.0)]
    [0.02, 0.001, 0.1414]
    """
    if not (range_m > 0 and marker_size_m > 0 and focal_px > 0 and corner_sigma_px > 0):
        raise ValueError("range_m, marker_size_m, focal_px and corner_sigma_px must be > 0")
    size_px = focal_px * marker_size_m / range_m
    return (range_m * range_m * corner_sigma_px / (focal_px * marker_size_m), corner_sigma_px / focal_px,
            max(math.sqrt(2.0) * corner_sigma_px * focal_px / size_px**2, math.radians(2.0)))


def _known(observations: Iterable[MarkerObservation], marker_map: Mapping[int, Sequence[float]]):
    obs = [o for o in observations if o.marker_id in marker_map]
    return obs, [tuple(float(v) for v in marker_map[o.marker_id]) for o in obs]


def _residuals(state: np.ndarray, obs: list[MarkerObservation], marks: list[tuple[float, ...]]):
    """Whitened residuals (measured − predicted)/σ and their Jacobian w.r.t. (x, y, yaw)."""
    x, y, yaw = state
    res, jac = [], []
    for o, (mx, my, psi) in zip(obs, marks):
        dx, dy = mx - x, my - y
        r2 = max(dx * dx + dy * dy, 1e-12)
        r = math.sqrt(r2)
        res.append((o.range_m - r) / o.range_sigma_m)
        jac.append(np.array([dx / r, dy / r, 0.0]) / o.range_sigma_m)  # d(−r)/d state → residual Jacobian
        res.append(wrap_pi(o.bearing_rad - (math.atan2(dy, dx) - yaw)) / o.bearing_sigma_rad)
        jac.append(np.array([-dy / r2, dx / r2, 1.0]) / o.bearing_sigma_rad)
        if o.has_facing:
            res.append(wrap_pi(o.facing_rad - (psi - yaw)) / o.facing_sigma_rad)
            jac.append(np.array([0.0, 0.0, 1.0]) / o.facing_sigma_rad)
    return np.array(res), np.array(jac)


def _initial_guess(obs: list[MarkerObservation], marks: list[tuple[float, ...]]) -> np.ndarray:
    """Yaw from a facing, or from the direction between two markers; position from the first marker."""
    with_facing = [i for i, o in enumerate(obs) if o.has_facing]
    if with_facing:
        i = with_facing[0]
        yaw = wrap_pi(marks[i][2] - obs[i].facing_rad)
    else:
        # the world vector between two markers is the body vector between them turned by yaw;
        # use the pair farthest apart (best conditioned)
        pts = [o.range_m * np.array([math.cos(o.bearing_rad), math.sin(o.bearing_rad)]) for o in obs]
        best, pair = -1.0, (0, 1)
        for a in range(len(obs)):
            for b in range(a + 1, len(obs)):
                d = float(np.hypot(marks[b][0] - marks[a][0], marks[b][1] - marks[a][1]))
                if d > best:
                    best, pair = d, (a, b)
        a, b = pair
        world = np.subtract(marks[b][:2], marks[a][:2])
        body = pts[b] - pts[a]
        yaw = wrap_pi(math.atan2(world[1], world[0]) - math.atan2(body[1], body[0]))
    o, m = obs[0], marks[0]
    ang = yaw + o.bearing_rad
    return np.array([m[0] - o.range_m * math.cos(ang), m[1] - o.range_m * math.sin(ang), yaw])


def fix_pose(observations: Iterable[MarkerObservation], marker_map: Mapping[int, Sequence[float]], *,
             guess: Sequence[float] | None = None, iterations: int = 20) -> MarkerFix:
    """The pose (x, y, yaw) that best explains the observations of markers in ``marker_map``.

    ``marker_map``: id → ``(x, y, psi)`` (m, m, rad: the direction the face looks).
    Observations of ids not in the map are ignored. Needs one marker with its facing
    or two markers; raises :class:`MarkerFixError` otherwise, or when two markers
    seen from along their common line leave the geometry degenerate.

    >>> m = {4: (2.0, 0.0, math.pi)}                      # on a wall, facing west
    >>> f = fix_pose([MarkerObservation(4, 2.0, 0.0, facing_rad=math.pi)], m)
    >>> [round(v, 6) for v in (f.x, f.y, f.yaw)], round(f.position_sigma_m, 3)
    ([0.0, 0.0, 0.0], 0.4)
    >>> fix_pose([MarkerObservation(4, 2.0, 0.0)], m)
    Traceback (most recent call last):
    ...
    robotics.estimation.markers.MarkerFixError: one marker without its facing cannot fix the heading: need 2 markers or a facing
    """
    obs, marks = _known(observations, marker_map)
    if not obs:
        raise MarkerFixError("no observation of a marker in the map")
    n_rows = sum(3 if o.has_facing else 2 for o in obs)
    if n_rows < 3:
        raise MarkerFixError("one marker without its facing cannot fix the heading: need 2 markers or a facing")
    state = np.array(guess, dtype=float) if guess is not None else _initial_guess(obs, marks)
    if state.shape != (3,) or not np.all(np.isfinite(state)):
        raise MarkerFixError("guess must be finite (x, y, yaw)")
    res, jac = _residuals(state, obs, marks)
    cost = float(res @ res)
    for _ in range(iterations):
        try:
            step = np.linalg.lstsq(jac, -res, rcond=None)[0]
        except np.linalg.LinAlgError as err:  # pragma: no cover - lstsq on finite input does not raise
            raise MarkerFixError(f"degenerate geometry: {err}") from err
        # residual r = z − h(state); the Jacobian above is d(−h)/d state, so r(state + δ) ≈ r + J δ
        trial = state + step
        trial[2] = wrap_pi(float(trial[2]))
        t_res, t_jac = _residuals(trial, obs, marks)
        t_cost = float(t_res @ t_res)
        if t_cost > cost:  # Gauss-Newton overshot: halve once more before giving up
            trial = state + 0.5 * step
            trial[2] = wrap_pi(float(trial[2]))
            t_res, t_jac = _residuals(trial, obs, marks)
            t_cost = float(t_res @ t_res)
            if t_cost > cost:
                break
        state, res, jac, cost = trial, t_res, t_jac, t_cost
        if float(np.abs(step).max()) < 1e-10:
            break
    info = jac.T @ jac
    if np.linalg.cond(info) > 1e12:
        raise MarkerFixError("degenerate geometry: the markers seen do not fix the pose (all along one line?)")
    cov = np.linalg.inv(info)
    cov = 0.5 * (cov + cov.T)
    return MarkerFix(float(state[0]), float(state[1]), float(state[2]), cov, tuple(o.marker_id for o in obs),
                     cost, n_rows - 3)


def fix_position(observations: Iterable[MarkerObservation], marker_map: Mapping[int, Sequence[float]],
                 yaw: float, yaw_sigma_rad: float = 0.0) -> MarkerFix:
    """The position (x, y) from markers in ``marker_map`` with the heading ``yaw`` known (± ``yaw_sigma_rad``).

    Each marker gives ``p = m − r·(cos(yaw+b), sin(yaw+b))``; they are averaged with
    weights from their range and bearing noise, and the heading's error, common to
    all of them, is added afterwards (it does not average out). Facings are not
    used. ``covariance`` is 2×2; ``yaw`` of the result is the one given.

    >>> m = {1: (3.0, 1.0, math.pi)}
    >>> f = fix_position([observe((1.0, 1.0, 0.0), m[1], 1, range_sigma_m=0.02, bearing_sigma_rad=0.01)], m, 0.0)
    >>> [round(v, 6) for v in f.position], np.sqrt(np.diag(f.covariance)).round(3).tolist()
    ([1.0, 1.0], [0.02, 0.02])
    """
    obs, marks = _known(observations, marker_map)
    if not obs:
        raise MarkerFixError("no observation of a marker in the map")
    if not (math.isfinite(yaw) and math.isfinite(yaw_sigma_rad) and yaw_sigma_rad >= 0.0):
        raise MarkerFixError("yaw and yaw_sigma_rad must be finite (sigma >= 0)")
    points, infos, yaw_jacs = [], [], []
    for o, (mx, my, _) in zip(obs, marks):
        ang = yaw + o.bearing_rad
        u = np.array([math.cos(ang), math.sin(ang)])  # along the line of sight
        v = np.array([-u[1], u[0]])  # across it
        points.append(np.array([mx, my]) - o.range_m * u)
        # range error moves p along u, bearing error across it by r·σb
        cov = np.outer(u, u) * o.range_sigma_m**2 + np.outer(v, v) * (o.range_m * o.bearing_sigma_rad) ** 2
        infos.append(np.linalg.inv(cov))
        yaw_jacs.append(-o.range_m * v)  # dp/dyaw = −r·du/dang = −r·v
    info = sum(infos)
    cov = np.linalg.inv(info)
    weights = [cov @ i for i in infos]
    p = sum(w @ q for w, q in zip(weights, points))
    chi2 = float(sum((q - p) @ i @ (q - p) for q, i in zip(points, infos)))
    j_yaw = sum(w @ j for w, j in zip(weights, yaw_jacs))
    cov = cov + np.outer(j_yaw, j_yaw) * yaw_sigma_rad**2
    return MarkerFix(float(p[0]), float(p[1]), float(wrap_pi(yaw)), 0.5 * (cov + cov.T),
                     tuple(o.marker_id for o in obs), chi2, 2 * len(obs) - 2)

