"""WebRTC from the gateway (aiortc): the signalling socket, one peer per viewer, data channels for commands.

signalling.py (``/ws/webrtc`` and :func:`setup_webrtc`) → peer.py (the peer connection, its RTCP
and the encoded track) → commands.py (the one adapter to the command path); config.py is the
``[webrtc]`` table, ice.py the candidate addresses. docs/video.md describes the transport.
"""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.webrtc.config import WebRtcConfig
    from server.gateway.webrtc.signalling import setup_webrtc

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "config": ("WebRtcConfig",),
    "signalling": ("setup_webrtc",),
})
