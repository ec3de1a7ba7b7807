"""The simulated scene the vision tests look at: the default profile's world, rendered, JPEG-encoded
as the video service does, and the ground truth of what the camera sees."""

from __future__ import annotations

import math
import time
import tomllib

import cv2
import numpy as np

from robotics.angles import wrap_pi
from server.config import DEFAULT_CONFIG
from server.gateway.vision.floor import BLOCKED_FRACTION, SLICE_M
from server.gateway.vision import (
    VisionPipeline, VisionWorker, camera_from_config, markers_from_world, parse_vision_config,
)
from sim.camera import CameraIntrinsics, CameraMount, camera_pose, render
from sim.world import World

PROFILE = tomllib.loads(DEFAULT_CONFIG.read_text())
WORLD_CFG = PROFILE["sim"]["world"]
VIDEO = PROFILE["video"]
WORLD = World.from_config(WORLD_CFG)
K = CameraIntrinsics(640, 480, math.radians(70.0))


def pipeline(world_cfg: dict = WORLD_CFG, **vision) -> VisionPipeline:
    cfg = parse_vision_config({"enabled": True, **vision})
    return VisionPipeline(cfg, camera_from_config(cfg, VIDEO), markers_from_world(world_cfg, cfg.dictionary))


def frame(pose: dict, world: World = WORLD, intrinsics: CameraIntrinsics = K, quality: int = 70,
          rng: np.random.Generator | None = None) -> bytes:
    """The JPEG the video service would hand to its listeners (overlay text included)."""
    img = render(world, pose, intrinsics, 0.0, 0, rng)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def process(pipe: VisionPipeline, pose: dict, **kw):
    """Decode and process one rendered frame as the worker does."""
    return VisionWorker(pipe, 10.0).run_once(frame(pose, **kw), time.monotonic())


def sweep_poses(step: float = 0.6) -> list[dict]:
    """Poses over the field (clear of walls, boxes and ramps), eight headings each."""
    out = []
    for x in np.arange(0.8, 5.6, step):
        for y in np.arange(0.6, 3.6, step):
            if WORLD.clearance(x, y) < 0.3 or WORLD.inside_obstacle(x, y) or any(r.contains(x, y) for r in WORLD.ramps):
                continue
            out += [{"x": float(x), "y": float(y), "yaw": float(a)} for a in np.arange(0.0, 2 * math.pi, math.pi / 4)]
    return out


def truth(pose: dict, marker) -> tuple[float, float]:
    """(range m, bearing rad) of a marker's centre from the body origin, planar."""
    dx, dy = marker.x - pose["x"], marker.y - pose["y"]
    return math.hypot(dx, dy), wrap_pi(math.atan2(dy, dx) - pose.get("yaw", 0.0))


def ground_truth_free(pose: dict, band, world: World = WORLD) -> np.ndarray:
    """Per band pixel: does its line of sight reach plain floor (no wall, box or ramp) in the band?

    From the world's geometry, not the picture: the ray through each small-image pixel meets the
    ground at G; it is free unless the segment camera → G passes below the top of a wall (0.5 m) or a
    box on its way, or G lies in a box or on a ramp."""
    from sim.camera import WALL_HEIGHT_M

    c, R_wc = camera_pose(pose, CameraMount())
    yaw = pose.get("yaw", 0.0)
    cz, sz = math.cos(yaw), math.sin(yaw)
    gx, gy = band.ground_xy[..., 0][band.mask], band.ground_xy[..., 1][band.mask]
    wx = pose["x"] + cz * gx - sz * gy
    wy = pose["y"] + sz * gx + cz * gy
    free = np.ones(len(wx), bool)
    solids = [((s.x0, s.y0), (s.x1, s.y1), WALL_HEIGHT_M) for s in world.walls]
    for b in world.boxes:
        k = b.corners()
        solids += [(tuple(k[i]), tuple(k[(i + 1) % 4]), b.height_m) for i in range(4)]
    for (ax, ay), (bx, by), height in solids:
        # segment camera (c) → ground point (w) against the edge a → b, in plan
        dx, dy = wx - c[0], wy - c[1]
        ex, ey = bx - ax, by - ay
        den = dx * ey - dy * ex
        with np.errstate(divide="ignore", invalid="ignore"):
            s = ((ax - c[0]) * ey - (ay - c[1]) * ex) / den  # along camera → ground
            u = ((ax - c[0]) * dy - (ay - c[1]) * dx) / den  # along the edge
        cross = (np.abs(den) > 1e-12) & (s >= 0) & (s <= 1) & (u >= 0) & (u <= 1)
        z = c[2] * (1.0 - s)  # the ray's height where it crosses the edge
        free &= ~(cross & (z < height))
    for i in range(len(wx)):
        if free[i] and (world.inside_obstacle(wx[i], wy[i]) or any(r.contains(wx[i], wy[i]) for r in world.ramps)):
            free[i] = False
    return free


def truth_clear(band, free: np.ndarray, near: float, far: float) -> float:
    """The cue's definition of clear_m applied to the true free/blocked pixels."""
    slices = band.slices[band.mask]
    n = int(np.ceil((far - near) / SLICE_M - 1e-9))
    per = np.bincount(slices, minlength=n)
    blocked = np.bincount(slices[~free], minlength=n)
    hit = (blocked >= np.maximum(2, BLOCKED_FRACTION * per)) & (per > 0)
    return near + SLICE_M * int(np.argmax(hit)) if hit.any() else far
