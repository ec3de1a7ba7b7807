"""The simulated 2D world: a rectangular field, walls, box obstacles, tilted ramps, fiducial markers and steel.

Frames: world x east, y north, z up (REP-103); metres and radians.

Markers are square fiducials (OpenCV ArUco or AprilTag dictionaries) printed on
walls or boxes at known poses, so a vision pipeline can be tested against ground
truth: :class:`Marker` gives their corners in OpenCV's order, and the synthetic
camera (:mod:`sim.camera`) draws them with the same projection as everything else.

Steel objects (``[[sim.world.steel]]``, :class:`sim.magnetic.SteelObject`) bend the magnetic field near
them and are not obstacles (a pipe under the floor, a fence post's rebar); a box is an obstacle to the
rover and, for the UWB radio, a block of material the line of sight may cross
(:meth:`World.penetration_m`).

>>> w = World.from_config({"size_m": [4.0, 3.0]})
>>> round(w.raycast((1.0, 1.5), 0.0, 10.0), 3)   # east from x=1 to the east wall at x=4
3.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.magnetic import SteelObject


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


#: the predefined dictionaries of ``cv2.aruco`` a marker may use: name → (data bits per side, ids).
#: Plain data (sim/world.py does not import OpenCV); tests/sim/test_world.py checks it against cv2.aruco.
#: The default, DICT_4X4_50, has the fewest cells across (6 with the border) so a printed marker of a
#: given size has the biggest cells: detected farthest away and with the smallest corner error, and its
#: 50 ids are plenty for a field. AprilTag 36h11 (8 cells across, Hamming distance 11) trades range for
#: far fewer false detections in a cluttered real scene.
MARKER_DICTIONARIES: dict[str, tuple[int, int]] = {
    **{f"DICT_{n}X{n}_{k}": (n, k) for n in (4, 5, 6, 7) for k in (50, 100, 250, 1000)},
    "DICT_ARUCO_ORIGINAL": (5, 1024),
    "DICT_APRILTAG_16h5": (4, 30),
    "DICT_APRILTAG_25h9": (5, 35),
    "DICT_APRILTAG_36h10": (6, 2320),
    "DICT_APRILTAG_36h11": (6, 587),
    "DICT_ARUCO_MIP_36h12": (6, 250),
}
DEFAULT_MARKER_DICTIONARY = "DICT_4X4_50"
_MARKER_KEYS = ("id", "position", "yaw_deg", "size_m", "dictionary")


@dataclass(frozen=True)
class Marker:
    """A square fiducial standing upright: centre (x, y, z) m, facing ``yaw`` rad, black square ``size_m``.

    ``yaw`` is the ENU direction the printed face looks (its outward normal): a marker
    with yaw 0 is seen by a camera to its east looking west. ``size_m`` is the side of
    the black square (OpenCV's ``markerLength``); a white quiet zone one cell wide
    surrounds it. Marker axes (OpenCV's): x to the right and y up as seen from the
    front, z out of the face.

    >>> m = Marker(7, 1.0, 2.0, 0.3, 0.0, 0.2)
    >>> m.corners().round(3).tolist()     # TL, TR, BR, BL seen from the east (looking west, north is right)
    [[1.0, 1.9, 0.4], [1.0, 2.1, 0.4], [1.0, 2.1, 0.2], [1.0, 1.9, 0.2]]
    """

    id: int
    x: float
    y: float
    z: float
    yaw: float
    size_m: float
    dictionary: str = DEFAULT_MARKER_DICTIONARY

    @property
    def normal(self) -> np.ndarray:
        """Unit outward normal (3,), world frame."""
        return np.array([math.cos(self.yaw), math.sin(self.yaw), 0.0])

    @property
    def axes(self) -> np.ndarray:
        """R_world_marker (3, 3): columns are the marker's x (right), y (up) and z (out of the face)."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return np.array([[-s, 0.0, c], [c, 0.0, s], [0.0, 1.0, 0.0]])

    @property
    def bits(self) -> int:
        """Data cells per side (4 for DICT_4X4_*)."""
        return MARKER_DICTIONARIES[self.dictionary][0]

    def corners(self, scale: float = 1.0) -> np.ndarray:
        """World corners (4, 3) of the black square (``scale`` > 1: a larger concentric square),
        in OpenCV's order: top-left, top-right, bottom-right, bottom-left seen from the front."""
        h = 0.5 * self.size_m * scale
        local = np.array([[-h, h, 0.0], [h, h, 0.0], [h, -h, 0.0], [-h, -h, 0.0]])
        return local @ self.axes.T + np.array([self.x, self.y, self.z])

    @classmethod
    def from_config(cls, cfg: Any, where: str = "markers") -> "Marker":
        """One ``[[sim.world.markers]]`` table; :class:`ValueError` names the key that is wrong."""
        if not isinstance(cfg, dict):
            raise ValueError(f"{where} must be a table")
        unknown = sorted(str(k) for k in cfg if k not in _MARKER_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_MARKER_KEYS)})")
        dictionary = cfg.get("dictionary", DEFAULT_MARKER_DICTIONARY)
        if dictionary not in MARKER_DICTIONARIES:
            raise ValueError(f"{where}.dictionary {dictionary!r} is not one of {', '.join(MARKER_DICTIONARIES)}")
        mid = cfg.get("id")
        n_ids = MARKER_DICTIONARIES[dictionary][1]
        if isinstance(mid, bool) or not isinstance(mid, int) or not 0 <= mid < n_ids:
            raise ValueError(f"{where}.id must be an integer in [0, {n_ids - 1}] ({dictionary})")
        pos = cfg.get("position")
        if not isinstance(pos, (list, tuple)) or len(pos) != 3 or not all(_finite(v) for v in pos):
            raise ValueError(f"{where}.position must be [x, y, z] in metres (z: the centre's height)")
        yaw_deg = cfg.get("yaw_deg", 0.0)
        size = cfg.get("size_m")
        if not _finite(yaw_deg):
            raise ValueError(f"{where}.yaw_deg must be a finite number")
        if not _finite(size) or not 0.0 < size <= 10.0:
            raise ValueError(f"{where}.size_m must be a number in (0, 10] metres")
        return cls(mid, float(pos[0]), float(pos[1]), float(pos[2]), math.radians(float(yaw_deg)), float(size),
                   dictionary)


def _finite(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


@dataclass
class World:
    """Field of ``size_m`` (x from 0 to width, y from 0 to height) enclosed by walls."""

    width_m: float
    height_m: float
    walls: list[Segment] = field(default_factory=list)
    boxes: list[Box] = field(default_factory=list)
    ramps: list[Ramp] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    steel: list[SteelObject] = field(default_factory=list)

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
        markers = cfg.get("markers", [])
        if not isinstance(markers, list):
            raise ValueError("markers must be a list of tables ([[sim.world.markers]])")
        seen: set[tuple[str, int]] = set()
        for i, m in enumerate(markers):
            marker = Marker.from_config(m, f"markers[{i}]")
            if (marker.dictionary, marker.id) in seen:  # the map would be ambiguous
                raise ValueError(f"markers[{i}]: id {marker.id} ({marker.dictionary}) is used twice")
            seen.add((marker.dictionary, marker.id))
            world.markers.append(marker)
        steel = cfg.get("steel", [])
        if not isinstance(steel, list):
            raise ValueError("steel must be a list of tables ([[sim.world.steel]])")
        world.steel = [SteelObject.from_config(obj, f"steel[{i}]") for i, obj in enumerate(steel)]
        world._build_segments()
        return world

    def penetration_m(self, a, b) -> float:
        """Length (m) of the 3D segment from ``a`` to ``b`` (world points [x, y, z]) inside the boxes (each
        from the floor to its ``height_m``): how much material a radio path crosses. Walls are not counted
        (the field's boundary holds the anchors; interior walls have no thickness in the plan).

        >>> w = World.from_config({"size_m": [6.0, 4.0], "boxes": [{"center": [3.0, 2.0], "size": [0.4, 0.4]}]})
        >>> round(w.penetration_m([1.0, 2.0, 0.1], [5.0, 2.0, 0.1]), 6)      # straight through, 0.4 m
        0.4
        >>> w.penetration_m([1.0, 2.0, 0.1], [5.0, 2.0, 2.0])                # over the 0.5 m box
        0.0
        """
        pa, pb = np.asarray(a, dtype=float).reshape(3), np.asarray(b, dtype=float).reshape(3)
        d = pb - pa
        length = float(np.linalg.norm(d))
        total = 0.0
        for box in self.boxes:
            c, s_ = math.cos(box.yaw), math.sin(box.yaw)
            ox, oy = pa[0] - box.x, pa[1] - box.y
            # the segment in the box's frame: start, direction (x, y local; z as is)
            start = (c * ox + s_ * oy, -s_ * ox + c * oy, pa[2])
            step = (c * d[0] + s_ * d[1], -s_ * d[0] + c * d[1], d[2])
            lo, hi = 0.0, 1.0
            for p0, dp, bmin, bmax in ((start[0], step[0], -box.sx / 2, box.sx / 2),
                                       (start[1], step[1], -box.sy / 2, box.sy / 2),
                                       (start[2], step[2], 0.0, box.height_m)):
                if abs(dp) < 1e-15:  # parallel to the slab: inside it or not at all
                    if not bmin <= p0 <= bmax:
                        lo, hi = 1.0, 0.0
                        break
                    continue
                t0, t1 = (bmin - p0) / dp, (bmax - p0) / dp
                lo, hi = max(lo, min(t0, t1)), min(hi, max(t0, t1))
                if lo >= hi:
                    break
            if hi > lo:
                total += float((hi - lo) * length)
        return total

    def marker(self, marker_id: int, dictionary: str = DEFAULT_MARKER_DICTIONARY) -> Marker:
        """The marker with this id (``KeyError`` if there is none)."""
        for m in self.markers:
            if m.id == marker_id and m.dictionary == dictionary:
                return m
        raise KeyError(f"no marker {marker_id} ({dictionary}) in the world")

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
