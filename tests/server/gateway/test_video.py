"""The video service over real sockets: an aiohttp app with ``setup_video`` on an ephemeral port.

The app is built in one fixture (:func:`video_server`) so it can later be swapped
for the full server fixture. Waits are conditions with deadlines; nothing here
asserts on wall-clock timing (that is ``bench/bench_video.py``'s job).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import aiohttp
import cv2
import numpy as np
import pytest
import websockets
from aiohttp import web

from drivers.camera.base import CameraError, CameraSource
from server.gateway.http import error_middleware
from server.gateway.video import VideoService, camera_factory, setup_video, validate_video_settings

pytestmark = pytest.mark.timeout(30)


# --------------------------------------------------------------------------- test cameras


class PatternCamera(CameraSource):
    """A fast synthetic source: a flat colour plus the frame number, at the requested size."""

    name = "pattern"

    def _open(self) -> None:
        self.n = 0

    def _read(self) -> tuple[np.ndarray, float]:
        self.n += 1
        s = self.settings
        frame = np.full((s.height, s.width, 3), (40, 90, 160), np.uint8)
        cv2.putText(frame, str(self.n), (4, s.height - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1)
        return frame, time.monotonic()

    def _close(self) -> None:
        pass


class Plug:
    """Test control of :class:`FlakyCamera`: it unplugs itself after ``fail_after`` reads."""

    def __init__(self, fail_after: int | None = None, broken: bool = False) -> None:
        self.fail_after = fail_after
        self.broken = threading.Event()
        if broken:
            self.broken.set()
        self.reads = 0
        self.opens = 0

    def repair(self) -> None:
        self.fail_after = None
        self.broken.clear()


class FlakyCamera(PatternCamera):
    name = "flaky"

    def __init__(self, settings: Any, plug: Plug) -> None:
        super().__init__(settings)
        self.plug = plug

    def _open(self) -> None:
        self.plug.opens += 1
        if self.plug.broken.is_set():
            raise CameraError("no camera on /dev/video9")
        super()._open()

    def _read(self) -> tuple[np.ndarray, float]:
        self.plug.reads += 1
        if self.plug.fail_after is not None and self.plug.reads > self.plug.fail_after:
            self.plug.broken.set()
        if self.plug.broken.is_set():
            raise CameraError("camera unplugged")
        return super()._read()


class Gate:
    """Lets a :class:`GatedCamera` produce one frame per :meth:`release`."""

    def __init__(self) -> None:
        self.sem = threading.Semaphore(0)
        self.wide_open = threading.Event()

    def release(self) -> None:
        self.sem.release()

    def open_wide(self) -> None:
        """Stop gating (so the capture thread can stop)."""
        self.wide_open.set()
        self.sem.release()


class GatedCamera(PatternCamera):
    """A camera the test clocks: ``read()`` waits for the gate (a live camera waits for its sensor)."""

    name = "gated"

    def __init__(self, settings: Any, gate: Gate) -> None:
        super().__init__(settings)
        self.gate = gate

    def _read(self) -> tuple[np.ndarray, float]:
        while not self.gate.wide_open.is_set():
            if self.gate.sem.acquire(timeout=0.05):
                break
        return super()._read()


# --------------------------------------------------------------------------- the server fixture


@dataclass
class Server:
    url: str
    service: VideoService
    runner: web.AppRunner
    session: aiohttp.ClientSession
    stopped: bool = False

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws/video"

    async def status(self) -> dict:
        async with self.session.get(self.url + "/api/video") as r:
            assert r.status == 200
            return await r.json()

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.runner.cleanup()


@pytest.fixture
async def video_server():
    """``await video_server(factory, **settings)`` → a running :class:`Server` (stopped at teardown)."""
    servers: list[Server] = []
    session = aiohttp.ClientSession()

    async def start(factory: Callable[[dict], CameraSource], **settings: Any) -> Server:
        table = {"width": 160, "height": 120, "fps": 60, "quality": 70,
                 "retry_initial_s": 0.02, "retry_max_s": 0.1, **settings}
        service = VideoService(factory, table)
        app = web.Application(middlewares=[error_middleware])
        setup_video(app, service)
        runner = web.AppRunner(app, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        srv = Server(f"http://{host}:{port}", service, runner, session)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        await srv.stop()
    await session.close()


# --------------------------------------------------------------------------- helpers


async def until(cond: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    """Poll ``cond`` (sync or async) until truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def parse_frame(msg: bytes) -> tuple[dict, bytes]:
    n = int.from_bytes(msg[:4], "big")
    header = json.loads(msg[4:4 + n])
    return header, msg[4 + n:]


def decode(jpeg: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None, "not a decodable JPEG"
    return img


class Viewer:
    """An aiohttp websocket viewer that acks each frame and keeps the status messages."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.statuses: list[dict] = []

    async def frame(self, ack: bool = True, timeout_s: float = 10.0) -> tuple[dict, bytes]:
        async with asyncio.timeout(timeout_s):
            while True:
                msg = await self.ws.receive()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    if data["type"] == "status":
                        self.statuses.append(data["data"])
                    continue
                assert msg.type == aiohttp.WSMsgType.BINARY, msg
                header, jpeg = parse_frame(msg.data)
                if ack:
                    await self.ws.send_str(json.dumps({"type": "ack", "seq": header["seq"]}))
                return header, jpeg


async def viewer(srv: Server) -> Viewer:
    return Viewer(await srv.session.ws_connect(srv.ws_url))


# --------------------------------------------------------------------------- websocket stream


async def test_frames_are_jpegs_of_the_configured_size_in_sequence(video_server):
    srv = await video_server(PatternCamera, width=160, height=120)
    v = await viewer(srv)
    seqs = []
    for _ in range(5):
        header, jpeg = await v.frame()
        assert header["type"] == "frame"
        assert (header["width"], header["height"], header["bytes"]) == (160, 120, len(jpeg))
        assert decode(jpeg).shape == (120, 160, 3)
        # the capture on the robot's monotonic clock (ages), and the same instant as Unix time (people, files)
        assert header["mono_t"] == pytest.approx(time.monotonic(), abs=5.0)
        assert header["capture_t"] == pytest.approx(time.time() - (time.monotonic() - header["mono_t"]), abs=0.5)
        seqs.append(header["seq"])
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert v.statuses and v.statuses[0]["settings"] == {"width": 160, "height": 120, "fps": 60, "quality": 70}
    await v.ws.close()


async def test_unacked_client_gets_one_frame_and_does_not_slow_another(video_server):
    gate = Gate()
    srv = await video_server(lambda s: GatedCamera(s, gate), fps=60)
    try:
        slow = await srv.session.ws_connect(srv.ws_url)  # never reads, never acks
        fast = await viewer(srv)
        await until(lambda: len(srv.service.clients()) == 2, what="both viewers")
        gate.release()
        first, _ = await fast.frame()
        await until(lambda: all(c.sent == 1 for c in srv.service.clients()), what="slow viewer's one frame")
        # the producer makes one frame at a time; the fast viewer must get every one of them
        window = 30
        for k in range(1, window + 1):
            gate.release()
            header, _ = await fast.frame()
            assert header["seq"] == first["seq"] + k
        info = await srv.status()
        slow_info, fast_info = sorted(info["clients"], key=lambda c: c["id"])
        assert (slow_info["sent"], slow_info["in_flight"], slow_info["dropped"]) == (1, 1, window - 1)
        assert (fast_info["sent"], fast_info["dropped"]) == (window + 1, 0)
        await slow.close()
        await fast.ws.close()
    finally:
        gate.open_wide()


async def test_ack_releases_exactly_one_more_frame(video_server):
    srv = await video_server(PatternCamera, fps=60)
    v = await viewer(srv)
    h1, _ = await v.frame(ack=False)
    await until(lambda: srv.service.counters()["seq"] >= h1["seq"] + 3, what="producer to move on")
    with pytest.raises(TimeoutError):
        await v.frame(ack=False, timeout_s=0.2)  # no credit, no frame
    await v.ws.send_str(json.dumps({"type": "ack", "seq": h1["seq"]}))
    h2, _ = await v.frame(ack=False)
    assert h2["seq"] > h1["seq"] + 1  # the newest frame, not the next one in a backlog
    await v.ws.close()


async def test_websockets_library_client_receives_and_acks(video_server):
    srv = await video_server(PatternCamera)
    seqs = []
    async with websockets.connect(srv.ws_url, compression=None, max_size=None) as ws:
        while len(seqs) < 3:
            msg = await asyncio.wait_for(ws.recv(), 10.0)
            if isinstance(msg, str):
                assert json.loads(msg)["type"] == "status"
                continue
            header, jpeg = parse_frame(msg)
            assert decode(jpeg).shape == (120, 160, 3)
            seqs.append(header["seq"])
            await ws.send(json.dumps({"type": "ack", "seq": header["seq"]}))
    assert seqs == sorted(set(seqs))


async def test_bad_client_message_gets_an_error_and_the_stream_continues(video_server):
    srv = await video_server(PatternCamera)
    ws = await srv.session.ws_connect(srv.ws_url)
    await ws.send_str("not json")
    await ws.send_str(json.dumps({"type": "ack", "seq": "7"}))
    errors = []
    async with asyncio.timeout(10):
        while len(errors) < 2:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == "error":
                errors.append(json.loads(msg.data)["error"]["code"])
    assert errors == ["malformed", "wrong_type"]
    await ws.close()


# --------------------------------------------------------------------------- failures


async def test_camera_lost_mid_stream_is_reported_and_recovered(video_server):
    plug = Plug(fail_after=5)
    srv = await video_server(lambda s: FlakyCamera(s, plug))
    v = await viewer(srv)
    await v.frame()

    info = await until(
        lambda: _status_matches(srv, lambda st: st["state"] == "retrying" and st["retries"] >= 2),
        what="status retrying",
    )
    st = info["status"]
    assert "no camera" in st["error"] or "unplugged" in st["error"]
    assert st["next_retry_s"] is not None
    assert info["counters"]["read_errors"] == 1 and info["counters"]["open_errors"] >= 1
    async with srv.session.get(srv.url + "/api/video/snapshot.jpg") as r:  # no stale picture
        assert r.status == 503
        assert (await r.json())["error"]["code"] == "no_frame"

    last_good = info["counters"]["seq"]
    plug.repair()
    after, jpeg = await v.frame()
    while after["seq"] <= last_good:
        after, jpeg = await v.frame()
    decode(jpeg)
    assert (await srv.status())["status"] == {"state": "ok", "error": None, "retries": 0, "next_retry_s": None}
    states = [s["state"] for s in v.statuses]
    assert "retrying" in states and states[-1] == "ok"
    await v.ws.close()


async def _status_matches(srv: Server, pred: Callable[[dict], bool]) -> dict | None:
    info = await srv.status()
    return info if pred(info["status"]) else None


async def test_gives_up_after_retry_limit_and_retries_when_settings_change(video_server):
    plug = Plug(broken=True)
    srv = await video_server(lambda s: FlakyCamera(s, plug), retry_limit=2)
    info = await until(lambda: _status_matches(srv, lambda st: st["state"] == "failed"), what="failed")
    assert info["status"]["retries"] == 3 and "no camera" in info["status"]["error"]
    opens = plug.opens
    plug.repair()
    assert plug.opens == opens  # gave up: no more attempts on its own
    async with srv.session.put(srv.url + "/api/video", json={}) as r:
        assert r.status == 200
    await until(lambda: _status_matches(srv, lambda st: st["state"] == "ok"), what="ok after PUT")


async def test_configuration_error_fails_without_retrying(video_server):
    srv = await video_server(camera_factory(None), source="sim")  # no driver, so no sim camera
    info = await until(lambda: _status_matches(srv, lambda st: st["state"] == "failed"), what="failed")
    assert "needs the robot's pose" in info["status"]["error"]
    assert info["counters"]["open_errors"] == 1
    async with srv.session.get(srv.url + "/api/video/snapshot.jpg") as r:
        assert r.status == 503 and r.content_type == "application/json"


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "body, code",
    [
        ({"fps": 0}, "out_of_limits"),
        ({"fps": 61}, "out_of_limits"),
        ({"fps": 29.5}, "wrong_type"),
        ({"fps": True}, "wrong_type"),
        ({"width": "640"}, "wrong_type"),
        ({"quality": 101}, "out_of_limits"),
        ({"height": None}, "wrong_type"),
        ({"fps": 10, "colour": "red"}, "unknown_field"),
        ('{"fps": 1e999}', "not_finite"),
        ('{"fps": 1' + "0" * 400 + "}", "out_of_limits"),
    ],
)
async def test_fail__bad_settings_are_refused_with_422_and_nothing_changes(video_server, body, code):
    srv = await video_server(PatternCamera)
    before = (await srv.status())["settings"]
    kw = {"data": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, str) else {"json": body}
    async with srv.session.put(srv.url + "/api/video", **kw) as r:
        assert r.status == 422
        assert (await r.json())["error"]["code"] == code
    assert (await srv.status())["settings"] == before
    assert srv.service.settings["fps"] == 60


@pytest.mark.parametrize("raw", ["{", "[1, 2]", '"fps"', '{"fps": NaN}', '{"quality": Infinity}', "[" * 5000])
async def test_fail__malformed_settings_body_is_400(video_server, raw):
    srv = await video_server(PatternCamera)
    async with srv.session.put(srv.url + "/api/video", data=raw) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "malformed"


async def test_ok__settings_apply_while_running(video_server):
    srv = await video_server(PatternCamera)
    v = await viewer(srv)
    await v.frame()
    async with srv.session.put(srv.url + "/api/video", json={"width": 96, "height": 64, "fps": 50, "quality": 40}) as r:
        assert r.status == 200
        assert (await r.json())["settings"] == {"width": 96, "height": 64, "fps": 50, "quality": 40}
    header, jpeg = await v.frame()
    while header["width"] != 96:
        header, jpeg = await v.frame()
    assert decode(jpeg).shape == (64, 96, 3)
    assert header["height"] == 64
    await until(lambda: v.statuses and v.statuses[-1]["settings"]["fps"] == 50, what="status with new settings")
    await v.ws.close()


# --------------------------------------------------------------------------- other endpoints


async def test_snapshot_is_the_latest_jpeg(video_server):
    srv = await video_server(PatternCamera)
    await until(lambda: srv.service.latest is not None, what="first frame")
    async with srv.session.get(srv.url + "/api/video/snapshot.jpg") as r:
        assert r.status == 200 and r.content_type == "image/jpeg"
        assert int(r.headers["X-Frame-Seq"]) >= 1
        assert decode(await r.read()).shape == (120, 160, 3)


async def test_snapshot_is_503_before_the_first_frame(video_server):
    srv = await video_server(lambda s: FlakyCamera(s, Plug(broken=True)))
    async with srv.session.get(srv.url + "/api/video/snapshot.jpg") as r:
        assert r.status == 503
        err = (await r.json())["error"]
        assert err["code"] == "no_frame" and "camera" in err["message"]


async def test_mjpeg_stream_is_multipart_with_jpeg_parts(video_server):
    srv = await video_server(PatternCamera)
    async with srv.session.get(srv.url + "/video.mjpeg") as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "multipart/x-mixed-replace; boundary=frame"
        reader = aiohttp.MultipartReader.from_response(r)
        seqs = []
        for _ in range(2):
            part = await asyncio.wait_for(reader.next(), 10.0)
            assert part.headers["Content-Type"] == "image/jpeg"
            body = await part.read()
            assert len(body) == int(part.headers["Content-Length"])
            assert decode(body).shape == (120, 160, 3)
            seqs.append(int(part.headers["X-Frame-Seq"]))
        assert seqs[1] > seqs[0]
    await until(lambda: not srv.service.clients(), what="MJPEG viewer to be removed")


async def test_status_lists_clients_and_counters(video_server):
    srv = await video_server(PatternCamera)
    v = await viewer(srv)
    for _ in range(3):
        await v.frame()
    info = await srv.status()
    assert info["status"]["state"] == "ok"
    c = info["counters"]
    assert c["captured"] >= 3 and c["encoded"] >= 3 and c["jpeg_bytes"] > 0
    assert await until(lambda: srv.service.counters()["fps_measured"] > 0, what="fps measured")
    (client,) = info["clients"]
    assert client["kind"] == "ws" and client["sent"] >= 3
    assert info["source"]["name"] == "pattern"
    await v.ws.close()


async def test_opencv_file_source_through_the_service_is_scaled_to_the_settings(video_server, tmp_path):
    path = tmp_path / "clip.avi"
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (96, 72))
    assert out.isOpened()
    for i in range(10):
        out.write(np.full((72, 96, 3), 20 * i, np.uint8))
    out.release()
    srv = await video_server(camera_factory(None), source="opencv", device=str(path), width=160, height=120)
    v = await viewer(srv)
    for _ in range(12):  # past the end: the file loops
        header, jpeg = await v.frame()
        assert decode(jpeg).shape == (120, 160, 3)
    info = await srv.status()
    assert info["source"]["kind"] == "file" and info["counters"]["scaled"] >= 12
    assert info["status"]["state"] == "ok"
    await v.ws.close()


# --------------------------------------------------------------------------- lifecycle


async def test_shutdown_closes_viewers_with_going_away_and_stops_the_thread(video_server):
    srv = await video_server(PatternCamera)
    v = await viewer(srv)
    await v.frame()
    thread = srv.service._thread
    assert thread is not None and thread.is_alive()

    async def read_until_closed() -> int | None:  # a browser keeps reading while the server goes down
        while True:
            msg = await v.ws.receive()
            if msg.type == aiohttp.WSMsgType.CLOSE:
                return msg.data  # the server's code (close_code may turn 1006 if it has gone before our reply)
            if msg.type == aiohttp.WSMsgType.CLOSED:
                return v.ws.close_code

    reader = asyncio.create_task(read_until_closed())
    await srv.stop()
    assert await asyncio.wait_for(reader, 10) == aiohttp.WSCloseCode.GOING_AWAY
    assert not thread.is_alive()
    assert srv.service.status()["state"] == "stopped"


async def test_disabled_video_serves_status_but_no_frames(video_server):
    srv = await video_server(PatternCamera, enabled=False)
    info = await srv.status()
    assert info["status"]["state"] == "stopped" and "disabled" in info["status"]["error"]
    async with srv.session.get(srv.url + "/api/video/snapshot.jpg") as r:
        assert r.status == 503


# --------------------------------------------------------------------------- config validation


@pytest.mark.parametrize(
    "table, check",
    [
        ({}, {"enabled": True, "source": "sim", "width": 640, "height": 480, "fps": 30, "quality": 70,
              "retry_initial_s": 0.5, "retry_max_s": 10.0}),
        ({"source": "opencv", "device": 2}, {"device": 2}),
        ({"source": "opencv", "device": "rtsp://cam.local/stream"}, {"device": "rtsp://cam.local/stream"}),
        ({"retry_initial_s": 1, "retry_max_s": 1}, {"retry_initial_s": 1.0, "retry_max_s": 1.0}),
        ({"enabled": False, "fps": 60, "quality": 100}, {"enabled": False, "fps": 60}),
    ],
)
def test_ok__video_config(table, check):
    out = validate_video_settings(table)
    assert {k: out[k] for k in check} == check


@pytest.mark.parametrize(
    "table, key",
    [
        ({"enabled": 1}, "enabled"),
        ({"source": "usb"}, "source"),
        ({"device": -1}, "device"),
        ({"device": ""}, "device"),
        ({"device": True}, "device"),
        ({"width": 10}, "width"),
        ({"height": 480.0}, "height"),
        ({"fps": 0}, "fps"),
        ({"fps": True}, "fps"),
        ({"quality": 5}, "quality"),
        ({"retry_initial_s": 0}, "retry_initial_s"),
        ({"retry_max_s": float("nan")}, "retry_max_s"),
        ({"retry_initial_s": 5, "retry_max_s": 1}, "retry_max_s"),
        ({"retry_limit": -1}, "retry_limit"),
        ({"framerate": 30}, "framerate"),
    ],
)
def test_fail__video_config(table, key):
    with pytest.raises(ValueError, match=key):
        validate_video_settings(table)
