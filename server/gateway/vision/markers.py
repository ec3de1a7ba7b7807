"""Fiducial markers in a grey image: id, corners, pose, and range/bearing/facing in the body frame.

OpenCV's ArUco detector (``cv2.aruco.ArucoDetector``, sub-pixel corner refinement) finds
and decodes the markers; ``cv2.solvePnP`` with ``SOLVEPNP_IPPE_SQUARE`` (the planar-square
solver of Collins & Bartoli 2014) gives each one's pose from its four corners, the
camera intrinsics and its side length (from the marker map, else ``marker_size_m``).

A small marker has two poses that explain its corners almost equally (a mirror tilt
about the line of sight; IPPE returns both). Its *position* is the same in both, but its
*facing* is not: when the second solution's reprojection error is within
``AMBIGUITY_RATIO`` of the first, facing is reported as NaN rather than guessed.

Body-frame numbers (REP-103, planar, from the body origin; see
:mod:`robotics.estimation.markers`): ``range_m`` horizontal distance to the marker
centre, ``bearing_rad`` its direction (left positive), ``facing_rad`` the direction its
face looks. ``distance_m`` is the straight-line distance from the camera.

Hostile frames (noise, thousands of candidate squares): the detector's own limits keep
candidates bounded; at most ``max_markers`` decoded markers (largest first) get a pose,
the rest are counted only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import cv2
import numpy as np

from robotics.estimation.markers import MarkerObservation, observation_sigmas
from server.gateway.vision.camera import CameraModel

#: IPPE's second solution within this factor of the first's reprojection error: facing ambiguous
AMBIGUITY_RATIO = 2.0


@dataclass(frozen=True)
class MarkerDetection:
    """One decoded marker. ``corners`` (4, 2) px in OpenCV's order (top-left, top-right, bottom-right,
    bottom-left of the printed marker); ``rvec``/``tvec`` its pose in the OpenCV camera frame (tvec m);
    the rest in the body frame (module docstring). ``size_m`` the side length used for the pose."""

    id: int
    corners: np.ndarray
    size_m: float
    known: bool  # in the marker map
    rvec: np.ndarray
    tvec: np.ndarray
    distance_m: float
    range_m: float
    bearing_rad: float
    elevation_rad: float
    facing_rad: float
    reprojection_px: float
    sigmas: tuple[float, float, float]  # range m, bearing rad, facing rad
    axes_px: np.ndarray | None = None  # (4, 2): the marker's centre and the tips of its x, y, z axes (half a side long)

    def observation(self) -> MarkerObservation:
        r, b, f = self.sigmas
        return MarkerObservation(self.id, self.range_m, self.bearing_rad, self.facing_rad, r, b, f)

    def to_json(self) -> dict:
        """For the dashboard's overlay (pixels rounded to 0.1, angles in rad)."""
        return {
            "id": self.id, "known": self.known, "corners": np.round(self.corners, 1).tolist(),
            "rvec": np.round(self.rvec, 4).tolist(), "tvec": np.round(self.tvec, 4).tolist(), "size_m": self.size_m,
            "range_m": round(self.range_m, 4), "bearing_rad": round(self.bearing_rad, 5),
            "facing_rad": None if math.isnan(self.facing_rad) else round(self.facing_rad, 4),
            "distance_m": round(self.distance_m, 4),
            "axes": None if self.axes_px is None else np.round(self.axes_px, 1).tolist(),
        }


class MarkerDetector:
    """Detects the markers of one dictionary; ``sizes`` maps known ids to their side length (m)."""

    def __init__(self, dictionary: str, sizes: Mapping[int, float], default_size_m: float, *,
                 max_markers: int = 16, corner_sigma_px: float = 0.5) -> None:
        self.dictionary_name = dictionary
        params = cv2.aruco.DetectorParameters()
        params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
        self._detector = cv2.aruco.ArucoDetector(cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary)),
                                                 params)
        self.sizes = {int(k): float(v) for k, v in sizes.items()}
        self.default_size_m = float(default_size_m)
        self.max_markers = int(max_markers)
        self.corner_sigma_px = float(corner_sigma_px)

    def detect(self, gray: np.ndarray, camera: CameraModel) -> tuple[list[MarkerDetection], int]:
        """(the markers with a pose, nearest first; the number decoded) in an (H, W) uint8 image."""
        if gray.ndim != 2 or gray.dtype != np.uint8:
            raise ValueError("detect needs an (H, W) uint8 grey image")
        h, w = gray.shape
        cam = camera.for_size(w, h)
        corners, ids, _ = self._detector.detectMarkers(gray)
        if ids is None:
            return [], 0
        found = [(int(i), c.reshape(4, 2).astype(np.float64)) for i, c in zip(ids.ravel(), corners)]
        n = len(found)
        found.sort(key=lambda item: -cv2.contourArea(item[1].astype(np.float32)))
        out = [d for d in (self._pose(i, c, cam) for i, c in found[: self.max_markers]) if d is not None]
        out.sort(key=lambda d: d.distance_m)
        return out, n

    def _pose(self, marker_id: int, corners: np.ndarray, cam: CameraModel) -> MarkerDetection | None:
        known = marker_id in self.sizes
        size = self.sizes.get(marker_id, self.default_size_m)
        h = size / 2.0
        obj = np.array([[-h, h, 0.0], [h, h, 0.0], [h, -h, 0.0], [-h, -h, 0.0]])
        try:
            n, rvecs, tvecs, errs = cv2.solvePnPGeneric(obj, corners, cam.K, cam.dist,
                                                        flags=cv2.SOLVEPNP_IPPE_SQUARE)
        except cv2.error:
            return None
        if not n:
            return None
        errs = np.asarray(errs, dtype=float).ravel()
        best = int(np.argmin(errs))
        rvec, tvec = rvecs[best].ravel(), tvecs[best].ravel()
        if not (np.all(np.isfinite(tvec)) and tvec[2] > 0):
            return None
        R_body_cv = cam.R_body_cv
        p = cam.position_body + R_body_cv @ tvec  # marker centre, body frame
        rng = math.hypot(p[0], p[1])
        if rng <= 0.0:
            return None
        R_cv_marker, _ = cv2.Rodrigues(rvec)
        normal = R_body_cv @ R_cv_marker[:, 2]  # out of the face, towards the camera
        ambiguous = n > 1 and errs[1 - best] < AMBIGUITY_RATIO * errs[best] + 1e-3
        facing = math.nan if ambiguous else math.atan2(normal[1], normal[0])
        distance = float(np.linalg.norm(tvec))
        sigmas = observation_sigmas(rng, size, cam.focal_px, self.corner_sigma_px)
        # x right, y up along the printed face, z out of it (cv2.drawFrameAxes' colours: x red, y green, z blue)
        axes, _ = cv2.projectPoints(np.array([[0.0, 0.0, 0.0], [h, 0.0, 0.0], [0.0, h, 0.0], [0.0, 0.0, h]]),
                                    rvec, tvec, cam.K, cam.dist)
        axes = axes.reshape(4, 2)
        return MarkerDetection(
            id=marker_id, corners=corners, size_m=size, known=known, rvec=rvec, tvec=tvec, distance_m=distance,
            range_m=rng, bearing_rad=math.atan2(p[1], p[0]), elevation_rad=math.atan2(p[2] - cam.mount_height_m, rng),
            facing_rad=facing, reprojection_px=float(errs[best]), sigmas=sigmas,
            axes_px=axes if np.all(np.isfinite(axes)) else None,
        )
