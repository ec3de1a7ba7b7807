"""WebRTC against the real server (local mode): an aiortc client in the test's process signals on /ws/webrtc,
gets H.264 packets, and its data channels reach the command path: the e-stop latches, a speed while idle
is refused with the websocket's error, a bad envelope is an error that names the field, nothing moves."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from tests.webrtc_kit import read_signals

pytestmark = pytest.mark.timeout(120)


async def webrtc_client(url: str, actions, clock=time.time):
    """``clock``: the client's, for its answers to the peer's clock sync (the browser's ``sent_t`` clock)."""
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    control = pc.createDataChannel("control", ordered=False, maxRetransmits=0)
    estop = pc.createDataChannel("estop")
    replies: list[tuple[str, dict]] = []

    def on_control(m):
        d = json.loads(m)
        if d.get("type") == "sync":  # the peer syncs its clock to ours (server/gateway/webrtc/commands.py)
            t2 = clock()
            control.send(json.dumps({"type": "sync", "t1": d["t1"], "t2": t2, "t3": clock()}))
        else:
            replies.append(("control", d))

    control.on("message", on_control)
    estop.on("message", lambda m: replies.append(("estop", json.loads(m))))
    signals: list[dict] = []
    await pc.setLocalDescription(await pc.createOffer())
    async with aiohttp.ClientSession() as s, s.ws_connect(url.replace("http", "ws") + "/ws/webrtc",
                                                          headers={"Origin": url}) as ws:
        assert json.loads((await ws.receive()).data)["type"] == "webrtc_config"
        await ws.send_str(json.dumps({"type": "bogus"}))
        await ws.send_str(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
        task = asyncio.ensure_future(read_signals(ws, pc, signals))
        deadline = time.monotonic() + 60
        while not (control.readyState == "open" and estop.readyState == "open"):
            assert time.monotonic() < deadline, "data channels never opened"
            await asyncio.sleep(0.05)
        result = await actions(control, estop, replies) if actions.__code__.co_argcount == 3 \
            else await actions(control, estop, replies, signals)
        task.cancel()
    await pc.close()
    return result, signals, replies


def test_data_channels_reach_the_command_path_and_the_estop_latches(server_factory):
    srv = server_factory({"video": {"enabled": True}})

    async def actions(control, estop, replies):
        control.send(json.dumps({"type": "speed", "linear": 0.1, "angular": 0.0, "seq": 1, "sent_t": time.time()}))
        control.send(json.dumps({"type": "heartbeat", "seq": "two"}))
        estop.send(json.dumps({"type": "estop", "id": 7, "reason": "data channel", "seq": 1, "sent_t": time.time()}))
        deadline = time.monotonic() + 30
        while len(replies) < 3:
            assert time.monotonic() < deadline, replies
            await asyncio.sleep(0.05)

    _, signals, replies = asyncio.run(webrtc_client(srv.url, actions))
    kinds = [d["type"] for d in signals]
    assert "answer" in kinds and any(d.get("error", {}).get("code") == "unknown_type" for d in signals)
    answer = next(d for d in signals if d["type"] == "answer")
    assert answer["codec"] == "h264"
    by = {(ch, r.get("type"), (r.get("error") or {}).get("code")) for ch, r in replies}
    assert ("control", "error", "not_running") in by          # the websocket's own refusal: the same path
    assert ("control", "error", "wrong_type") in by           # the envelope checked, named
    assert ("estop", "ack", None) in by
    st = srv.state()
    assert st["state"] == "estop" and "data channel" in str(st["cause"])
    assert st["setpoint"]["linear"] == 0.0


def test_data_channel_commands_are_held_to_their_age_and_order_on_a_clock_synced_over_the_channel(server_factory):
    """The data channel's envelope is the websocket's (issue 20 §2): the peer syncs its clock with the client's over
    ``control`` (the client's clock here is an hour off), then a speed sent 5 s ago is dropped as stale, one not
    newer than the last applied as reordered, both answered with ``dropped`` and counted; a fresh one is applied."""
    srv = server_factory({"video": {"enabled": True}, "safety": {"command_timeout_s": 30.0,
                                                                "governor": {"enabled": False}}})
    assert srv.post("/api/start", {})[0] == 200

    def client_clock() -> float:
        return time.monotonic() + 3600.0

    async def actions(control, estop, replies, signals):
        deadline = time.monotonic() + 30

        def commands():
            rates = [d for d in signals if d["type"] == "rate"]
            return rates[-1]["data"]["commands"] if rates else None

        while not (commands() or {}).get("clock", {}).get("synced"):
            assert time.monotonic() < deadline, f"the peer's clock never synced: {commands()}"
            await asyncio.sleep(0.05)
        control.send(json.dumps({"type": "speed", "linear": 0.05, "angular": 0.0, "seq": 1,
                                 "sent_t": client_clock() - 5.0}))
        control.send(json.dumps({"type": "speed", "linear": 0.08, "angular": 0.0, "seq": 3, "sent_t": client_clock()}))
        while srv.state()["setpoint"]["linear"] != 0.08:
            assert time.monotonic() < deadline, (srv.state()["setpoint"], replies)
            await asyncio.sleep(0.05)
        control.send(json.dumps({"type": "speed", "linear": 0.02, "angular": 0.0, "seq": 2, "sent_t": client_clock()}))
        while len([r for _, r in replies if r.get("dropped")]) < 2:
            assert time.monotonic() < deadline, replies
            await asyncio.sleep(0.05)
        while not (commands() or {}).get("streams", {}).get("control", {}).get("reordered_dropped"):
            assert time.monotonic() < deadline, commands()
            await asyncio.sleep(0.05)
        return commands()

    counts, _, replies = asyncio.run(webrtc_client(srv.url, actions, clock=client_clock))
    dropped = [r["dropped"] for _, r in replies if r.get("dropped")]
    assert dropped == ["stale", "reordered"], replies
    assert srv.state()["setpoint"]["linear"] == 0.08  # neither the stale nor the reordered one was applied
    control = counts["streams"]["control"]
    assert control["stale_dropped"] == 1 and control["reordered_dropped"] == 1, control
    assert abs(counts["clock"]["offset_ms"] - 3600e3) < 1000, counts["clock"]  # the hour, measured
    status, stats = srv.get("/api/telemetry")  # the gateway's totals (/metrics' teleop_commands_dropped)
    assert status == 200 and stats["commands_dropped"] == {"stale": 1, "reordered": 1}, stats


def test_the_bench_peer_needs_debug_routes(server_factory):
    srv = server_factory({"video": {"enabled": True}, "debug": {"routes": False}})

    async def probe():
        async with aiohttp.ClientSession() as s:
            async with s.get(srv.url + "/ws/webrtc?peer=aiortc", headers={"Origin": srv.url}) as r:
                return r.status, await r.json()

    status, body = asyncio.run(probe())
    assert status == 403 and body["error"]["code"] == "forbidden"
