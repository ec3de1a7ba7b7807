"""The ``[vision]`` table: rate, marker dictionary and map, camera calibration, the floor band.

Every key is optional. Defaults suit the simulated rover: without ``camera_matrix`` the
camera is the ideal pinhole of the ``[video]`` table's ``hfov_deg`` (what the sim
camera renders), mounted where ``[video]`` ``mount_*`` say; a real camera needs its
calibration (``camera_matrix`` and ``dist_coeffs`` from ``cv2.calibrateCamera``, at
``calibration_size``). Without ``markers`` the map is the simulated world's
``[[sim.world.markers]]`` when the robot is simulated.

>>> cfg = parse_vision_config({"rate_hz": 5, "markers": [{"id": 1, "position": [6, 2, 0.25], "yaw_deg": 180}]})
>>> cfg.rate_hz, cfg.markers[0].size_m, cfg.dictionary
(5.0, 0.15, 'DICT_4X4_50')
>>> parse_vision_config({"dictionary": "DICT_3X3_9"})
Traceback (most recent call last):
...
ValueError: vision: dictionary 'DICT_3X3_9' is not an OpenCV ArUco dictionary (e.g. DICT_4X4_50, DICT_APRILTAG_36h11)
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Iterable, Mapping

import msgspec
from msgspec import Meta

from server.config import Table
from server.runtime_api.params import EXTERNAL_SOURCES

Metres = Annotated[float, Meta(ge=-1e4, le=1e4)]


class MarkerEntry(Table):
    """One marker of the map: ``id``, centre ``position`` [x, y, z] m (world), ``yaw_deg`` the direction
    its face looks (0 = east), ``size_m`` its black square's side."""

    id: Annotated[int, Meta(ge=0, le=100_000)]
    position: Annotated[list[Metres], Meta(min_length=3, max_length=3)]
    yaw_deg: Annotated[float, Meta(ge=-360.0, le=360.0)] = 0.0
    size_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.15

    @property
    def pose(self) -> tuple[float, float, float]:
        """(x, y, psi) for :mod:`robotics.estimation.markers` (psi in rad)."""
        return float(self.position[0]), float(self.position[1]), math.radians(self.yaw_deg)


class VisionConfig(Table):
    """The ``[vision]`` table (docs/vision.md)."""

    enabled: bool = False
    rate_hz: Annotated[float, Meta(gt=0.0, le=60.0)] = 10.0  # frames processed per second at most
    dictionary: str = "DICT_4X4_50"  # cv2.aruco predefined dictionary
    marker_size_m: Annotated[float, Meta(gt=0.0, le=10.0)] = 0.15  # side of markers not in the map
    markers: list[MarkerEntry] = []
    max_markers: Annotated[int, Meta(ge=1, le=256)] = 16  # most markers given a pose per frame (largest first)
    corner_sigma_px: Annotated[float, Meta(gt=0.0, le=20.0)] = 0.5  # corner accuracy, for the fix's covariance
    fix_max_sigma_m: Annotated[float, Meta(gt=0.0, le=100.0)] = 0.5  # a vaguer marker fix is not published
    # camera: a calibration, or an ideal pinhole from hfov_deg; None = the [video] table's value
    camera_matrix: Annotated[list[Annotated[list[float], Meta(min_length=3, max_length=3)]],
                             Meta(min_length=3, max_length=3)] | None = None
    dist_coeffs: Annotated[list[float], Meta(min_length=4, max_length=14)] | None = None
    calibration_size: Annotated[list[Annotated[int, Meta(ge=8, le=10000)]],
                                Meta(min_length=2, max_length=2)] | None = None
    hfov_deg: Annotated[float, Meta(ge=10.0, le=170.0)] | None = None
    mount_forward_m: Annotated[float, Meta(ge=-5.0, le=5.0)] | None = None
    mount_height_m: Annotated[float, Meta(ge=0.0, le=10.0)] | None = None
    mount_pitch_deg: Annotated[float, Meta(ge=-90.0, le=90.0)] | None = None
    # the floor band: ground ahead of the body origin, x in [near, far], |y| <= half_width
    floor_enabled: bool = True
    floor_near_m: Annotated[float, Meta(gt=0.0, le=100.0)] = 0.6
    floor_far_m: Annotated[float, Meta(gt=0.0, le=100.0)] = 1.5
    floor_half_width_m: Annotated[float, Meta(gt=0.0, le=100.0)] = 0.25
    floor_scale: Annotated[int, Meta(ge=1, le=8)] = 4  # the cue works on an image this many times smaller

    def __post_init__(self) -> None:
        if self.dictionary == "DICT_4X4_50" and all(m.id < 50 for m in self.markers):
            n_ids = 50  # the default, known: a profile without markers of its own loads without OpenCV (~0.2 s)
        else:
            import cv2

            if not isinstance(getattr(cv2.aruco, self.dictionary, None), int) or not self.dictionary.startswith("DICT_"):
                raise ValueError(f"dictionary {self.dictionary!r} is not an OpenCV ArUco dictionary "
                                 "(e.g. DICT_4X4_50, DICT_APRILTAG_36h11)")
            n_ids = len(cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, self.dictionary)).bytesList)
        seen = set()
        for m in self.markers:
            if m.id >= n_ids:
                raise ValueError(f"markers: id {m.id} is not in {self.dictionary} (ids 0-{n_ids - 1})")
            if m.id in seen:
                raise ValueError(f"markers: id {m.id} is given twice")
            seen.add(m.id)
        if self.floor_far_m <= self.floor_near_m:
            raise ValueError("floor_far_m must be greater than floor_near_m")
        if self.dist_coeffs is not None and len(self.dist_coeffs) not in (4, 5, 8, 12, 14):
            raise ValueError("dist_coeffs must have 4, 5, 8, 12 or 14 numbers (OpenCV's distortion model)")
        if self.dist_coeffs is not None and self.camera_matrix is None:
            raise ValueError("dist_coeffs needs a camera_matrix")
        if self.camera_matrix is not None:
            k = self.camera_matrix
            if not (k[0][0] > 0 and k[1][1] > 0 and k[0][1] == 0 and k[1][0] == 0 and k[2] == [0.0, 0.0, 1.0]):
                raise ValueError("camera_matrix must be [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0")

    def marker_map(self) -> dict[int, tuple[float, float, float]]:
        """id → (x, y, psi) of the configured markers."""
        return {m.id: m.pose for m in self.markers}

    def channel_names(self, marker_ids: Iterable[int]) -> list[str]:
        """The channels the pipeline publishes with a map of ``marker_ids`` (the order of
        :meth:`~server.gateway.vision.pipeline.VisionPipeline.channel_specs`).

        >>> VisionConfig(floor_enabled=False).channel_names([])
        ['vision_markers', 'vision_marker_id', 'vision_marker_range_m', 'vision_marker_bearing_rad', 'vision_latency_s']
        """
        ids = sorted(set(marker_ids))
        out = ["vision_markers", "vision_marker_id", "vision_marker_range_m", "vision_marker_bearing_rad"]
        for i in ids:
            out += [f"marker_{i}_range_m", f"marker_{i}_bearing_rad"]
        if ids:
            out += ["vision_fix_x_m", "vision_fix_y_m", "vision_fix_yaw_rad", "vision_fix_sigma_m"]
        if self.floor_enabled:
            out += ["vision_floor_free", "vision_clear_m"]
        return out + ["vision_latency_s"]

    def check_profile(self, profile: Any) -> None:
        """Safety rules on vision channels (the launcher loads every table): the pipeline must run and publish
        them. Without this a rule on ``vision_clear_m`` with vision off would only show as a robot that never
        starts (its channel stays stale)."""
        safety = getattr(profile, "safety", None)
        video = getattr(profile, "video", None)
        if safety is None or video is None:
            return  # a process that does not load both (the gateway has no rules, the runtime no [vision])
        prefixes = EXTERNAL_SOURCES["vision"]
        rules = [r for r in safety.rules if r.channel.startswith(prefixes)]
        if not rules:
            return
        if not (self.enabled and video.enabled):
            raise ValueError(f"safety rule {rules[0].name!r} names the vision channel {rules[0].channel!r}, but the "
                             "vision pipeline is off (it needs [vision] enabled = true and [video] enabled = true)")
        ids = [m.id for m in self.markers] or \
            [m.id for m in markers_from_world((profile.sim or {}).get("world"), self.dictionary)]
        known = set(self.channel_names(ids))
        for r in rules:
            if r.channel not in known:
                raise ValueError(f"safety rule {r.name!r}: the vision pipeline publishes no channel {r.channel!r} "
                                 f"(docs/vision.md; markers in the map: {sorted(ids) or 'none'})")


def parse_vision_config(table: Mapping[str, Any]) -> VisionConfig:
    """A ``[vision]`` table → :class:`VisionConfig`; :class:`ValueError` names the key (the server's
    config loader does the same through ``server.config.TABLES``)."""
    if not isinstance(table, Mapping):
        raise ValueError("vision must be a table")
    try:
        return msgspec.convert(dict(table), VisionConfig)
    except msgspec.ValidationError as err:
        raise ValueError(f"vision: {err}") from None


def markers_from_world(world: Mapping[str, Any] | None, dictionary: str) -> list[MarkerEntry]:
    """The simulated world's ``markers`` (the ``[sim.world]`` table as ``GET /api/robot`` describes it)
    in ``dictionary``, as map entries; malformed entries are skipped (the sim driver refuses them at open).

    >>> markers_from_world({"markers": [{"id": 3, "position": [1, 2, 0.3], "yaw_deg": 90, "size_m": 0.2}]},
    ...                    "DICT_4X4_50")[0].pose
    (1.0, 2.0, 1.5707963267948966)
    """
    out = []
    for m in (world or {}).get("markers", []) or []:
        if not isinstance(m, Mapping) or m.get("dictionary", "DICT_4X4_50") != dictionary:
            continue
        try:
            out.append(msgspec.convert({k: m[k] for k in ("id", "position", "yaw_deg", "size_m") if k in m},
                                       MarkerEntry))
        except msgspec.ValidationError:
            continue
    return out
