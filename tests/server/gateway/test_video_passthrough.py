"""Hardware H.264 passes through without re-encoding (issue 21 §1): a camera that delivers H.264 access units
(the sim camera's ``format = "h264"``, sim/camera_h264.py, standing in for a camera's hardware encoder) is
sent as tier ``native`` to WebRTC and to /ws/video?codec=h264 as it is: the real server (python -m server),
the frames decoded here (PyAV; an aiortc receiver for WebRTC), and the gateway started no encoder of its own
(``encoders_started`` 0, no encoder listed); a viewer's keyframe request reaches the camera.

Before, the first viewer subscribed before the camera's first packet and started a libx264 encoder of the
top tier, and the sim camera had no H.264 mode at all."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from tests.conftest import ServerProc, wait_until
from tests.server.gateway.test_video_tiers import decoded_frames, split

pytestmark = pytest.mark.timeout(180)

H264_CAMERA = {"video": {"enabled": True, "format": "h264", "width": 320, "height": 240, "fps": 15}}


def no_encoder_of_ours(srv: ServerProc) -> dict:
    body = srv.get("/api/video")[1]
    encoded = body["encoded"]
    assert encoded["encoders"] == [] and encoded["encoders_started"] == 0, encoded
    assert encoded["ladder"][0]["name"] == "native", encoded["ladder"]
    return body


def test_ok__the_cameras_h264_reaches_a_websocket_viewer_as_it_is(server_factory) -> None:
    srv = server_factory(H264_CAMERA)

    async def check(n: int) -> None:
        if n == 5:  # while the viewer watches
            await asyncio.to_thread(no_encoder_of_ours, srv)

    got = [(h["tier"], w, hh, h["keyframe"]) for h, w, hh in asyncio.run(decoded_frames(srv, 10, check))]
    assert {g[:3] for g in got} == {("native", 320, 240)}, got
    assert got[0][3], "the first frame shown is a keyframe"
    body = no_encoder_of_ours(srv)
    assert body["encoded"]["native_keyframe_requests"] >= 1
    assert body["counters"]["source_keyframe_requests"] >= 1  # forwarded to the camera


def test_ok__the_cameras_h264_reaches_a_webrtc_viewer_as_it_is(server_factory) -> None:
    srv = server_factory(H264_CAMERA)

    async def go() -> tuple[int, list[dict]]:
        from aiortc import RTCPeerConnection, RTCSessionDescription

        pc = RTCPeerConnection()
        pc.addTransceiver("video", direction="recvonly")
        frames: list = []

        @pc.on("track")
        def on_track(track) -> None:
            async def pull() -> None:
                while True:
                    frames.append(await track.recv())

            asyncio.ensure_future(pull())

        await pc.setLocalDescription(await pc.createOffer())
        async with aiohttp.ClientSession() as s, s.ws_connect(srv.ws_url + "/ws/webrtc",
                                                              headers={"Origin": srv.url}) as ws:
            await ws.send_str(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))

            async def reader() -> None:
                async for msg in ws:
                    d = json.loads(msg.data)
                    if d["type"] == "answer":
                        assert d["codec"] == "h264", d
                        await pc.setRemoteDescription(RTCSessionDescription(d["sdp"], "answer"))

            task = asyncio.ensure_future(reader())
            deadline = time.monotonic() + 90
            while len(frames) < 10:
                assert time.monotonic() < deadline, f"{len(frames)} frames decoded"
                await asyncio.sleep(0.05)
            peers = [c["webrtc"] for c in srv.get("/api/video")[1]["clients"] if c.get("webrtc")]
            no_encoder_of_ours(srv)
            task.cancel()
        await pc.close()
        return len(frames), peers, (frames[-1].width, frames[-1].height)

    n, peers, size = asyncio.run(go())
    assert n >= 10 and size == (320, 240), (n, size)
    assert len(peers) == 1 and peers[0]["stream"]["tier"] == "native" and peers[0]["stream"]["packets"] >= 10, peers
    wait_until(lambda: srv.get("/api/video")[1]["counters"]["source_keyframe_requests"] >= 1, 30,
               "the viewer's keyframe request forwarded to the camera")
    no_encoder_of_ours(srv)


def test_ok__without_the_h264_format_the_gateway_encodes(server_factory) -> None:
    """The control: the same camera delivering pictures is encoded by the gateway (one encoder started)."""
    srv = server_factory({"video": {**H264_CAMERA["video"], "format": "bgr"}})

    async def go() -> dict:
        async with aiohttp.ClientSession() as s, s.ws_connect(srv.ws_url + "/ws/video?codec=h264") as ws:
            while True:
                msg = await asyncio.wait_for(ws.receive(), 60)
                if msg.type == aiohttp.WSMsgType.BINARY:
                    return split(msg.data)[0]

    header = asyncio.run(go())
    assert header["tier"] != "native"
    assert srv.get("/api/video")[1]["encoded"]["encoders_started"] >= 1
