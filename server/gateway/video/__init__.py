"""Camera video for the gateway: settings, encoding, the capture service and the routes."""

from server.gateway.video.routes import VIDEO_KEY, setup_video
from server.gateway.video.service import VideoService, camera_factory
from server.gateway.video.settings import VideoConfig, validate_video_settings

__all__ = ["VIDEO_KEY", "VideoConfig", "VideoService", "camera_factory", "setup_video", "validate_video_settings"]
