"""The app key of the gateway's video service, in a module of its own: the metrics, the recorder, WebRTC and
the fleet look the service up with it, and a gateway with video off imports no OpenCV to do so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from server.gateway.video.service import VideoService

VIDEO_KEY: web.AppKey[VideoService] = web.AppKey("video")

__all__ = ["VIDEO_KEY"]
