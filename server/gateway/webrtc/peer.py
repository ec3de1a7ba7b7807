"""One browser's WebRTC peer connection: the shared encoded stream out, our rate control, data channels in.

- **Video**: the browser offers to receive; the answer picks the first codec of ``[webrtc] codecs``
  the browser supports (H.264 baseline, else VP8) and sends the tier encoders' packets as they
  are (:class:`EncodedTrack`: aiortc packetizes an ``av.Packet`` without encoding it, aiortc#939),
  so every viewer of a tier shares one encoder.
- **Rate control of our own**: the sender's RTCP handler is wrapped to see what aiortc only
  half-uses: receiver reports (loss, jitter; RTT from aiortc's own LSR/DLSR bookkeeping) and REMB
  go to a :class:`~server.gateway.video.ratecontrol.RateController`, whose decision moves the
  viewer's stream between tiers and sets the tier encoder's bitrate; PLI and FIR ask the tier's
  encoder for a keyframe (merged with every other viewer's requests: no keyframe storm). aiortc's
  own handling still runs (its stats, its NACK retransmissions).
- **Telemetry**: the ``telemetry`` data channel (unordered, no retransmission) carries the snapshots the browser
  subscribes to (:class:`~server.gateway.webrtc.telemetry.TelemetryChannel`).
- **Paced**: the RTP leaves through a token bucket at the path's estimated rate
  (:mod:`server.gateway.webrtc.pacer`), so a keyframe does not fill the bottleneck's queue ahead of telemetry.
- **Commands**: the ``control`` and ``estop`` data channels go through
  :class:`~server.gateway.webrtc.commands.CommandChannel` (the websocket's command path, freshness
  included: the peer syncs its clock with the browser over ``control``).
- **Lifetime**: the peer lives as long as its signalling socket (which the trust layer ends with
  the session): when it closes, the peer connection and its data channels close too, so no
  command path outlives the login.
"""

from __future__ import annotations

import asyncio
import fractions
import logging
import time
from typing import Any, Awaitable, Callable

from server.gateway.keys import HUB, PROFILE
from server.gateway.video.encoder import CLOCK_HZ
from server.gateway.video.ratecontrol import RateController
from server.gateway.video.service import VideoService
from server.gateway.video.tiers import Subscription
from server.gateway.webrtc.commands import CONTROL, ESTOP, CommandChannel
from server.gateway.webrtc.config import WebRtcConfig
from server.gateway.webrtc.ice import drop_mdns_candidates
from server.gateway.webrtc.pacer import Pacer
from server.gateway.webrtc.telemetry import TELEMETRY, TelemetryChannel
from server.gateway.ws_telemetry import check_subscription

log = logging.getLogger(__name__)

_TIME_BASE = fractions.Fraction(1, CLOCK_HZ)
PACE_MIN_FACTOR = 1.1  # the pacer never goes under 1.1 × the encoder's target: its output always fits
PACE_MIN_RTT_S = 0.02  # paced only on a path whose smallest round trip is at least this (not a LAN)
UNPACED_BIT_S = 1e10



def answer_codec(sdp: str) -> str | None:
    """The codec the answer sends (its video m-line's first payload type), as ``h264``/``vp8``/other."""
    first = None
    for line in sdp.split("\r\n"):
        if line.startswith("m=video "):
            parts = line.split(" ")
            first = parts[3] if len(parts) > 3 else None
        elif first is not None and line.startswith(f"a=rtpmap:{first} "):
            return line.split(" ", 1)[1].split("/")[0].lower()
    return None


def make_track(on_sent: Callable[[int, float], None] | None = None) -> Any:
    """A video track whose frames are a subscription's packets, once attached (aiortc is imported lazily)."""
    import av
    from aiortc.mediastreams import MediaStreamTrack

    class EncodedTrack(MediaStreamTrack):
        kind = "video"

        def __init__(self) -> None:
            super().__init__()
            self.sub: Subscription | None = None
            self._attached = asyncio.Event()
            self.sender: Any = None
            self.last_pts: int | None = None
            #: RTP timestamp − pts (mod 2**32): aiortc adds a random origin; with it the browser turns a
            #: frame's RTP timestamp back into its capture time (any camera, not only the sim's strip)
            self.rtp_origin: int | None = None

        def attach(self, sub: Subscription) -> None:
            self.sub = sub
            self._attached.set()

        async def recv(self) -> Any:
            await self._attached.wait()
            if self.rtp_origin is None and self.last_pts is not None and self.sender is not None:
                sent = getattr(self.sender, "_RTCRtpSender__rtp_timestamp", 0)  # the last frame's, once sent
                if sent:
                    self.rtp_origin = (sent - self.last_pts) & 0xFFFFFFFF
            pkt = await self.sub.get()
            self.last_pts = pkt.pts
            if on_sent is not None:
                on_sent(len(pkt.data), time.monotonic() - pkt.capture_t)  # its age at the handoff: our own lateness
            packet = av.Packet(pkt.data)
            packet.pts = pkt.pts
            packet.dts = pkt.pts
            packet.time_base = _TIME_BASE
            return packet

    return EncodedTrack()


class Peer:
    """One RTCPeerConnection (see the module docstring). Created by the signalling socket."""

    def __init__(self, app: Any, request: Any, service: VideoService, cfg: WebRtcConfig,
                 notify: Callable[[dict[str, Any]], None]) -> None:
        self.app, self.request, self.service, self.cfg = app, request, service, cfg
        self.notify = notify  # a message for the signalling socket (rate reports, state)
        self.commands = self._command_channel(app, request)
        self.pacer: Pacer | None = None  # the RTP pacer (server/gateway/webrtc/pacer.py), once the video is set up
        self.telemetry: TelemetryChannel | None = None  # the ``telemetry`` data channel, once the browser opens it
        self.pc: Any = None
        self.sub: Subscription | None = None
        self.rc: RateController | None = None
        self.codec: str | None = None
        self.track: Any = None
        self.state = "new"
        self.counters = {"pli": 0, "fir": 0, "remb": 0, "reports": 0, "nack": 0, "mdns_dropped": 0}
        self._tasks: set[asyncio.Task] = set()
        self._last_notify = 0.0
        self._closed = False

    def _command_channel(self, app: Any, request: Any) -> Any:
        """The data channels' command path (a hub-relayed peer has none: server/gateway/fleet/webrtc.py)."""
        return CommandChannel(app, request)

    # ---------------------------------------------------------------- negotiation
    async def answer(self, offer_sdp: str) -> str:
        """The answer to the browser's offer (every candidate gathered: no trickle)."""
        from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
        from aiortc.rtcconfiguration import RTCIceTransportPolicy

        stun, turn = self.cfg.stun_url()
        servers = []
        if stun:
            servers.append(RTCIceServer(urls=stun))
        if turn is not None:
            url = next(u for u in turn.urls if u.startswith("turn"))
            servers.append(RTCIceServer(urls=url, username=turn.username, credential=turn.credential))
        policy = RTCIceTransportPolicy.RELAY if self.cfg.ice_transport_policy == "relay" else RTCIceTransportPolicy.ALL
        self.pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=servers, iceTransportPolicy=policy))
        offer_sdp, dropped = drop_mdns_candidates(offer_sdp)
        self.counters["mdns_dropped"] = dropped

        @pc.on("datachannel")
        def on_datachannel(channel: Any) -> None:
            try:
                self._bind_channel(channel)
            except Exception:  # noqa: BLE001 - pyee would swallow it: say it, close the channel
                log.exception("binding the data channel %r failed", getattr(channel, "label", "?"))
                channel.close()

        @pc.on("connectionstatechange")
        def on_state() -> None:
            self.state = pc.connectionState
            log.info("WebRTC peer %s: %s", self.request.remote, self.state)
            self.notify({"type": "webrtc_state", "data": {"state": self.state}})
            if self.state in ("failed", "closed"):
                self._spawn(self.close())

        track = None
        if "m=video" in offer_sdp:
            # preferences on a transceiver made before the offer is applied: aiortc answers in their order
            from aiortc.rtcrtpsender import RTCRtpSender

            caps = RTCRtpSender.getCapabilities("video").codecs
            mimes = {"h264": "video/h264", "vp8": "video/vp8"}
            prefs = [c for name in self.cfg.codecs for c in caps if c.mimeType.lower() == mimes[name]]
            prefs += [c for c in caps if c.mimeType.lower() == "video/rtx"]
            transceiver = pc.addTransceiver("video", direction="sendonly")
            transceiver.setCodecPreferences(prefs)
            track = make_track(self._sent)
            transceiver.sender.replaceTrack(track)
            track.sender = transceiver.sender
            self.track = track
            self._hook_rtcp(transceiver.sender)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        answer = await pc.createAnswer()
        await pc.setLocalDescription(answer)
        if track is not None:
            self.codec = answer_codec(pc.localDescription.sdp)
            if self.codec not in self.cfg.codecs:
                raise ValueError(f"the browser offers none of the codecs in [webrtc] codecs {self.cfg.codecs}")
            self.sub = self.service.subscribe(self.codec)
            self.rc = RateController(self.service.tiers.ladder(), now=time.monotonic(),
                                     settings=self.service.rate_settings)
            self.sub.switch(self.rc.tier)
            self.sub.set_bitrate(self.rc.bitrate_bit_s)
            self.service.tiers.on_ladder.add(self._new_ladder)
            track.attach(self.sub)
            if self.cfg.pace_share > 0:
                dtls = track.sender.transport
                self.pacer = Pacer(self._pace_rate)
                dtls._send_rtp = self.pacer.wrap(dtls._send_rtp)
        self._spawn(self._connect_deadline())
        return pc.localDescription.sdp

    def _pace_rate(self) -> float:
        """The pacer's rate: ``pace_share`` of the path estimate, never under PACE_MIN_FACTOR × the encoder's target;
        unpaced on a path whose round trip stays under PACE_MIN_RTT_S (pacer.py says why)."""
        rc = self.rc
        if rc is None or rc.rtt_min_s is None or rc.rtt_min_s < PACE_MIN_RTT_S:
            return UNPACED_BIT_S  # a LAN: no queue worth moving, and pacing would cost the video a frame time
        return max(self.cfg.pace_share * rc.estimate_bit_s, PACE_MIN_FACTOR * rc.bitrate_bit_s)

    def _sent(self, nbytes: int, age_s: float) -> None:
        if self.rc is not None:
            self.rc.on_sent(now=time.monotonic(), nbytes=nbytes, age_s=age_s)

    def health(self, lag_s: float) -> None:
        """The browser's own lag (``{"type": "health"}`` on the signalling socket): a starved receiver."""
        if self.rc is not None and self.sub is not None:
            self._decide(self.rc.on_health(now=time.monotonic(), lag_s=lag_s))

    async def _connect_deadline(self) -> None:
        await asyncio.sleep(self.cfg.connect_timeout_s)
        if self.pc is not None and self.pc.connectionState not in ("connected", "closed"):
            log.warning("WebRTC peer %s did not connect within %.0f s: closed", self.request.remote,
                        self.cfg.connect_timeout_s)
            await self.close()

    # ---------------------------------------------------------------- data channels
    def _bind_channel(self, channel: Any) -> None:
        label = channel.label
        if label == TELEMETRY:
            self._bind_telemetry(channel)
            return
        if label not in (CONTROL, ESTOP):
            log.info("WebRTC peer %s opened an unknown data channel %r: closed", self.request.remote, label)
            channel.close()
            return

        @channel.on("message")
        def on_message(message: Any) -> None:
            self._spawn(self._on_message(channel, label, message))

        if label == CONTROL:
            self._spawn(self._drive_sync(channel))

    def _bind_telemetry(self, channel: Any) -> None:
        """Snapshots on ``telemetry`` (:mod:`server.gateway.webrtc.telemetry`), offered by the hub like a socket's."""
        if self.telemetry is not None:
            channel.close()  # one per peer
            return
        tcfg = self.app[PROFILE].telemetry
        tel = self.telemetry = TelemetryChannel(channel, check=lambda body: check_subscription(self.app, body),
                                                max_age_s=tcfg.max_age_s, source_rate_hz=tcfg.rate_hz)
        hub = self.app[HUB]
        hub.channels.add(tel)

        log.info("WebRTC peer %s: telemetry on the data channel", self.request.remote)

        @channel.on("message")
        def on_message(message: Any) -> None:
            try:
                reply = tel.handle(message)
                if reply is not None and channel.readyState == "open":
                    channel.send(reply)
            except Exception:  # noqa: BLE001 - pyee would swallow it
                log.exception("telemetry data channel message failed")

        @channel.on("close")
        def on_close() -> None:
            tel.close()
            hub.channels.discard(tel)

    async def _drive_sync(self, channel: Any) -> None:
        """The clock-sync exchange on ``control`` (:class:`~server.gateway.webrtc.commands.CommandChannel`): the
        data channel's ``sent_t`` are converted with an offset measured on its own path."""
        while not self._closed and channel.readyState in ("connecting", "open"):
            if channel.readyState == "open":
                msg = self.commands.sync_due()
                if msg is not None:
                    channel.send(msg)
            await asyncio.sleep(0.05)

    async def _on_message(self, channel: Any, label: str, message: Any) -> None:
        try:
            reply = await self.commands.handle(message, label)
        except Exception:  # noqa: BLE001 - never let a bug kill the peer silently; the e-stop path logs too
            log.exception("data channel message failed")
            return
        if reply is not None and channel.readyState == "open":
            channel.send(reply)

    # ---------------------------------------------------------------- rate control
    def _hook_rtcp(self, sender: Any) -> None:
        from aiortc.rtp import (RTCP_PSFB_APP, RTCP_PSFB_FIR, RTCP_PSFB_PLI, RTCP_RTPFB_NACK, RtcpPsfbPacket,
                                RtcpRrPacket, RtcpRtpfbPacket, RtcpSrPacket, unpack_remb_fci)

        original: Callable[[Any], Awaitable[None]] = sender._handle_rtcp_packet

        async def handle(packet: Any) -> None:
            await original(packet)  # aiortc's own: stats, RTT, NACK retransmissions
            if self.sub is None or self.rc is None:
                return
            now = time.monotonic()
            if isinstance(packet, (RtcpRrPacket, RtcpSrPacket)):
                for report in packet.reports:
                    if report.ssrc != sender._ssrc:
                        continue
                    self.counters["reports"] += 1
                    rtt = await self._rtt(sender)
                    self._decide(self.rc.on_report(now=now, fraction_lost=report.fraction_lost / 256.0,
                                                   rtt_s=rtt, jitter_s=report.jitter / CLOCK_HZ))
            elif isinstance(packet, RtcpPsfbPacket) and packet.fmt in (RTCP_PSFB_PLI, RTCP_PSFB_FIR):
                self.counters["pli" if packet.fmt == RTCP_PSFB_PLI else "fir"] += 1
                self.sub.request_keyframe()
            elif isinstance(packet, RtcpPsfbPacket) and packet.fmt == RTCP_PSFB_APP:
                try:
                    bitrate, ssrcs = unpack_remb_fci(packet.fci)
                except ValueError:
                    return
                if sender._ssrc in ssrcs:
                    self.counters["remb"] += 1
                    self._decide(self.rc.on_remb(bitrate, now=now))
            elif isinstance(packet, RtcpRtpfbPacket) and packet.fmt == RTCP_RTPFB_NACK:
                self.counters["nack"] += len(packet.lost)

        sender._handle_rtcp_packet = handle

    @staticmethod
    async def _rtt(sender: Any) -> float | None:
        try:
            stats = await sender.getStats()
        except Exception:  # noqa: BLE001 - no RTT this time
            return None
        for s in stats.values():
            if getattr(s, "type", None) == "remote-inbound-rtp":
                return s.roundTripTime
        return None

    def _new_ladder(self, ladder: list[Any]) -> None:
        """The capture's size changed: the ladder was fitted to it again (tiers.py)."""
        if self.rc is not None and self.sub is not None and not self._closed:
            self._decide(self.rc.set_ladder(ladder, now=time.monotonic()))

    def _decide(self, decision: Any) -> None:
        assert self.sub is not None and self.rc is not None
        if decision.tier_changed:
            self.sub.switch(decision.tier)
            log.info("WebRTC peer %s: tier %s (%s)", self.request.remote, decision.tier, decision.reason)
        self.sub.set_bitrate(decision.bitrate_bit_s)
        now = time.monotonic()
        if decision.tier_changed or now - self._last_notify >= 1.0:
            self._last_notify = now
            self.notify({"type": "rate", "data": self.to_json()})

    # ---------------------------------------------------------------- lifecycle
    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.service.tiers.on_ladder.discard(self._new_ladder)
        if self.telemetry is not None:
            self.telemetry.close()
            self.app[HUB].channels.discard(self.telemetry)
        if self.sub is not None:
            self.sub.close()
        pc, self.pc = self.pc, None
        if pc is not None:
            try:
                await pc.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                log.debug("closing the peer connection failed", exc_info=True)
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "codec": self.codec, "rate": None if self.rc is None else self.rc.to_json(),
                "rtp_origin": None if self.track is None else self.track.rtp_origin,
                "stream": None if self.sub is None else self.sub.to_json(), "rtcp": dict(self.counters),
                "commands": self.commands.to_json(), "pacer": None if self.pacer is None else self.pacer.to_json(),
                "telemetry": None if self.telemetry is None else self.telemetry.to_json()}


class PlainPeer(Peer):
    """The bench's peer (``[debug] routes`` only): aiortc with its defaults — its own encoder per
    connection, fed raw frames from the same capture, the codec the browser's offer lists first, REMB
    the only rate control, no tiers, no data channels of ours (bench/bench_webrtc.py)."""

    async def answer(self, offer_sdp: str) -> str:
        import av
        from aiortc import RTCPeerConnection, RTCSessionDescription
        from aiortc.mediastreams import VideoStreamTrack

        service = self.service
        service.keep_raw += 1

        class RawTrack(VideoStreamTrack):
            async def recv(self) -> Any:
                pts, time_base = await self.next_timestamp()
                raw = service.latest_raw
                while raw is None:
                    await asyncio.sleep(0.01)
                    raw = service.latest_raw
                frame = av.VideoFrame.from_ndarray(raw[0], format="bgr24")
                frame.pts, frame.time_base = pts, time_base
                return frame

        self.pc = pc = RTCPeerConnection()
        offer_sdp, self.counters["mdns_dropped"] = drop_mdns_candidates(offer_sdp)

        @pc.on("connectionstatechange")
        def on_state() -> None:
            self.state = pc.connectionState
            self.notify({"type": "webrtc_state", "data": {"state": self.state}})

        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        pc.addTrack(RawTrack())
        await pc.setLocalDescription(await pc.createAnswer())
        self.codec = answer_codec(pc.localDescription.sdp)
        return pc.localDescription.sdp

    async def close(self) -> None:
        if not self._closed:
            self.service.keep_raw -= 1
        await super().close()
