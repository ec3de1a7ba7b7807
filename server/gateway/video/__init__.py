"""Camera video for the gateway (docs/video.md).

capture.py (the camera thread) → service.py (JPEG once; the frames to every tier encoder) →
tiers.py / encoder.py (H.264 and VP8, one encoder per quality tier, shared by its viewers) →
viewers.py, routes.py, h264_ws.py (JPEG and H.264 over the websocket, MJPEG, snapshots);
ratecontrol.py steers each encoded viewer; the WebRTC transport is :mod:`server.gateway.webrtc`.
"""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.video.key import VIDEO_KEY
    from server.gateway.video.routes import setup_video
    from server.gateway.video.service import VideoService, camera_factory
    from server.gateway.video.settings import VideoConfig, validate_video_settings

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "key": ("VIDEO_KEY",),
    "routes": ("setup_video",),
    "service": ("VideoService", "camera_factory"),
    "settings": ("VideoConfig", "validate_video_settings"),
})
