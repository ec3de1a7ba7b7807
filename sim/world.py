"""The simulated 2D world: a rectangular field, walls, box obstacles and tilted ramps.

Frames: world x east, y north, z up (REP-103); metres and radians.

>>> w = World.from_config({"size_m": [4.0, 3.0]})
>>> round(w.raycast((1.0, 1.5), 0.0, 10.0), 3)   # east from x=1 to the east wall at x=4
3.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Segment:
    """A wall segment from (x0, y0) to (x1, y1), metres, world frame."""

    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class Box:
    """A box obstacle: centre (x, y) m, size (sx, sy) m, yaw rad, height m."""

    x: float
    y: float
    sx: float
    sy: float
    yaw: float = 0.0
    height_m: float = 0.5

    def corners(self) -> np.ndarray:
        """Corners (4, 2) in the world frame, counter-clockwise."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        hx, hy = self.sx / 2.0, self.sy / 2.0
        local = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy]])
        rot = np.array([[c, -s], [s, c]])
        return local @ rot.T + np.array([self.x, self.y])

    def segments(self) -> list[Segment]:
        k = self.corners()
        return [Segment(*k[i], *k[(i + 1) % 4]) for i in range(4)]


@dataclass(frozen=True)
class Ramp:
    """A tilted rectangle of ground: centre (x, y), size (sx, sy) m, yaw rad.

    The ground inside rises along the ramp's local +x by ``slope_rad``
    (height grows with local x); ``cross_slope_rad`` tilts it along local +y.
    """

    x: float
    y: float
    sx: float
    sy: float
    yaw: float = 0.0
    slope_rad: float = 0.0
    cross_slope_rad: float = 0.0

    def contains(self, px: float, py: float) -> bool:
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        dx, dy = px - self.x, py - self.y
        lx, ly = c * dx + s * dy, -s * dx + c * dy
        return abs(lx) <= self.sx / 2.0 and abs(ly) <= self.sy / 2.0

    def gradient(self) -> tuple[float, float]:
        """dz/dx, dz/dy of the ramp surface in the world frame."""
        gx_l, gy_l = math.tan(self.slope_rad), math.tan(self.cross_slope_rad)
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return c * gx_l - s * gy_l, s * gx_l + c * gy_l


@dataclass
class World:
    """Field of ``size_m`` (x from 0 to width, y from 0 to height) enclosed by walls."""

    width_m: float
    height_m: float
    walls: list[Segment] = field(default_factory=list)
    boxes: list[Box] = field(default_factory=list)
    ramps: list[Ramp] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: dict) -> "World":
        """Build from the ``[sim.world]`` table (already validated by the config loader)."""
        w, h = (float(v) for v in cfg.get("size_m", [6.0, 4.0]))
        world = cls(w, h)
        world.walls = [Segment(0, 0, w, 0), Segment(w, 0, w, h), Segment(w, h, 0, h), Segment(0, h, 0, 0)]
        for seg in cfg.get("walls", []):
            world.walls.append(Segment(*(float(v) for v in seg["from"]), *(float(v) for v in seg["to"])))
        for b in cfg.get("boxes", []):
            world.boxes.append(
                Box(
                    float(b["center"][0]), float(b["center"][1]), float(b["size"][0]), float(b["size"][1]),
                    math.radians(float(b.get("yaw_deg", 0.0))), float(b.get("height_m", 0.5)),
                )
            )
        for r in cfg.get("ramps", []):
            world.ramps.append(
                Ramp(
                    float(r["center"][0]), float(r["center"][1]), float(r["size"][0]), float(r["size"][1]),
                    math.radians(float(r.get("yaw_deg", 0.0))), math.radians(float(r.get("slope_deg", 0.0))),
                    math.radians(float(r.get("cross_slope_deg", 0.0))),
                )
            )
        world._build_segments()
        return world

    def __post_init__(self) -> None:
        self._build_segments()

    def _build_segments(self) -> None:
        segs = list(self.walls)
        for b in self.boxes:
            segs.extend(b.segments())
        arr = np.array([[s.x0, s.y0, s.x1, s.y1] for s in segs], dtype=float).reshape(-1, 4)
        self._p = arr[:, :2]
        self._d = arr[:, 2:] - arr[:, :2]

    def all_segments(self) -> np.ndarray:
        """All obstacle edges as an (N, 4) array of x0, y0, x1, y1."""
        return np.hstack([self._p, self._p + self._d])

    def raycast(self, origin: tuple[float, float], angle: float, max_range: float) -> float:
        """Distance from ``origin`` along world ``angle`` to the first edge, or ``math.inf`` past ``max_range``."""
        ox, oy = origin
        rx, ry = math.cos(angle), math.sin(angle)
        px, py = self._p[:, 0] - ox, self._p[:, 1] - oy
        dx, dy = self._d[:, 0], self._d[:, 1]
        den = rx * dy - ry * dx
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (px * dy - py * dx) / den  # distance along the ray
            u = (px * ry - py * rx) / den  # position along the segment, 0..1
        # a small tolerance on u so a ray through a shared corner cannot slip
        # between two edges on rounding (grazing a box corner gave math.inf)
        ok = (np.abs(den) > 1e-12) & (t >= 0.0) & (u >= -1e-9) & (u <= 1.0 + 1e-9)
        if not ok.any():
            return math.inf
        d = float(t[ok].min())
        return d if d <= max_range else math.inf

    def clearance(self, x: float, y: float) -> float:
        """Distance from point (x, y) to the nearest edge, metres; ``math.inf`` with no edges."""
        if len(self._p) == 0:
            return math.inf
        p = np.array([x, y])
        rel = p - self._p
        dd = (self._d ** 2).sum(axis=1)
        u = np.clip((rel * self._d).sum(axis=1) / np.where(dd > 0, dd, 1.0), 0.0, 1.0)
        nearest = self._p + self._d * u[:, None]
        return float(np.sqrt(((nearest - p) ** 2).sum(axis=1)).min())

    def inside_obstacle(self, x: float, y: float) -> bool:
        """True outside the field or inside a box."""
        if not (0.0 <= x <= self.width_m and 0.0 <= y <= self.height_m):
            return True
        for b in self.boxes:
            c, s = math.cos(b.yaw), math.sin(b.yaw)
            dx, dy = x - b.x, y - b.y
            if abs(c * dx + s * dy) <= b.sx / 2 and abs(-s * dx + c * dy) <= b.sy / 2:
                return True
        return False

    def ground_gradient(self, x: float, y: float) -> tuple[float, float]:
        """dz/dx, dz/dy of the ground at (x, y); flat (0, 0) outside ramps."""
        for r in self.ramps:
            if r.contains(x, y):
                return r.gradient()
        return 0.0, 0.0
