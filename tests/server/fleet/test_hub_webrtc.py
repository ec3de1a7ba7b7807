"""WebRTC through the hub (issue 22): the hub relays a robot page's signalling as the robot's signed ``webrtc``
requests; the media and the telemetry data channel flow between the client and the robot directly.

Real router, robot (video on) and hub: an aiortc client logged in to the hub opens ``/fleet/cam/ws/webrtc``, gets
the robot's ``webrtc_config``, offers, and receives H.264 from the robot's own encoders and telemetry snapshots on
its ``telemetry`` data channel; its ``control`` and ``estop`` channels are closed by the robot (commands from a hub
page go on the relayed socket: no way around the hub's checks); the robot lists the peer as a ``fleet/alice``
WebRTC viewer, and when the socket closes the peer is closed there. A hub user without view rights is refused at
the upgrade; a robot without video says so."""

from __future__ import annotations

import asyncio
import json
import zlib

import aiohttp
import pytest

from tests.server.fleet.fleetkit import hub_config, hub_keys, hub_proc, login, wait
from tests.server.fleet.test_hub import FLEET, cards
from tests.webrtc_kit import read_signals, until

pytestmark = pytest.mark.timeout(600)


async def through_the_hub(hub_url: str, headers: dict[str, str], robot) -> dict:
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    control = pc.createDataChannel("control", ordered=False, maxRetransmits=0)
    tel = pc.createDataChannel("telemetry", ordered=False, maxRetransmits=0)
    got: list[dict] = []
    tel.on("message", lambda m: got.append(json.loads(zlib.decompress(m) if isinstance(m, bytes) else m)))
    frames: list = []

    @pc.on("track")
    def on_track(track) -> None:
        async def read() -> None:
            while True:
                frames.append(await track.recv())

        asyncio.ensure_future(read())

    signals: list[dict] = []
    await pc.setLocalDescription(await pc.createOffer())
    url = hub_url.replace("http", "ws") + "/fleet/cam/ws/webrtc"
    async with aiohttp.ClientSession() as s, s.ws_connect(url, headers=headers) as ws:
        first = json.loads((await ws.receive()).data)
        await ws.send_str(json.dumps({"type": "bogus"}))
        await ws.send_str(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
        task = asyncio.ensure_future(read_signals(ws, pc, signals))
        await until(lambda: tel.readyState == "open", f"the telemetry channel never opened: {signals[-3:]}")
        tel.send(json.dumps({"type": "subscribe", "channels": ["battery_v"], "rate_hz": 10, "encoding": "delta"}))
        await until(lambda: len([m for m in got if m.get("type") == "telemetry"]) >= 5, f"no snapshots: {got[-3:]}")
        await until(lambda: len(frames) >= 10, f"fewer than 10 video frames: {len(frames)}")
        await until(lambda: control.readyState == "closed", "the robot kept the control channel open")
        await until(lambda: any(d["type"] == "rate" for d in signals), f"no rate report: {signals[-3:]}")
        status, video = await asyncio.to_thread(robot.get, "/api/video")
        task.cancel()
    await pc.close()
    return {"first": first, "signals": signals, "got": got, "frames": frames, "video": video}


def test_webrtc_through_the_hub_plays_and_carries_telemetry_but_no_commands(server_factory, router,
                                                                            tmp_path) -> None:
    private, public = hub_keys(tmp_path)

    def robot(rid: str, video: bool):
        return server_factory({"video": {"enabled": video},
                               "fleet": {"enabled": True, "router": [router.endpoint], "fleet": FLEET,
                                         "robot_id": rid, "hub_public_key": str(public)}})

    cam = robot("cam", True)
    robot("blind", False)
    cfg = hub_config(tmp_path, router, FLEET, private, users={"alice": "operator", "val": "viewer"},
                     robots={"cam": {"view": ["alice"]}})
    hub = hub_proc(cfg).start()
    try:
        alice, val = login(hub, "alice"), login(hub, "val")
        wait(lambda: all(cards(hub, alice).get(r, {}).get("online") for r in ("cam", "blind")), 120, "both online")
        r = asyncio.run(through_the_hub(hub.url, alice, cam))
        assert r["first"]["type"] == "webrtc_config" and r["first"]["data"]["codecs"], r["first"]
        assert any(d.get("error", {}).get("code") == "unknown_type" for d in r["signals"]), r["signals"]
        answer = next(d for d in r["signals"] if d["type"] == "answer")
        assert answer["codec"] == "h264"
        snaps = [m for m in r["got"] if m.get("type") == "telemetry"]
        assert "key" in snaps[0] and set(snaps[0]["data"]["values"]) == {"battery_v"}, snaps[0]
        peers = [c for c in r["video"]["clients"] if c.get("webrtc")]
        assert [c["remote"] for c in peers] == ["fleet/alice"], peers
        assert peers[0]["webrtc"]["commands"] == {"relayed": "commands go on the hub's relayed telemetry socket"}
        # the socket closed: the robot closes the peer (at once, or when it is no longer kept alive)
        wait(lambda: not [c for c in cam.get("/api/video")[1]["clients"] if c.get("webrtc")], 60,
             "the robot to close the peer")
        assert cam.get("/api/fleet/link")[1]["webrtc"]["offers"] == 1

        async def upgrade(rid: str, headers: dict[str, str]) -> int:
            async with aiohttp.ClientSession() as s:
                try:
                    async with s.ws_connect(hub.url.replace("http", "ws") + f"/fleet/{rid}/ws/webrtc",
                                            headers=headers):
                        return 101
                except aiohttp.WSServerHandshakeError as err:
                    return err.status

        assert asyncio.run(upgrade("cam", val)) == 403  # not allowed to view cam
        assert asyncio.run(upgrade("blind", alice)) == 503  # a robot without video: no_webrtc
    finally:
        hub.kill()
