"""Camera sources: one interface (:class:`drivers.camera.base.CameraSource`) for
OpenCV devices, files and streams (:mod:`drivers.camera.opencv`) and the
simulator's synthetic camera (:mod:`drivers.camera.sim`).

Backends are registered by name in :data:`drivers.registry.CAMERAS` and imported
lazily, so this package loads without OpenCV.
"""

from drivers.camera.base import CameraError, CameraSettings, CameraSource

__all__ = ["CameraError", "CameraSettings", "CameraSource"]
