"""One frame in, measurements out: markers, a marker pose fix and the floor cue, as channels.

:class:`VisionPipeline` is synchronous and single-threaded (the worker, tests and the
bench call :meth:`VisionPipeline.process`); it keeps the floor model between frames.

Channels (SI; NaN when there is nothing to say, which the telemetry sends as ``null``
and which never trips a rule: a rule on a vision channel trips on a stale sample
instead, see docs/vision.md):

=============================  =====  ==========================================================
``vision_markers``             count  markers decoded in the frame
``vision_marker_id``                  id of the nearest marker of the map (NaN: none in view)
``vision_marker_range_m``      m      its horizontal distance from the body origin
``vision_marker_bearing_rad``  rad    its direction, left positive
``marker_{id}_range_m``        m      the same for each marker of the map (NaN when not in view)
``marker_{id}_bearing_rad``    rad
``vision_fix_x_m``             m      the robot's position from the markers in view (world frame)
``vision_fix_y_m``             m
``vision_fix_yaw_rad``         rad
``vision_fix_sigma_m``         m      the long axis of the fix's 1-σ ellipse
``vision_floor_free``          0..1   fraction of the floor band ahead that looks like floor
``vision_clear_m``             m      distance to the nearest blocked slice of the band
``vision_latency_s``           s      capture to result
=============================  =====  ==========================================================

Every channel of one result carries the frame's capture time as its sample time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import cv2
import numpy as np

from drivers.base import ChannelSpec
from robotics.estimation.markers import MarkerFix, MarkerFixError, fix_pose
from server.gateway.vision.camera import CameraModel
from server.gateway.vision.config import MarkerEntry, VisionConfig
from server.gateway.vision.floor import FloorCue, FloorReading
from server.gateway.vision.markers import MarkerDetection, MarkerDetector

#: a fix whose normalised residual χ²/dof is above this rests on an observation that does not fit the map
MAX_FIX_CHI2_PER_DOF = 25.0
#: the channels listed with the robot's in ``GET /api/robot`` (a dashboard widget each); the per-marker and
#: fix channels are described under ``external.vision`` only (the map shows them)
GAUGE_CHANNELS = frozenset({"vision_markers", "vision_marker_id", "vision_marker_range_m",
                            "vision_marker_bearing_rad", "vision_floor_free", "vision_clear_m", "vision_latency_s"})


@dataclass(frozen=True)
class VisionResult:
    """What one frame gave. Times: ``sample_t`` the capture on the monotonic clock (the video frame's
    ``mono_t``: what the runtime's staleness uses), ``capture_t`` the same instant as Unix s (for people
    and files), ``done_t`` monotonic."""

    seq: int
    capture_t: float
    sample_t: float
    done_t: float
    size: tuple[int, int]
    markers: list[MarkerDetection]
    n_decoded: int
    fix: MarkerFix | None
    floor: FloorReading | None
    channels: dict[str, float] = field(default_factory=dict)

    @property
    def latency_s(self) -> float:
        return self.done_t - self.sample_t

    def to_json(self) -> dict[str, Any]:
        """The overlay message's ``data`` (markers with corners and poses, the fix, the floor cue)."""
        fix = None
        if self.fix is not None:
            fix = {"x": round(self.fix.x, 4), "y": round(self.fix.y, 4), "yaw": round(self.fix.yaw, 5),
                   "sigma_m": round(self.fix.position_sigma_m, 4), "used": list(self.fix.used)}
        floor = None
        if self.floor is not None:
            floor = {"free": _round(self.floor.free_fraction, 4), "clear_m": _round(self.floor.clear_m, 3),
                     "reference_ok": self.floor.reference_ok}
        return {"seq": self.seq, "capture_t": self.capture_t, "latency_s": round(self.latency_s, 4),
                "width": self.size[0], "height": self.size[1], "decoded": self.n_decoded,
                "markers": [m.to_json() for m in self.markers], "fix": fix, "floor": floor}


    def measurement(self) -> dict[str, Any]:
        """The runtime API's ``measurements`` parameters (docs/runtime-api.md): the channels (NaN → null) with
        the capture time, and the observations of the markers of the map."""
        obs = [{"id": m.id, "range_m": m.range_m, "bearing_rad": m.bearing_rad, "range_sigma_m": m.sigmas[0],
                "bearing_sigma_rad": m.sigmas[1]} for m in self.markers if m.known]
        return {"source": "vision", "sample_t": self.sample_t,
                "channels": {k: (v if math.isfinite(v) else None) for k, v in self.channels.items()},
                "observations": obs}


def _round(v: float, n: int) -> float | None:
    return None if not math.isfinite(v) else round(v, n)


class VisionPipeline:
    """Markers, fix and floor cue from frames of one camera. ``marker_map`` entries override ``config.markers``
    (e.g. the simulated world's markers)."""

    def __init__(self, config: VisionConfig, camera: CameraModel, marker_map: list[MarkerEntry] | None = None,
                 *, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.camera = camera
        entries = list(config.markers) if marker_map is None else list(marker_map)
        self.marker_map = {m.id: m.pose for m in entries}
        self.marker_ids = sorted(self.marker_map)
        self.detector = MarkerDetector(config.dictionary, {m.id: m.size_m for m in entries}, config.marker_size_m,
                                       max_markers=config.max_markers, corner_sigma_px=config.corner_sigma_px)
        self.floor = FloorCue(config.floor_near_m, config.floor_far_m, config.floor_half_width_m,
                              config.floor_scale) if config.floor_enabled else None
        self.clock, self.wall_clock = clock, wall_clock

    # ------------------------------------------------------------------ description
    def channel_specs(self) -> list[ChannelSpec]:
        """The channels as ``GET /api/robot`` describes them."""
        angle = dict(unit="rad", min=-math.pi, max=math.pi, widget="digital", decimals=3)
        near, far = self.config.floor_near_m, self.config.floor_far_m
        specs = [
            ChannelSpec("vision_markers", "", 0.0, 64.0, "digital", "Markers in view", decimals=0),
            ChannelSpec("vision_marker_id", "", 0.0, 1000.0, "digital", "Nearest marker", decimals=0),
            ChannelSpec("vision_marker_range_m", "m", 0.0, 20.0, "digital", "Nearest marker range", decimals=3),
            ChannelSpec("vision_marker_bearing_rad", label="Nearest marker bearing", **angle),
        ]
        for i in self.marker_ids:
            specs += [ChannelSpec(f"marker_{i}_range_m", "m", 0.0, 20.0, "digital", f"Marker {i} range", decimals=3),
                      ChannelSpec(f"marker_{i}_bearing_rad", label=f"Marker {i} bearing", **angle)]
        if self.marker_ids:
            xs = [p[0] for p in self.marker_map.values()]
            ys = [p[1] for p in self.marker_map.values()]
            specs += [
                ChannelSpec("vision_fix_x_m", "m", math.floor(min(xs)) - 2.0, math.ceil(max(xs)) + 2.0, "digital",
                            "Marker fix x", decimals=3),
                ChannelSpec("vision_fix_y_m", "m", math.floor(min(ys)) - 2.0, math.ceil(max(ys)) + 2.0, "digital",
                            "Marker fix y", decimals=3),
                ChannelSpec("vision_fix_yaw_rad", label="Marker fix yaw", **angle),
                ChannelSpec("vision_fix_sigma_m", "m", 0.0, 2.0, "digital", "Marker fix σ", decimals=3),
            ]
        if self.floor is not None:
            specs += [
                ChannelSpec("vision_floor_free", "", 0.0, 1.0, "bar", "Floor free ahead", warn_low=0.9,
                            crit_low=0.7, plot=True, decimals=2),
                ChannelSpec("vision_clear_m", "m", near, far, "bar", "Clear ahead (vision)", decimals=2),
            ]
        specs.append(ChannelSpec("vision_latency_s", "s", 0.0, 1.0, "digital", "Vision latency", decimals=3))
        return specs

    # ------------------------------------------------------------------ per frame
    def process(self, gray: np.ndarray, small_bgr: np.ndarray | None, capture_t: float, seq: int = 0) -> VisionResult:
        """Markers in ``gray`` (H, W) uint8, the floor cue in ``small_bgr`` (the colour frame ``floor_scale``
        times smaller; None skips it). ``capture_t`` is the frame's capture on the monotonic clock."""
        sample_t = capture_t
        capture_t = sample_t + (self.wall_clock() - self.clock())  # the same instant as Unix time
        h, w = gray.shape[:2]
        markers, n = self.detector.detect(gray, self.camera)
        fix = self._fix(markers)
        floor = self.floor.measure(small_bgr, self.camera, (w, h)) if (self.floor and small_bgr is not None) else None
        done = self.clock()
        result = VisionResult(seq, capture_t, sample_t, done, (w, h), markers, n, fix, floor)
        result.channels.update(self._channels(result))
        return result

    def process_bgr(self, frame_bgr: np.ndarray, capture_t: float, seq: int = 0) -> VisionResult:
        """:meth:`process` of a raw BGR frame."""
        gray = cv2.cvtColor(frame_bgr, cv2.COLOR_BGR2GRAY)
        small = None
        if self.floor is not None:
            s = self.floor.scale
            small = cv2.resize(frame_bgr, (frame_bgr.shape[1] // s, frame_bgr.shape[0] // s),
                               interpolation=cv2.INTER_AREA)
        return self.process(gray, small, capture_t, seq)

    def _fix(self, markers: list[MarkerDetection]) -> MarkerFix | None:
        obs = [m.observation() for m in markers if m.known]
        if not obs:
            return None
        try:
            fix = fix_pose(obs, self.marker_map)
        except MarkerFixError:
            return None
        if fix.dof > 0 and fix.chi2 / fix.dof > MAX_FIX_CHI2_PER_DOF:
            return None  # a misread id or a moved marker: no fix rather than a wrong one
        if not fix.position_sigma_m <= self.config.fix_max_sigma_m:
            return None  # one small marker seen from afar: its facing leaves the heading (and place) vague
        return fix

    def _channels(self, r: VisionResult) -> dict[str, float]:
        nan = math.nan
        known = [m for m in r.markers if m.known]
        nearest = known[0] if known else None
        out = {
            "vision_markers": float(r.n_decoded),
            "vision_marker_id": float(nearest.id) if nearest else nan,
            "vision_marker_range_m": nearest.range_m if nearest else nan,
            "vision_marker_bearing_rad": nearest.bearing_rad if nearest else nan,
        }
        seen = {m.id: m for m in known}
        for i in self.marker_ids:
            m = seen.get(i)
            out[f"marker_{i}_range_m"] = m.range_m if m else nan
            out[f"marker_{i}_bearing_rad"] = m.bearing_rad if m else nan
        if self.marker_ids:
            f = r.fix
            out.update(vision_fix_x_m=f.x if f else nan, vision_fix_y_m=f.y if f else nan,
                       vision_fix_yaw_rad=f.yaw if f else nan, vision_fix_sigma_m=f.position_sigma_m if f else nan)
        if self.floor is not None:
            out["vision_floor_free"] = r.floor.free_fraction if r.floor else nan
            out["vision_clear_m"] = r.floor.clear_m if r.floor else nan
        out["vision_latency_s"] = r.latency_s
        return out


def camera_from_config(config: VisionConfig, video: Mapping[str, Any]) -> CameraModel:
    """The camera model from ``[vision]``, falling back on the ``[video]`` table (a mapping or its struct)
    for the size, the field of view and the mount."""
    get = (lambda k, d=None: video.get(k, d)) if isinstance(video, Mapping) else (lambda k, d=None: getattr(video, k, d))
    mount = dict(
        mount_forward_m=config.mount_forward_m if config.mount_forward_m is not None else get("mount_forward_m", 0.10),
        mount_height_m=config.mount_height_m if config.mount_height_m is not None else get("mount_height_m", 0.25),
        mount_pitch_rad=math.radians(config.mount_pitch_deg if config.mount_pitch_deg is not None
                                     else get("mount_pitch_deg", 0.0)),
    )
    width, height = int(get("width", 640)), int(get("height", 480))
    if config.camera_matrix is None:
        hfov = config.hfov_deg if config.hfov_deg is not None else get("hfov_deg", 70.0)
        return CameraModel.pinhole(width, height, math.radians(hfov), **mount)
    size = tuple(config.calibration_size) if config.calibration_size is not None else (width, height)
    dist = np.asarray(config.dist_coeffs if config.dist_coeffs is not None else [0.0] * 5, dtype=float)
    return CameraModel(np.asarray(config.camera_matrix, dtype=float), dist, (int(size[0]), int(size[1])), **mount)
