"""WebRTC for a robot's page served by the hub (issue 22): the hub relays the signalling, the media goes direct.

Video is not carried over Zenoh (one remote image subscriber cut every subscriber from 30 to 12 fps in a published
report). The hub's ``/fleet/{id}/ws/webrtc`` (server/hub/dashboard.py) speaks the robot's ``/ws/webrtc`` protocol
to the page and turns it into the robot's signed ``webrtc`` requests (the ``rpc`` queryable, the hub user's
identity, the viewer rule), handled here:

- ``action: "config"`` → this robot's ``webrtc_config`` (ICE servers, policy, codecs, jitter target);
- ``action: "offer"``, ``peer`` (the hub's id for the page's peer), ``sdp`` → ``{"sdp", "codec"}``: a
  :class:`FleetPeer`, the robot's own :class:`~server.gateway.webrtc.peer.Peer` (the shared tier encoders, the
  rate control, the pacer, the ``telemetry`` data channel), whose ICE candidates are this robot's, so the media
  flows browser ↔ robot directly, or through the TURN server ``[webrtc]`` names;
- ``action: "keep"``, ``peer``, ``lag_ms``? → the peer's ``rate`` report (the page needs its ``rtp_origin`` for the
  picture's age) and its state, and the page's event-loop lag for the rate controller. A peer not kept for
  ``KEEP_S`` is closed: when the page, the hub or the router goes away, the media stops by itself;
- ``action: "close"``, ``peer``.

**No command on the media path.** The page's ``control`` and ``estop`` data channels are closed at once: a command
from the hub's page goes on its relayed telemetry socket, through the hub's checks and then this robot's (the
fleet path of ``robot.py``), and the page keeps sending there when the channels close (datachannels.js). A
peer's lifetime is the hub session's: at most ``MAX_PEERS_PER_SESSION`` per hub session (its oldest closes for a
new one) and ``MAX_PEERS`` per robot (then 503 ``busy``: one user's pages never close another's).
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import orjson
from aiohttp import web

from server.errors import ApiError, ValidationError
from server.gateway.video import VIDEO_KEY
from server.gateway.webrtc.commands import CONTROL, ESTOP
from server.gateway.webrtc.peer import Peer
from server.gateway.webrtc.signalling import WEBRTC_KEY, config_message

log = logging.getLogger(__name__)

KEEP_S = 10.0  # a peer the hub has not kept alive for this long is closed
MAX_PEERS = 8  # hub-relayed peers per robot (each is a video viewer of the shared tier encoders)
MAX_PEERS_PER_SESSION = 2  # per hub session (its oldest closes for a third): one user cannot take every slot
MAX_SDP = 64 * 1024
ACTIONS = ("config", "offer", "keep", "close")


class NoCommands:
    """A hub-relayed peer's command path: none (its commands come on the hub's relayed socket)."""

    def to_json(self) -> dict[str, Any]:
        return {"relayed": "commands go on the hub's relayed telemetry socket"}


class FleetPeer(Peer):
    """A peer whose signalling comes through the hub: video and telemetry, never commands (module docstring)."""

    def _command_channel(self, app: Any, request: Any) -> Any:
        return NoCommands()

    def _bind_channel(self, channel: Any) -> None:
        if channel.label in (CONTROL, ESTOP):
            log.info("WebRTC peer %s (through the hub): %r closed, commands go on the relayed socket",
                     self.request.remote, channel.label)
            channel.close()
            return
        super()._bind_channel(channel)


class FleetWebrtc:
    """The hub-relayed peers of one robot, keyed by (hub session, the hub's peer id)."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.peers: dict[tuple[str, str], tuple[FleetPeer, Any, list[float]]] = {}  # peer, viewer, [last kept]
        self.reports: dict[tuple[str, str], dict[str, Any]] = {}
        self.counts = {"offers": 0, "expired": 0}

    def _config(self) -> Any:
        if WEBRTC_KEY not in self.app or self.app.get(VIDEO_KEY) is None:
            raise ApiError("this robot has no WebRTC video ([video] or [webrtc] is off)", code="no_webrtc",
                           status=503)
        return self.app[WEBRTC_KEY], self.app[VIDEO_KEY]

    async def handle(self, req: dict[str, Any], user: str, session: str) -> dict[str, Any]:
        action = req.get("action")
        if action not in ACTIONS:
            raise ValidationError(f"webrtc action {str(action)[:40]!r} is not one of {', '.join(ACTIONS)}",
                                  code="invalid")
        cfg, service = self._config()
        if action == "config":
            return orjson.loads(config_message(cfg))["data"]
        pid = req.get("peer")
        if not isinstance(pid, str) or not 0 < len(pid) <= 64:
            raise ValidationError("peer must be a string of 1 to 64 characters", code="wrong_type")
        key = (session, pid)
        if action == "offer":
            sdp = req.get("sdp")
            if not isinstance(sdp, str) or not sdp.startswith("v=0") or len(sdp) > MAX_SDP:
                raise ValidationError(f"offer needs an sdp string (v=0 ...) of at most {MAX_SDP} characters",
                                      code="wrong_type")
            return await self._offer(key, sdp, user, cfg, service)
        entry = self.peers.get(key)
        if action == "close":
            if entry is not None:
                await self._close(key)
            return {"closed": entry is not None}
        if entry is None:
            raise ApiError(f"no WebRTC peer {pid!r} for this session (closed, or not kept alive for {KEEP_S:.0f} s)",
                           code="no_peer", status=404)
        peer, _viewer, kept = entry
        kept[0] = time.monotonic()
        lag = req.get("lag_ms")
        if lag is not None:
            if isinstance(lag, bool) or not isinstance(lag, (int, float)) or not 0 <= lag <= 60_000:
                raise ValidationError("lag_ms must be a number of ms in [0, 60000]", code="out_of_limits")
            peer.health(lag / 1e3)
        return {"state": peer.state, "rate": peer.to_json()}

    async def _offer(self, key: tuple[str, str], sdp: str, user: str, cfg: Any, service: Any) -> dict[str, Any]:
        if key in self.peers:
            await self._close(key)  # a new offer replaces the peer, as on /ws/webrtc
        mine = [k for k in self.peers if k[0] == key[0]]
        if len(mine) >= MAX_PEERS_PER_SESSION:
            await self._close(mine[0])  # this session's oldest page gives way, never another user's
        if len(self.peers) >= MAX_PEERS:
            raise ApiError(f"{MAX_PEERS} pages already get this robot's video through the hub", code="busy",
                           status=503)
        self.counts["offers"] += 1
        request = SimpleNamespace(app=self.app, remote=f"fleet/{user}")
        viewer = service.add_client("webrtc", request.remote)
        peer = FleetPeer(self.app, request, service, cfg, lambda msg: None)
        try:
            answer = await peer.answer(sdp)
        except ValueError as err:
            await peer.close()
            service.remove_client(viewer)
            raise ApiError(f"cannot answer this offer: {err}", code="unsupported", status=422) from err
        except Exception:
            await peer.close()
            service.remove_client(viewer)
            raise
        viewer.stream = peer.sub
        viewer.peer = peer
        self.peers[key] = (peer, viewer, [time.monotonic()])
        return {"sdp": answer, "codec": peer.codec}

    async def _close(self, key: tuple[str, str]) -> None:
        entry = self.peers.pop(key, None)
        if entry is None:
            return
        peer, viewer, _ = entry
        await peer.close()
        try:
            self._config()[1].remove_client(viewer)
        except ApiError:
            pass

    async def expire(self) -> None:
        """Close every peer not kept within KEEP_S, and every one whose connection ended."""
        now = time.monotonic()
        for key, (peer, _viewer, kept) in list(self.peers.items()):
            if now - kept[0] > KEEP_S or peer.state in ("failed", "closed"):
                self.counts["expired"] += 1
                await self._close(key)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.expire()

    async def close(self) -> None:
        for key in list(self.peers):
            await self._close(key)

    def status(self) -> dict[str, Any]:
        return {"peers": len(self.peers), **self.counts}
