"""The camera as the pipeline sees it: intrinsics (a calibration or an ideal pinhole) and its mount.

Frames: OpenCV's camera frame (x right, y down, z forward; what ``solvePnP`` returns) and
the robot's body frame (REP-103: x forward, y left, z up). The camera sits at
``(mount_forward_m, 0, mount_height_m)`` in the body, looking along body x, tilted
down by ``mount_pitch_rad`` (the sim camera's :class:`sim.camera.CameraMount`).

The ideal pinhole matches the sim renderer exactly: square pixels, ``fx = fy =
(W/2)/tan(hfov/2)``, principal point at ``(W/2, H/2)`` in OpenCV's pixel-centre
coordinates (the renderer draws a point at u = cx − f·left/depth with that cx).

A calibration holds at the size it was made (``calibration_size``); frames of another
size (``PUT /api/video``) scale it as a resize does: ``fx`` by the width ratio ``s``,
``cx`` to ``(cx + ½)·s − ½`` (the same for ``fy, cy`` with the height ratio); wrong for a
crop. The pinhole is simply made again at the new size, as the simulator renders it.

>>> cam = CameraModel.pinhole(640, 480, math.radians(90.0))
>>> cam.K.round(9).tolist()
[[320.0, 0.0, 320.0], [0.0, 320.0, 240.0], [0.0, 0.0, 1.0]]
>>> cam.for_size(320, 240).K[0].round(9).tolist()
[160.0, 0.0, 160.0]
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import cv2
import numpy as np

# OpenCV camera axes (x right, y down, z forward) in the REP-103 camera frame (x forward, y left, z up)
R_CAM_CV = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


@dataclass(frozen=True)
class CameraModel:
    """Intrinsics ``K`` (3×3, px) and distortion at ``size`` = (width, height), and the mount."""

    K: np.ndarray
    dist: np.ndarray
    size: tuple[int, int]
    mount_forward_m: float = 0.10
    mount_height_m: float = 0.25
    mount_pitch_rad: float = 0.0
    hfov_rad: float | None = None  # an ideal pinhole made from this (None: a calibration)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def pinhole(cls, width: int, height: int, hfov_rad: float, **mount: float) -> "CameraModel":
        """The ideal camera the simulator renders."""
        f = (width / 2.0) / math.tan(hfov_rad / 2.0)
        K = np.array([[f, 0.0, width / 2.0], [0.0, f, height / 2.0], [0.0, 0.0, 1.0]])
        return cls(K, np.zeros(5), (int(width), int(height)), hfov_rad=float(hfov_rad), **mount)

    @property
    def focal_px(self) -> float:
        """Mean focal length, px."""
        return 0.5 * float(self.K[0, 0] + self.K[1, 1])

    @property
    def R_body_cv(self) -> np.ndarray:
        """OpenCV camera axes → body axes (3×3)."""
        cp, sp = math.cos(self.mount_pitch_rad), math.sin(self.mount_pitch_rad)
        R_body_cam = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
        return R_body_cam @ R_CAM_CV

    @property
    def position_body(self) -> np.ndarray:
        """The camera centre in the body frame (3,), m."""
        return np.array([self.mount_forward_m, 0.0, self.mount_height_m])

    def for_size(self, width: int, height: int) -> "CameraModel":
        """The model for frames of this size (cached; ``self`` when it already is)."""
        if (width, height) == self.size:
            return self
        key = ("size", width, height)
        hit = self._cache.get(key)
        if hit is None:
            mount = dict(mount_forward_m=self.mount_forward_m, mount_height_m=self.mount_height_m,
                         mount_pitch_rad=self.mount_pitch_rad)
            if self.hfov_rad is not None:
                hit = CameraModel.pinhole(width, height, self.hfov_rad, **mount)
            else:
                sx, sy = width / self.size[0], height / self.size[1]
                (fx, skew, cx), (_, fy, cy) = self.K[0], self.K[1]
                K = np.array([[fx * sx, skew * sx, (cx + 0.5) * sx - 0.5], [0.0, fy * sy, (cy + 0.5) * sy - 0.5],
                              [0.0, 0.0, 1.0]])
                hit = CameraModel(K, self.dist, (width, height), **mount)
            self._cache[key] = hit
        return hit

    def rays_body(self, width: int, height: int, scale: int = 1) -> np.ndarray:
        """Unit-free ray directions (H/scale, W/scale, 3) in the body frame through the centres of the
        pixels of an image ``scale`` times smaller than ``width × height`` (distortion undone)."""
        return _rays(self.for_size(width, height), scale)


@functools.lru_cache(maxsize=16)
def _rays_cached(K_bytes: bytes, dist_bytes: bytes, size: tuple[int, int], pitch: float, scale: int) -> np.ndarray:
    K = np.frombuffer(K_bytes).reshape(3, 3)
    dist = np.frombuffer(dist_bytes)
    w, h = size[0] // scale, size[1] // scale
    # centre of small pixel (i, j) in full-size pixel coordinates (pixel-centre convention)
    us = (np.arange(w) + 0.5) * scale - 0.5
    vs = (np.arange(h) + 0.5) * scale - 0.5
    grid = np.stack(np.meshgrid(us, vs), axis=-1).reshape(-1, 1, 2)
    if np.any(dist):
        norm = cv2.undistortPoints(grid, K, dist).reshape(-1, 2)
    else:
        norm = np.column_stack(((grid[:, 0, 0] - K[0, 2]) / K[0, 0], (grid[:, 0, 1] - K[1, 2]) / K[1, 1]))
    cv = np.column_stack((norm, np.ones(len(norm))))
    cp, sp = math.cos(pitch), math.sin(pitch)
    R = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]]) @ R_CAM_CV
    rays = (cv @ R.T).reshape(h, w, 3)
    rays.flags.writeable = False
    return rays


def _rays(cam: CameraModel, scale: int) -> np.ndarray:
    return _rays_cached(np.ascontiguousarray(cam.K, float).tobytes(), np.ascontiguousarray(cam.dist, float).tobytes(),
                        cam.size, float(cam.mount_pitch_rad), int(scale))
