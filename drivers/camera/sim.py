"""The simulator's camera: :func:`sim.camera.render` of the world from the robot's pose.

The sim driver builds it in ``camera_source(settings)``::

    SimCamera(settings, world, pose_fn=lambda: dict(self._pose), rng=self._camera_rng)

``pose_fn`` is called from the video capture thread, so it must be cheap and
thread-safe: return a copy of the latest pose (``x, y, z`` m; ``yaw, pitch,
roll`` rad; optionally ``t``, the sim time in s, shown in the overlay) that the
control thread replaces as a whole each tick. ``rng`` must be the camera's own
``numpy.random.Generator`` (a Generator is not thread-safe; spawn one from the
sim's seed), used only for sensor noise.

Settings keys (the ``[video]`` table; degrees at this edge, radians inside):
``width``, ``height``, ``fps``, ``hfov_deg`` (70), ``mount_height_m`` (0.25),
``mount_forward_m`` (0.10), ``mount_pitch_deg`` (0, positive tilts down),
``noise_sigma`` (0, grey levels).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping

import numpy as np

from drivers.camera.base import CameraError, CameraSettings, CameraSource
from sim.camera import CameraIntrinsics, CameraMount, render
from sim.world import World


class SimCamera(CameraSource):
    """A synthetic camera on the simulated robot; ``read()`` renders at once (the caller paces it)."""

    name = "sim"

    def __init__(
        self,
        settings: Mapping[str, Any] | CameraSettings | None,
        world: World,
        pose_fn: Callable[[], Mapping[str, float]],
        rng: np.random.Generator | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings)
        table = settings if isinstance(settings, Mapping) else {}
        self.world = world
        self.pose_fn = pose_fn
        self.rng = rng
        self.clock = clock
        self.hfov_rad = math.radians(float(table.get("hfov_deg", 70.0)))
        self.noise_sigma = float(table.get("noise_sigma", 0.0))
        self.mount = CameraMount(
            forward_m=float(table.get("mount_forward_m", 0.10)),
            height_m=float(table.get("mount_height_m", 0.25)),
            pitch_rad=math.radians(float(table.get("mount_pitch_deg", 0.0))),
        )
        self.frame_no = 0
        self._intrinsics = self._make_intrinsics(self._settings)

    def _make_intrinsics(self, s: CameraSettings) -> CameraIntrinsics:
        try:
            return CameraIntrinsics(s.width, s.height, self.hfov_rad, self.noise_sigma)
        except ValueError as err:
            raise CameraError(f"sim camera: {err}") from err

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "sim", "hfov_deg": round(math.degrees(self.hfov_rad), 2)}

    def _open(self) -> None:
        self._intrinsics = self._make_intrinsics(self._settings)
        self.frame_no = 0

    def _read(self) -> tuple[np.ndarray, float]:
        try:
            pose = self.pose_fn()
        except Exception as err:  # noqa: BLE001 - a broken pose source is a camera failure, not a crash
            raise CameraError(f"sim camera: pose unavailable: {err}") from err
        t = self.clock()  # the pose is the instant the picture shows
        t_sim = float(pose.get("t", self.frame_no / self._settings.fps))
        frame = render(self.world, pose, self._intrinsics, t_sim, self.frame_no, self.rng, mount=self.mount)
        self.frame_no += 1
        return frame, t

    def _apply(self, settings: CameraSettings) -> None:
        self._intrinsics = self._make_intrinsics(settings)

    def _close(self) -> None:
        return None
