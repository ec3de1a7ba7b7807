"""A synthetic first-person camera: the :class:`~sim.world.World` drawn in perspective with OpenCV.

What it draws, back to front: sky and ground split at the true horizon (which
follows the camera's roll and pitch), ramps as tinted floor patches, a floor
grid over the field, the field walls and box obstacles as shaded faces
(painter's algorithm, back faces culled, clipped at the near plane so
geometry beside or behind the camera never folds over the image), fiducial
markers on them, and a text overlay with the sim time and frame number.

Markers (:class:`sim.world.Marker`) are the dictionary's bitmap (``cv2.aruco``,
one cell per pixel, a white quiet zone one cell wide) mapped onto the marker's
square by the homography the pinhole projection induces on its plane, so a
detector given the same intrinsics finds their corners where the world puts
them. The bitmap is taken from a pyramid at about one texel per image pixel and
warped with bilinear interpolation, which anti-aliases the black square's edges
(sub-pixel corners, as a real lens gives). A marker is drawn right after the
face it is printed on (same plane, within 1 cm), so boxes in front hide it;
one on no face is ordered on its own.

Frames (REP-103): world x east, y north, z up. The robot pose is a mapping with
``x, y, z`` (m, z of the ground contact) and ``yaw, pitch, roll`` (rad) where
R_world_body = Rz(yaw)·Ry(pitch)·Rx(roll), body x forward, y left, z up:
positive pitch is nose down, positive roll is right side down. The camera sits
on the body at :class:`CameraMount` and looks along body x, tilted down by
``mount.pitch_rad``. Image pixels: u right, v down, origin top left.

Pure and deterministic: the same inputs give the same image; sensor noise is
drawn only from the ``rng`` passed in. Nothing reads the wall clock.

>>> from sim.world import Marker, World
>>> w = World.from_config({"size_m": [6.0, 4.0]})
>>> img = render(w, {"x": 1.0, "y": 2.0, "yaw": 0.0}, CameraIntrinsics(160, 120), t_s=0.0, frame_no=0)
>>> img.shape, img.dtype.name
((120, 160, 3), 'uint8')
>>> bool((img == render(w, {"x": 1.0, "y": 2.0, "yaw": 0.0}, CameraIntrinsics(160, 120), 0.0, 0)).all())
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Mapping

import cv2
import numpy as np

from robotics.estimation.attitude import rotation_zyx

from sim.world import Marker, World

#: height of walls (the world is a plan; walls have no height of their own), m
WALL_HEIGHT_M = 0.5
#: spacing of the floor grid, m
GRID_STEP_M = 0.5

# BGR colours
SKY_BGR = (235, 206, 160)
HAZE_BGR = (245, 235, 215)
GROUND_BGR = (92, 112, 104)
GRID_BGR = (150, 165, 160)
RAMP_BGR = (70, 130, 170)
WALL_BGR = np.array((190, 190, 200), dtype=float)
BOX_BGR = np.array((60, 120, 215), dtype=float)
TEXT_BGR = (255, 255, 255)

# light direction (world, unit), from the south-east and above: faces get distinct shades
_LIGHT = np.array([0.4, -0.6, 0.7])
_LIGHT /= np.linalg.norm(_LIGHT)


@dataclass(frozen=True)
class CameraIntrinsics:
    """An ideal pinhole camera: image size (px), horizontal field of view (rad), sensor noise.

    ``noise_sigma`` is the standard deviation of Gaussian noise in grey levels,
    added only when :func:`render` gets an ``rng``. ``near_m`` is the near
    clipping plane.

    >>> round(CameraIntrinsics(640, 480, math.radians(90)).focal_px, 6)
    320.0
    """

    width: int = 640
    height: int = 480
    hfov_rad: float = math.radians(70.0)
    noise_sigma: float = 0.0
    near_m: float = 0.05

    def __post_init__(self) -> None:
        if self.width < 8 or self.height < 8:
            raise ValueError("image must be at least 8x8 pixels")
        if not 0.0 < self.hfov_rad < math.pi:
            raise ValueError("hfov_rad must be in (0, pi)")
        if self.noise_sigma < 0 or self.near_m <= 0:
            raise ValueError("noise_sigma must be >= 0 and near_m > 0")

    @property
    def focal_px(self) -> float:
        """Focal length in pixels (square pixels)."""
        return (self.width / 2.0) / math.tan(self.hfov_rad / 2.0)


@dataclass(frozen=True)
class CameraMount:
    """Where the camera sits on the robot, in the body frame (m, rad).

    ``pitch_rad`` tilts it down (positive, like body pitch).
    """

    forward_m: float = 0.10
    height_m: float = 0.25
    pitch_rad: float = 0.0


def camera_pose(pose: Mapping[str, float], mount: CameraMount) -> tuple[np.ndarray, np.ndarray]:
    """Camera centre in the world (3,) and R_world_cam (3, 3), camera axes x forward, y left, z up."""
    R_wb = rotation_zyx(float(pose.get("roll", 0.0)), float(pose.get("pitch", 0.0)), float(pose.get("yaw", 0.0)))
    p = np.array([float(pose.get("x", 0.0)), float(pose.get("y", 0.0)), float(pose.get("z", 0.0))])
    centre = p + R_wb @ np.array([mount.forward_m, 0.0, mount.height_m])
    cp, sp = math.cos(mount.pitch_rad), math.sin(mount.pitch_rad)
    R_bc = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    return centre, R_wb @ R_bc


class _Projector:
    """World points → camera coordinates → pixels, for one camera pose."""

    def __init__(self, centre: np.ndarray, R_world_cam: np.ndarray, k: CameraIntrinsics) -> None:
        self.c = centre
        self.R = R_world_cam
        self.f = k.focal_px
        self.cx = k.width / 2.0
        self.cy = k.height / 2.0
        self.near = k.near_m

    def to_cam(self, pts: np.ndarray) -> np.ndarray:
        """(..., 3) world → (..., 3) camera (x forward = depth, y left, z up)."""
        return (pts - self.c) @ self.R

    def to_px(self, cam: np.ndarray) -> np.ndarray:
        """(..., 3) camera points with depth ≥ near → (..., 2) pixel coordinates (float)."""
        inv = self.f / cam[..., 0]
        return np.stack((self.cx - cam[..., 1] * inv, self.cy - cam[..., 2] * inv), axis=-1)


# fixed-point pixel coordinates for OpenCV drawing (sub-pixel accurate edges)
_SHIFT = 4
_SCALE = float(1 << _SHIFT)
_LIMIT = 1e6  # px; keeps fixed-point values well inside int32 after near-plane clipping


def _fixed(px: np.ndarray) -> np.ndarray:
    return np.round(np.clip(px, -_LIMIT, _LIMIT) * _SCALE).astype(np.int32)


def _clip_polygon_near(cam: np.ndarray, near: float) -> np.ndarray:
    """Sutherland–Hodgman against the plane depth = near; (N, 3) → (M, 3), M may be 0."""
    out = []
    n = len(cam)
    for i in range(n):
        a, b = cam[i], cam[(i + 1) % n]
        a_in, b_in = a[0] >= near, b[0] >= near
        if a_in:
            out.append(a)
        if a_in != b_in:
            t = (near - a[0]) / (b[0] - a[0])
            out.append(a + t * (b - a))
    return np.array(out).reshape(-1, 3)


def _horizon(proj: _Projector, w: int, h: int) -> tuple[np.ndarray | None, tuple[float, float, float]]:
    """The ground polygon in pixels (image rectangle ∩ rays pointing down) and the horizon line a·u + b·v + c = 0."""
    r = proj.R[2]  # world-z component of the camera axes
    # ray through (u, v) in camera axes: (1, -(u - cx)/f, -(v - cy)/f); its world z is linear in u, v
    a = -r[1] / proj.f
    b = -r[2] / proj.f
    c = r[0] + r[1] * proj.cx / proj.f + r[2] * proj.cy / proj.f
    rect = np.array([[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]])
    g = rect @ np.array([a, b]) + c  # < 0: looking down at the ground
    pts = []
    for i in range(4):
        p, q, gp, gq = rect[i], rect[(i + 1) % 4], g[i], g[(i + 1) % 4]
        if gp < 0:
            pts.append(p)
        if (gp < 0) != (gq < 0):
            pts.append(p + (gp / (gp - gq)) * (q - p))
    return (np.array(pts) if len(pts) >= 3 else None), (a, b, c)


def _grid_segments(world: World, step: float) -> np.ndarray:
    """Floor grid lines over the field as (N, 2, 3) world segments at z = 0."""
    xs = np.arange(0.0, world.width_m + 1e-9, step)
    ys = np.arange(0.0, world.height_m + 1e-9, step)
    v = np.zeros((len(xs), 2, 3))
    v[:, :, 0] = xs[:, None]
    v[:, 1, 1] = world.height_m
    hz = np.zeros((len(ys), 2, 3))
    hz[:, :, 1] = ys[:, None]
    hz[:, 1, 0] = world.width_m
    return np.concatenate((v, hz))


def _draw_segments(img: np.ndarray, proj: _Projector, seg: np.ndarray, colour, thickness: int = 1) -> None:
    """Draw (N, 2, 3) world segments clipped at the near plane, in one ``cv2.polylines`` call."""
    cam = proj.to_cam(seg)
    d0, d1 = cam[:, 0, 0], cam[:, 1, 0]
    keep = (d0 >= proj.near) | (d1 >= proj.near)
    cam, d0, d1 = cam[keep], d0[keep], d1[keep]
    if not len(cam):
        return
    # move the endpoint behind the near plane onto it (vectorised one-plane clip)
    t = np.where(d0 == d1, 0.0, (proj.near - d0) / np.where(d0 == d1, 1.0, d1 - d0))
    p_near = cam[:, 0] + t[:, None] * (cam[:, 1] - cam[:, 0])
    cam[:, 0] = np.where((d0 < proj.near)[:, None], p_near, cam[:, 0])
    cam[:, 1] = np.where((d1 < proj.near)[:, None], p_near, cam[:, 1])
    px = _fixed(proj.to_px(cam))
    cv2.polylines(img, list(px.reshape(-1, 2, 1, 2)), False, colour, thickness, cv2.LINE_8, _SHIFT)


def _faces(world: World) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every solid face as quads.

    Returns vertices (M, 4, 3), outward normals (M, 3) (zero for two-sided
    walls), base colours (M, 3), plan footprints for ordering (M, 2, 2) and a
    group key (M,): -1 for field walls (always farthest seen from inside), else
    the wall or box index.
    """
    verts, normals, colours, foot, group = [], [], [], [], []
    n_boundary = 4 if len(world.walls) >= 4 else 0
    for i, s in enumerate(world.walls):
        a, b = (s.x0, s.y0), (s.x1, s.y1)
        verts.append([(*a, 0.0), (*b, 0.0), (*b, WALL_HEIGHT_M), (*a, WALL_HEIGHT_M)])
        normals.append((0.0, 0.0, 0.0))
        colours.append(WALL_BGR)
        foot.append([a, b])
        group.append(-1 if i < n_boundary else i)
    for j, box in enumerate(world.boxes):
        k = box.corners()  # counter-clockwise seen from above
        h = box.height_m
        g = len(world.walls) + j
        for i in range(4):
            a, b = k[i], k[(i + 1) % 4]
            e = b - a
            n = np.array([e[1], -e[0], 0.0]) / max(float(np.hypot(*e)), 1e-12)  # right of a CCW edge = outward
            verts.append([(*a, 0.0), (*b, 0.0), (*b, h), (*a, h)])
            normals.append(n)
            colours.append(BOX_BGR)
            foot.append([a, b])
            group.append(g)
        verts.append([(*k[0], h), (*k[1], h), (*k[2], h), (*k[3], h)])
        normals.append((0.0, 0.0, 1.0))
        colours.append(BOX_BGR)
        foot.append([k[0], k[2]])
        group.append(g)
    if not verts:
        z = np.zeros((0,))
        return z.reshape(0, 4, 3), z.reshape(0, 3), z.reshape(0, 3), z.reshape(0, 2, 2), z.astype(int)
    return (np.array(verts, float), np.array(normals, float), np.array(colours, float),
            np.array(foot, float), np.array(group, int))


def _segment_distance(p: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Plan distance from point p (2,) to segments (M, 2, 2)."""
    a, d = seg[:, 0], seg[:, 1] - seg[:, 0]
    dd = (d * d).sum(1)
    u = np.clip(((p - a) * d).sum(1) / np.where(dd > 0, dd, 1.0), 0.0, 1.0)
    return np.hypot(*(a + d * u[:, None] - p).T)


#: largest texel size of the marker bitmap pyramid, px per cell
_MAX_CELL_PX = 64


@functools.lru_cache(maxsize=256)
def _marker_bitmap(dictionary: str, marker_id: int, cell_px: int) -> np.ndarray:
    """The marker with its white quiet zone as a BGR bitmap, ``cell_px`` pixels per cell."""
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    cells = d.markerSize + 2  # data bits and the black border
    img = cv2.aruco.generateImageMarker(d, marker_id, cells, borderBits=1)  # one pixel per cell
    img = np.pad(img, 1, constant_values=255)  # the quiet zone
    img = cv2.resize(img, None, fx=cell_px, fy=cell_px, interpolation=cv2.INTER_NEAREST)
    img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    img.flags.writeable = False
    return img


def _marker_hosts(world: World, verts: np.ndarray) -> dict[int, list[Marker]]:
    """Markers keyed by the index of the face they are printed on (-1: on none)."""
    hosts: dict[int, list[Marker]] = {}
    if len(verts):
        e1, e2 = verts[:, 1] - verts[:, 0], verts[:, 3] - verts[:, 0]
        n = np.cross(e1, e2)
        norm = np.maximum(np.linalg.norm(n, axis=1), 1e-12)
        e1e1, e2e2 = (e1 * e1).sum(1), (e2 * e2).sum(1)
    for m in world.markers:
        host = -1
        if len(verts):
            rel = np.array([m.x, m.y, m.z]) - verts[:, 0]
            u, v = (rel * e1).sum(1) / e1e1, (rel * e2).sum(1) / e2e2
            ok = ((np.abs(n @ m.normal) >= 0.999 * norm)  # parallel to the marker
                  & (np.abs((rel * n).sum(1)) / norm <= 0.01)  # within 1 cm of the face's plane
                  & (u >= 0.0) & (u <= 1.0) & (v >= 0.0) & (v <= 1.0))
            if ok.any():
                host = int(np.argmax(ok))
        hosts.setdefault(host, []).append(m)
    return hosts


def _draw_marker(img: np.ndarray, proj: _Projector, m: Marker) -> None:
    """Warp the marker's bitmap onto its square (see the module docstring); culled from behind."""
    centre = np.array([m.x, m.y, m.z])
    if float(m.normal @ (proj.c - centre)) <= 1e-9:
        return  # seen from behind (or edge-on)
    cells = m.bits + 4  # data, black border, quiet zone
    side = m.size_m * cells / (cells - 2)  # the quiet zone's outer square
    quad = m.corners(cells / (cells - 2))
    cam_quad = proj.to_cam(quad)
    depth = cam_quad[:, 0]
    if (depth < proj.near).all():
        return
    poly = cam_quad if (depth >= proj.near).all() else _clip_polygon_near(cam_quad, proj.near)
    if len(poly) < 3:
        return
    px = proj.to_px(poly)
    h, w = img.shape[:2]
    x0, y0 = np.floor(px.min(axis=0)).astype(int) - 1
    x1, y1 = np.ceil(px.max(axis=0)).astype(int) + 2
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 <= x0 or y1 <= y0:
        return
    # texel size ≈ the on-screen cell size (a pyramid level): bilinear then neither blurs nor aliases much
    screen_side = float(np.max(np.linalg.norm(px - np.roll(px, 1, axis=0), axis=1)))
    cell_px = int(min(_MAX_CELL_PX, 2 ** max(0, math.ceil(math.log2(max(screen_side / cells, 1.0))))))
    bitmap = _marker_bitmap(m.dictionary, m.id, cell_px)
    n_px = bitmap.shape[0]
    # bitmap pixel (s, t) → marker plane (right, up) m → camera (depth, left, up) → homogeneous image point
    to_plane = np.array([[side / n_px, 0.0, side * (0.5 / n_px - 0.5)],
                         [0.0, -side / n_px, side * (0.5 - 0.5 / n_px)],
                         [0.0, 0.0, 1.0]])
    axes = m.axes
    to_cam = np.column_stack((axes[:, 0] @ proj.R, axes[:, 1] @ proj.R, (centre - proj.c) @ proj.R))
    to_img = np.array([[proj.cx, -proj.f, 0.0], [proj.cy, 0.0, -proj.f], [1.0, 0.0, 0.0]])
    shift = np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0], [0.0, 0.0, 1.0]])
    H = shift @ to_img @ to_cam @ to_plane
    roi = img[y0:y1, x0:x1]
    if (depth >= proj.near).all():
        cv2.warpPerspective(bitmap, H, (x1 - x0, y1 - y0), dst=roi, flags=cv2.INTER_LINEAR,
                            borderMode=cv2.BORDER_TRANSPARENT)
        return
    # crossing the near plane: rays through pixels outside the clipped quad meet the plane behind the
    # camera, where the homography is meaningless, so keep only the clipped polygon
    warped = roi.copy()
    cv2.warpPerspective(bitmap, H, (x1 - x0, y1 - y0), dst=warped, flags=cv2.INTER_LINEAR,
                        borderMode=cv2.BORDER_TRANSPARENT)
    mask = np.zeros(roi.shape[:2], np.uint8)
    cv2.fillPoly(mask, [_fixed(px - (x0, y0)).reshape(-1, 1, 2)], 255, cv2.LINE_8, _SHIFT)
    np.copyto(roi, warped, where=mask[:, :, None].astype(bool))


@functools.lru_cache(maxsize=1)
def _detail_texture() -> np.ndarray:
    """The floor texture's luma, zero mean (int16): surface detail added to the flat-shaded faces."""
    g = cv2.cvtColor(_floor_texture(), cv2.COLOR_BGR2GRAY).astype(np.int16)
    d = (g - int(g.mean())) * 3 // 4
    d = np.repeat(d[:, :, None], 3, axis=2).astype(np.int16)
    d.flags.writeable = False
    return d


def _texture_face(img: np.ndarray, proj: _Projector, quad: np.ndarray, depth: np.ndarray, px: np.ndarray) -> None:
    """Surface detail on a face wholly in front of the camera (a face cut by the near plane stays flat)."""
    if (depth < proj.near * 4).any():
        return
    h, w = img.shape[:2]
    dst = proj.to_px(proj.to_cam(quad)).astype(np.float32)
    x0, y0 = np.floor(dst.min(axis=0)).astype(int)
    x1, y1 = np.ceil(dst.max(axis=0)).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return
    texels = _floor_texture().shape[0] / TEXTURE_TILE_M
    length = float(np.linalg.norm(quad[1] - quad[0])) * texels
    height = float(np.linalg.norm(quad[3] - quad[0])) * texels
    src = np.array([[0, 0], [length, 0], [length, height], [0, height]], np.float32)
    H = cv2.getPerspectiveTransform(src, dst - np.array([x0, y0], np.float32))
    detail = cv2.warpPerspective(_detail_texture(), H, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR,
                                 borderMode=cv2.BORDER_WRAP)
    mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillPoly(mask, [(px - np.array([x0 << _SHIFT, y0 << _SHIFT])).astype(np.int32)], 255, cv2.LINE_8, _SHIFT)
    roi = img[y0:y1, x0:x1]
    out = cv2.add(roi.astype(np.int16), detail, dtype=cv2.CV_16S)
    np.copyto(roi, np.clip(out, 0, 255).astype(np.uint8), where=mask[:, :, None].astype(bool))


def _draw_solids(img: np.ndarray, proj: _Projector, world: World, texture: bool = False) -> None:
    verts, normals, colours, foot, group = _faces(world)
    hosts = _marker_hosts(world, verts) if world.markers else {}
    if not len(verts):
        for m in hosts.get(-1, []):
            _draw_marker(img, proj, m)
        return
    centre = proj.c
    mid = verts.mean(axis=1)
    two_sided = ~normals.any(axis=1)
    to_cam = centre - mid
    # two-sided walls turn their normal to the camera; box faces turned away from it are culled
    wall_n = np.zeros_like(normals)
    e = verts[:, 1, :2] - verts[:, 0, :2]
    wall_n[:, 0], wall_n[:, 1] = -e[:, 1], e[:, 0]
    wall_n /= np.maximum(np.linalg.norm(wall_n, axis=1, keepdims=True), 1e-12)
    flip = (wall_n * to_cam).sum(1) < 0
    wall_n[flip] *= -1.0
    normals = np.where(two_sided[:, None], wall_n, normals)
    visible = (normals * to_cam).sum(1) > 1e-9
    # shade: ambient + diffuse, so adjacent faces differ
    shade = 0.55 + 0.45 * np.clip(normals @ _LIGHT, 0.0, 1.0)
    colour = np.clip(colours * shade[:, None], 0, 255)
    # painter's order: farthest first by plan distance of each group's nearest footprint point
    dist = _segment_distance(centre[:2], foot)
    order_key = np.empty(len(verts))
    for g in np.unique(group):
        m = group == g
        order_key[m] = np.inf if g < 0 else dist[m].min()
    order = np.lexsort((-dist, -order_key))
    # markers on no face: drawn before the first face nearer than their own nearest point
    free = sorted(hosts.get(-1, []), key=lambda m: -float(_segment_distance(centre[:2], m.corners()[None, 2:, :2])[0]))
    cam = proj.to_cam(verts)
    depth = cam[:, :, 0]
    near = proj.near
    for i in order:
        while free and float(_segment_distance(centre[:2], free[0].corners()[None, 2:, :2])[0]) >= order_key[i]:
            _draw_marker(img, proj, free.pop(0))
        if not visible[i]:
            continue
        d = depth[i]
        if (d < near).all():
            continue
        poly = cam[i] if (d >= near).all() else _clip_polygon_near(cam[i], near)
        if len(poly) < 3:
            continue
        px = _fixed(proj.to_px(poly)).reshape(-1, 1, 2)
        c = tuple(float(v) for v in colour[i])
        cv2.fillPoly(img, [px], c, cv2.LINE_8, _SHIFT)
        if texture:
            _texture_face(img, proj, verts[i], d, px)
        cv2.polylines(img, [px], True, tuple(0.6 * v for v in c), 1, cv2.LINE_8, _SHIFT)
        for m in hosts.get(i, ()):
            _draw_marker(img, proj, m)
    for m in free:
        _draw_marker(img, proj, m)


def _draw_ramps(img: np.ndarray, proj: _Projector, world: World) -> None:
    # drawn flat at z = 0: the plan gives their slope but not their absolute height
    for r in world.ramps:
        c, s = math.cos(r.yaw), math.sin(r.yaw)
        hx, hy = r.sx / 2.0, r.sy / 2.0
        local = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy]])
        plan = local @ np.array([[c, -s], [s, c]]).T + (r.x, r.y)
        cam = proj.to_cam(np.column_stack((plan, np.zeros(4))))
        poly = _clip_polygon_near(cam, proj.near)
        if len(poly) >= 3:
            cv2.fillPoly(img, [_fixed(proj.to_px(poly)).reshape(-1, 1, 2)], RAMP_BGR, cv2.LINE_8, _SHIFT)


def _draw_overlay(img: np.ndarray, t_s: float, frame_no: int) -> None:
    text = f"SIM  t={t_s:10.3f} s  #{frame_no:06d}"
    scale = max(0.35, img.shape[1] / 1600.0)
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    cv2.rectangle(img, (4, 4), (12 + tw, 12 + th + base), (0, 0, 0), cv2.FILLED)
    cv2.putText(img, text, (8, 8 + th), cv2.FONT_HERSHEY_SIMPLEX, scale, TEXT_BGR, 1, cv2.LINE_AA)


#: the floor texture's tile, m (a 512-pixel tile: about 4 mm a texel, finer than a pixel beyond 1 m)
TEXTURE_TILE_M = 2.0


@functools.lru_cache(maxsize=1)
def _floor_texture() -> np.ndarray:
    """A fixed gravel-like texture (BGR, 512×512, tileable): noise at four scales around the ground colour.
    Fixed seed: the same floor in every run; it moves with the camera, as a real floor does, so a video
    encoder's motion search finds it (real-camera-size frames: JPEG q70 of 50-65 KB at 640×480)."""
    rng = np.random.default_rng(20261201)
    n = 512
    acc = np.zeros((n, n), np.float32)
    for cells, weight in ((8, 16.0), (32, 14.0), (128, 16.0), (256, 22.0), (512, 40.0)):
        base = rng.standard_normal((cells, cells)).astype(np.float32)
        tiled = np.tile(base, (3, 3))  # resize a 3×3 tiling and keep the middle: the texture wraps
        big = cv2.resize(tiled, (3 * n, 3 * n), interpolation=cv2.INTER_CUBIC)[n:2 * n, n:2 * n]
        acc += weight * big
    tex = np.clip(np.array(GROUND_BGR, np.float32)[None, None, :] + acc[:, :, None] * np.array([1.0, 0.9, 0.8]),
                  0, 255).astype(np.uint8)
    tex.flags.writeable = False
    return tex


def _draw_floor_texture(img: np.ndarray, proj: _Projector, ground_px: np.ndarray) -> None:
    """The textured floor inside the ground polygon: the plane z = 0 seen through the pinhole is a
    homography, image pixel → floor point → texel, so one ``cv2.warpPerspective`` (wrapping the tiles)
    draws it."""
    h, w = img.shape[:2]
    f = proj.f
    A = np.array([[0.0, 0.0, 1.0], [-1.0 / f, 0.0, proj.cx / f], [0.0, -1.0 / f, proj.cy / f]])  # pixel → ray
    cx, cy, cz = proj.c
    to_floor = np.array([[-cz, 0.0, cx], [0.0, -cz, cy], [0.0, 0.0, 1.0]])  # ray (world) → floor point
    tex = _floor_texture()
    texels = tex.shape[0] / TEXTURE_TILE_M
    H = np.diag([texels, texels, 1.0]) @ to_floor @ proj.R @ A
    warped = cv2.warpPerspective(tex, H, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                 borderMode=cv2.BORDER_WRAP)
    mask = np.zeros((h, w), np.uint8)
    cv2.fillPoly(mask, [_fixed(ground_px).reshape(-1, 1, 2)], 255, cv2.LINE_8, _SHIFT)
    cv2.copyTo(warped, mask, img)


@functools.lru_cache(maxsize=8)
def _noise_lut(sigma: float) -> np.ndarray:
    # inverse normal CDF at the 256 byte levels: Gaussian noise from uniform bytes, which a
    # Generator makes ~6x faster than standard_normal (truncated at ±2.9 sigma, fine for sensor grain)
    q = [NormalDist().inv_cdf((i + 0.5) / 256.0) * sigma for i in range(256)]
    return np.array(q, np.float32).reshape(1, 256)


def _add_noise(img: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    u = np.frombuffer(rng.bytes(img.size), np.uint8).reshape(img.shape)
    return cv2.add(img, cv2.LUT(u, _noise_lut(float(sigma))), dtype=cv2.CV_8U)


def render(
    world: World,
    pose: Mapping[str, float],
    intrinsics: CameraIntrinsics,
    t_s: float,
    frame_no: int,
    rng: np.random.Generator | None = None,
    *,
    mount: CameraMount = CameraMount(),
    overlay: bool = True,
    texture: bool = False,
) -> np.ndarray:
    """One BGR frame (H, W, 3) uint8 seen from a robot at ``pose`` (see the module docstring).

    ``t_s`` and ``frame_no`` only go into the overlay text; noise is added when
    ``rng`` is given and ``intrinsics.noise_sigma`` > 0. ``texture`` draws a textured floor (the
    frames a real camera gives a video encoder: detail that moves with the robot).
    """
    w, h = intrinsics.width, intrinsics.height
    centre, R_wc = camera_pose(pose, mount)
    proj = _Projector(centre, R_wc, intrinsics)
    img = np.empty((h, w, 3), np.uint8)
    img[:] = SKY_BGR
    ground, (a, b, c) = _horizon(proj, w, h)
    norm = math.hypot(a, b)
    if norm > 1e-12:
        # a light haze band along the horizon; the ground covers its lower half
        p0 = np.array([-a * c, -b * c]) / norm**2
        d = np.array([-b, a]) / norm * 4.0 * (w + h)
        band = max(2, h // 24)
        cv2.line(img, tuple(_fixed(p0 - d)), tuple(_fixed(p0 + d)), HAZE_BGR, band, cv2.LINE_8, _SHIFT)
    if ground is not None:
        if texture:
            _draw_floor_texture(img, proj, ground)
        else:
            cv2.fillPoly(img, [_fixed(ground).reshape(-1, 1, 2)], GROUND_BGR, cv2.LINE_8, _SHIFT)
    _draw_ramps(img, proj, world)
    _draw_segments(img, proj, _grid_segments(world, GRID_STEP_M), GRID_BGR)
    _draw_solids(img, proj, world, texture)
    if overlay:
        _draw_overlay(img, t_s, frame_no)
    if rng is not None and intrinsics.noise_sigma > 0:
        img = _add_noise(img, intrinsics.noise_sigma, rng)
    return img
