"""Video from the real server (python -m server) with the simulated camera, over real sockets."""

from __future__ import annotations

import asyncio
import json
import struct

import aiohttp
import cv2
import numpy as np
import pytest

from tests.conftest import ServerProc, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def video_server(server_factory) -> ServerProc:
    return server_factory({"video": {"enabled": True, "width": 320, "height": 240, "fps": 15}})


def split_frame(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack(">I", data[:4])
    return json.loads(data[4:4 + n]), data[4 + n:]


def test_frames_are_decodable_jpegs_with_increasing_seq(video_server: ServerProc) -> None:
    async def go() -> list[dict]:
        headers = []
        async with aiohttp.ClientSession() as s, s.ws_connect(video_server.ws_url + "/ws/video") as ws:
            while len(headers) < 5:
                msg = await asyncio.wait_for(ws.receive(), 10)
                if msg.type == aiohttp.WSMsgType.TEXT:
                    continue  # status messages
                assert msg.type == aiohttp.WSMsgType.BINARY, msg
                header, jpeg = split_frame(msg.data)
                img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
                assert img is not None and img.shape == (240, 320, 3)
                assert header["width"] == 320 and header["height"] == 240
                headers.append(header)
                await ws.send_str(json.dumps({"type": "ack", "seq": header["seq"]}))
        return headers

    headers = asyncio.run(go())
    seqs = [h["seq"] for h in headers]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(h["capture_t"] > 1e9 for h in headers)


def test_snapshot_settings_and_robot_description(video_server: ServerProc) -> None:
    wait_until(lambda: video_server.get("/api/video")[1]["status"]["state"] == "ok", 10, "camera ok")
    status, body = video_server.request("GET", "/api/video/snapshot.jpg")
    assert status == 200 and body[:2] == b"\xff\xd8"
    status, body = video_server.put("/api/video", {"quality": 40, "fps": 10})
    assert status == 200, body
    status, body = video_server.put("/api/video", {"quality": "high"})
    assert status == 422 and body["error"]["message"]
    assert video_server.get("/api/video")[1]["settings"]["quality"] == 40
    assert video_server.get("/api/robot")[1]["video"]["enabled"] is True


def test_video_disabled_means_no_routes(server: ServerProc) -> None:
    assert server.get("/api/video")[0] == 404
    assert server.get("/api/robot")[1]["video"]["enabled"] is False


def test_missing_camera_is_reported_and_everything_else_keeps_working(server_factory) -> None:
    srv = server_factory({"video": {"enabled": True, "source": "opencv", "device": "/nonexistent/camera.avi",
                                    "retry_initial_s": 0.05, "retry_max_s": 0.2}})
    status = wait_until(lambda: (s := srv.get("/api/video")[1]["status"])["retries"] >= 2 and s, 15,
                        "camera retries with backoff")
    assert status["state"] in ("retrying", "failed") and status["error"]
    code, body = srv.request("GET", "/api/video/snapshot.jpg")
    assert code == 503 and body["error"]["message"]
    # the robot side is unaffected
    status, body = srv.post("/api/start")
    assert status == 200, body
    status, body = srv.post("/api/speed", {"linear": 0.1, "angular": 0.0})
    assert status == 200, body
    assert srv.state()["state"] == "running", srv.get("/api/events")[1]
