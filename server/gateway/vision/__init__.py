"""Camera frames become measurements: fiducial markers, a marker pose fix and a floor cue (docs/vision.md).

The pipeline runs in the gateway next to the video service, in its own thread, fed by
the service's ``frame_listeners`` (latest frame wins); its channels go to the runtime
through the runtime API and its marker overlays to the dashboard.
"""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.vision.camera import CameraModel
    from server.gateway.vision.config import MarkerEntry, VisionConfig, markers_from_world, parse_vision_config
    from server.gateway.vision.floor import FloorCue, FloorReading
    from server.gateway.vision.markers import MarkerDetection, MarkerDetector
    from server.gateway.vision.pipeline import VisionPipeline, VisionResult, camera_from_config
    from server.gateway.vision.worker import VisionWorker

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "camera": ("CameraModel",),
    "config": ("MarkerEntry", "VisionConfig", "markers_from_world", "parse_vision_config"),
    "floor": ("FloorCue", "FloorReading"),
    "markers": ("MarkerDetection", "MarkerDetector"),
    "pipeline": ("VisionPipeline", "VisionResult", "camera_from_config"),
    "worker": ("VisionWorker",),
})
