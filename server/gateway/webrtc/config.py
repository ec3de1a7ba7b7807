"""The ``[webrtc]`` table: ICE servers (none by default), the candidate addresses, codecs.

None by default because the robot may have no internet: on a LAN (and in ``make run``, on
loopback) host candidates are enough. Through NATs give a STUN server; where both ends are behind
NATs that break hole punching, a TURN relay (docs/video.md "TURN": coturn, long-term credentials).
aiortc uses the first ``stun:`` and the first ``turn:``/``turns:`` URL; the browser gets them all.

>>> WebRtcConfig().ice_servers, WebRtcConfig().ice_transport_policy
([], 'all')
>>> IceServer(urls=["ftp://x"])
Traceback (most recent call last):
...
ValueError: ICE server URL must start with stun:, turn: or turns:, not 'ftp://x'
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from server.config import Table


class IceServer(msgspec.Struct, forbid_unknown_fields=True):
    """One ``[[webrtc.ice_servers]]`` entry (the browser's RTCIceServer)."""

    urls: Annotated[list[Annotated[str, Meta(min_length=5, max_length=300)]], Meta(min_length=1, max_length=8)]
    username: Annotated[str, Meta(max_length=200)] | None = None
    credential: Annotated[str, Meta(max_length=200)] | None = None

    def __post_init__(self) -> None:
        for url in self.urls:
            if not url.startswith(("stun:", "turn:", "turns:")):
                raise ValueError(f"ICE server URL must start with stun:, turn: or turns:, not {url!r}")
            if url.startswith("turn") and (self.username is None or self.credential is None):
                raise ValueError(f"TURN server {url!r} needs a username and a credential")

    def to_json(self) -> dict:
        out: dict = {"urls": list(self.urls)}
        if self.username is not None:
            out["username"] = self.username
            out["credential"] = self.credential
        return out


class WebRtcConfig(Table):
    """The ``[webrtc]`` table (docs/video.md)."""

    enabled: bool = True
    ice_servers: list[IceServer] = msgspec.field(default_factory=list)
    #: "relay": only TURN candidates, on both ends (a path that must go through the relay)
    ice_transport_policy: Literal["all", "relay"] = "all"
    #: addresses for host candidates; empty: the one the gateway listens on (every interface for 0.0.0.0)
    host_addresses: list[Annotated[str, Meta(min_length=2, max_length=64)]] = msgspec.field(default_factory=list)
    #: in order of preference; the browser's offer decides what is possible
    codecs: Annotated[list[Literal["h264", "vp8"]], Meta(min_length=1, max_length=2)] = \
        msgspec.field(default_factory=lambda: ["h264", "vp8"])
    #: the browser's RTCRtpReceiver.jitterBufferTarget in ms (0: as low as Chromium goes)
    jitter_buffer_target_ms: Annotated[int, Meta(ge=0, le=4000)] = 0
    #: a peer connection that has not connected this long after the answer is closed
    connect_timeout_s: Annotated[float, Meta(gt=0, le=300)] = 30.0
    #: the video's RTP leaves at this share of the path's estimated rate (server/gateway/webrtc/pacer.py; 0: no pacer)
    pace_share: Annotated[float, Meta(ge=0, le=1)] = 0.8

    def __post_init__(self) -> None:
        if len(set(self.codecs)) != len(self.codecs):
            raise ValueError("codecs must not repeat")

    def stun_url(self) -> tuple[str | None, IceServer | None]:
        """The first STUN URL and the first TURN server (aiortc takes one of each)."""
        stun = next((u for s in self.ice_servers for u in s.urls if u.startswith("stun:")), None)
        turn = next((s for s in self.ice_servers if any(u.startswith("turn") for u in s.urls)), None)
        return stun, turn
