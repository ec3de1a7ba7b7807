"""An image-based obstacle cue: how much of the floor just ahead looks like floor.

Definition. The *band* is the rectangle of ground ahead of the robot, body x in
``[near_m, far_m]`` and ``|y| ≤ half_width_m`` (the corridor the robot drives into),
taken as flat at z = 0. Its pixels are the pixels whose ray from the camera (intrinsics
and mount, :class:`~server.gateway.vision.camera.CameraModel`) meets the ground plane
inside it, computed once per camera and image size. A band pixel is *free* when its
colour looks like the floor. Published:

* ``free_fraction``: free band pixels / band pixels (1 = nothing in the way; an
  obstacle standing in or in front of the band hides floor behind it, so it lowers the
  fraction even where its footprint is small);
* ``clear_m``: the near edge of the nearest 5 cm slice of the band where at least 20 %
  of the pixels (and 2 or more) are not floor; ``far_m`` when none is (clear over the
  whole band).

Floor appearance (appearance-based obstacle detection, Ulrich & Nourbakhsh, AAAI 2000):
an HSV histogram (16 hue × 8 saturation × 8 value bins, each bin's support widened to
its neighbours against quantisation) of a *reference* strip, the nearest 25 % of the
band. A pixel is floor when its bin holds at least ``MIN_SUPPORT`` of the model. The
model is the first frame's reference; afterwards it follows (10 % a frame) the reference
pixels it already calls floor, away from any edge, and only while at least 80 % of the
strip looks like floor (``reference_ok``): a slow change of light is followed (into
neighbouring bins) while an obstacle that reaches the reference strip is never learned
as floor.
Limits, by construction: the first frame's reference must show floor; a floor patch of another colour (the sim's ramps, a rug, a shadow) counts as an
obstacle; an object of the floor's colour does not. The tests measure it against the
simulator's geometry (tests/server/gateway/vision/test_floor.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from server.gateway.vision.camera import CameraModel

HIST_BINS = (16, 8, 8)  # hue (OpenCV's 0-179), saturation, value
N_BINS = HIST_BINS[0] * HIST_BINS[1] * HIST_BINS[2]
MIN_SUPPORT = 0.004  # fraction of the reference's pixels in a bin (or a neighbour) to call it floor
REFERENCE_OK_FRACTION = 0.8  # of the reference strip must look like floor for reference_ok
LEARN_RATE = 0.1
SLICE_M = 0.05
BLOCKED_FRACTION = 0.2
REFERENCE_FRACTION = 0.25
_CROSS = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))


@dataclass(frozen=True)
class FloorReading:
    free_fraction: float  # NaN when the band is not in view (camera pitched up, too small an image)
    clear_m: float
    band_pixels: int
    reference_ok: bool  # the reference strip resembled the floor model (it was learned this frame)


@dataclass(frozen=True)
class Band:
    """The band's pixels in an image of ``shape``: mask, reference mask and the slice index of each pixel."""

    shape: tuple[int, int]
    mask: np.ndarray  # (H, W) bool
    reference: np.ndarray  # (H, W) bool
    slices: np.ndarray  # (H, W) int: 5 cm slice from near_m, -1 outside the band
    ground_xy: np.ndarray  # (H, W, 2) body-frame ground point of each pixel (NaN above the horizon)


class FloorCue:
    """The cue for one band geometry; keeps the floor model between frames (one thread only)."""

    def __init__(self, near_m: float = 0.6, far_m: float = 1.5, half_width_m: float = 0.25, scale: int = 4) -> None:
        if not (0.0 < near_m < far_m and half_width_m > 0.0 and scale >= 1):
            raise ValueError("floor band: need 0 < near_m < far_m, half_width_m > 0 and scale >= 1")
        self.near_m, self.far_m, self.half_width_m, self.scale = float(near_m), float(far_m), float(half_width_m), scale
        self.n_slices = int(np.ceil((self.far_m - self.near_m) / SLICE_M - 1e-9))
        self._bands: dict[tuple, Band] = {}
        self.model: np.ndarray | None = None

    def reset(self) -> None:
        """Forget the floor model (the next frame's reference becomes the floor)."""
        self.model = None

    def band(self, camera: CameraModel, full_size: tuple[int, int]) -> Band:
        """The band in the small image of a ``full_size`` frame (cached)."""
        key = (id(camera), full_size)
        hit = self._bands.get(key)
        if hit is None:
            if len(self._bands) > 8:
                self._bands.clear()
            hit = self._bands[key] = self._make_band(camera, full_size)
        return hit

    def _make_band(self, camera: CameraModel, full_size: tuple[int, int]) -> Band:
        rays = camera.rays_body(full_size[0], full_size[1], self.scale)
        c = camera.position_body
        dz = rays[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(dz < -1e-9, -c[2] / dz, np.nan)
        gx = c[0] + t * rays[..., 0]
        gy = c[1] + t * rays[..., 1]
        mask = (gx >= self.near_m) & (gx <= self.far_m) & (np.abs(gy) <= self.half_width_m)
        ref_far = self.near_m + REFERENCE_FRACTION * (self.far_m - self.near_m)
        reference = mask & (gx <= ref_far)
        index = np.clip(np.floor((np.nan_to_num(gx, nan=self.near_m) - self.near_m) / SLICE_M), 0, self.n_slices - 1)
        slices = np.where(mask, index, -1).astype(np.int32)
        return Band(rays.shape[:2], mask, reference, slices, np.stack((gx, gy), axis=-1))

    def measure(self, small_bgr: np.ndarray, camera: CameraModel, full_size: tuple[int, int]) -> FloorReading:
        """The cue in ``small_bgr``, the frame of ``full_size`` shrunk ``scale`` times."""
        band = self.band(camera, full_size)
        if small_bgr.shape[:2] != band.shape:
            small_bgr = cv2.resize(small_bgr, band.shape[::-1], interpolation=cv2.INTER_AREA)
        n_band = int(band.mask.sum())
        n_ref = int(band.reference.sum())
        if n_band == 0 or n_ref < 8:
            return FloorReading(float("nan"), float("nan"), n_band, False)
        bins = _bin_index(cv2.cvtColor(small_bgr, cv2.COLOR_BGR2HSV))
        if self.model is None:
            self.model = np.bincount(bins[band.reference], minlength=N_BINS).astype(np.float64) / n_ref
        floor = (_widen(self.model.reshape(HIST_BINS)).ravel() >= MIN_SUPPORT)[bins]
        # learn only while the reference strip looks like floor, and only from its floor pixels that
        # are not next to anything else: a slow change of light moves the floor into neighbouring
        # bins and is followed, while the blend of floor and obstacle along an edge (which the widened
        # bins accept) would otherwise creep, frame by frame, into the obstacle's colour
        reference_floor = band.reference & floor
        reference_ok = int(reference_floor.sum()) >= REFERENCE_OK_FRACTION * n_ref
        if reference_ok:
            inner = cv2.erode(floor.astype(np.uint8), _CROSS, borderType=cv2.BORDER_REPLICATE).astype(bool)
            learn = reference_floor & inner
            n_learn = int(learn.sum())
            if n_learn:
                seen = np.bincount(bins[learn], minlength=N_BINS).astype(np.float64) / n_learn
                self.model = (1.0 - LEARN_RATE) * self.model + LEARN_RATE * seen
        blocked = band.mask & ~floor
        free_fraction = 1.0 - float(blocked.sum()) / n_band
        per_slice = np.bincount(band.slices[band.mask], minlength=self.n_slices)
        blocked_slice = np.bincount(band.slices[blocked], minlength=self.n_slices)
        hit = (blocked_slice >= np.maximum(2, BLOCKED_FRACTION * per_slice)) & (per_slice > 0)
        clear = self.near_m + SLICE_M * int(np.argmax(hit)) if hit.any() else self.far_m
        return FloorReading(free_fraction, float(clear), n_band, reference_ok)


def _bin_index(hsv: np.ndarray) -> np.ndarray:
    """(H, W) flat histogram bin of each HSV pixel. (Not cv2.calcBackProject: a 3-D histogram does
    not survive the trip through OpenCV's Python binding, which reads it as a 2-D, 8-channel array.)"""
    h = hsv[..., 0].astype(np.int32) * HIST_BINS[0] // 180
    s = hsv[..., 1].astype(np.int32) * HIST_BINS[1] // 256
    v = hsv[..., 2].astype(np.int32) * HIST_BINS[2] // 256
    return (np.minimum(h, HIST_BINS[0] - 1) * HIST_BINS[1] + s) * HIST_BINS[2] + v


def _widen(hist: np.ndarray) -> np.ndarray:
    """Each bin's value becomes the largest among it and its neighbours (hue wraps round)."""
    out = hist.copy()
    for axis in range(3):
        fwd = np.roll(out, 1, axis=axis)
        back = np.roll(out, -1, axis=axis)
        if axis > 0:  # saturation and value do not wrap
            idx = [slice(None)] * 3
            idx[axis] = 0
            fwd[tuple(idx)] = 0
            idx[axis] = -1
            back[tuple(idx)] = 0
        out = np.maximum(out, np.maximum(fwd, back))
    return out
