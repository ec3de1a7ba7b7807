"""The tier ladder fits the capture (server/gateway/video/tiers.py ``fit_ladder``): no tier is bigger or faster
than what the camera gives. Before, a 320×240 capture was encoded at 640×480 and 480×360 (upscaled, with the
640×480 tiers' 0.7 Mbit/s floor): the real-server tests below read 640×480 out of the H.264 stream then.

Unit tests on the ladder and the controller; then the real server (python -m server, sim camera) over
/ws/video?codec=h264: the access units are decoded with PyAV and their size read, and the encoders' own
figures in GET /api/video."""

from __future__ import annotations

import asyncio
import json
import struct

import aiohttp
import pytest

from server.gateway.video.ratecontrol import RateController
from server.gateway.video.service import tiers_of
from server.gateway.video.settings import DEFAULT_TIERS, validate_video_settings
from server.gateway.video.tiers import Tier, fit_ladder
from tests.conftest import ServerProc, wait_until

DEFAULT = tiers_of(validate_video_settings({}))
assert [t.name for t in DEFAULT] == [t.name for t in DEFAULT_TIERS]


def check_ladder(ladder: list[Tier], width: int, height: int, fps: int) -> None:
    assert ladder
    for t in ladder:
        assert t.width <= width and t.height <= height and t.fps <= fps, t
        assert t.width % 2 == 0 and t.height % 2 == 0
        assert t.min_bitrate_bit_s <= t.max_bitrate_bit_s
    keys = [(t.width, t.height, t.fps) for t in ladder]
    assert len(set(keys)) == len(keys), "two tiers of the same size and rate"
    assert len({t.name for t in ladder}) == len(ladder)
    for above, below in zip(ladder, ladder[1:]):
        assert below.max_bitrate_bit_s <= above.max_bitrate_bit_s
        assert below.max_bitrate_bit_s >= 1.1 * above.min_bitrate_bit_s - 1, "no way back up"


def test_ok__a_capture_the_size_of_the_top_tier_keeps_the_ladder() -> None:
    assert fit_ladder(DEFAULT, 640, 480, 30) == DEFAULT
    assert fit_ladder(DEFAULT, 1280, 720, 60) == DEFAULT


def test_ok__a_320x240_capture_tops_the_ladder_at_320x240() -> None:
    ladder = fit_ladder(DEFAULT, 320, 240, 30)
    check_ladder(ladder, 320, 240, 30)
    assert (ladder[0].width, ladder[0].height, ladder[0].fps) == (320, 240, 30)
    assert ladder[0].name == "320x240@30"
    last = ladder[-1]  # the tier configured at the capture's size stays, its top under the one above's
    assert (last.name, last.min_bitrate_bit_s) == (DEFAULT[-1].name, DEFAULT[-1].min_bitrate_bit_s)
    assert last.max_bitrate_bit_s == ladder[-2].max_bitrate_bit_s < DEFAULT[-1].max_bitrate_bit_s
    # the pixels went down 4×, so did the bits: no 0.7 Mbit/s floor for a quarter of the picture
    assert ladder[0].min_bitrate_bit_s == DEFAULT[0].min_bitrate_bit_s // 4
    assert ladder[0].max_bitrate_bit_s == DEFAULT[0].max_bitrate_bit_s // 4


def test_ok__a_slower_capture_caps_the_frame_rate() -> None:
    ladder = fit_ladder(DEFAULT, 640, 480, 15)
    check_ladder(ladder, 640, 480, 15)
    assert [t.name for t in ladder] == ["640x480@15", "480x360@15", "320x240@10"]
    assert ladder[0] == DEFAULT[1]  # the configured 640x480@15 wins over the 30 fps tier slowed down


@pytest.mark.parametrize("size", [(32, 32, 1), (160, 120, 5), (400, 300, 30), (640, 360, 30), (240, 320, 30),
                                  (320, 240, 60), (1920, 1080, 24)])
def test_ok__any_capture_gets_a_ladder_within_it(size) -> None:
    check_ladder(fit_ladder(DEFAULT, *size), *size)


def test_ok__custom_names_are_kept() -> None:
    ladder = fit_ladder([Tier("hi", 1280, 720, 30, 1_000_000, 3_000_000), Tier("lo", 320, 180, 10, 60_000, 300_000)],
                        640, 360, 30)
    assert [(t.name, t.width, t.height) for t in ladder] == [("hi", 640, 360), ("lo", 320, 180)]


def test_ok__the_controller_moves_to_the_fitted_ladder() -> None:
    rc = RateController(DEFAULT, now=0.0)
    assert rc.tier == "640x480@30"
    d = rc.set_ladder(fit_ladder(DEFAULT, 320, 240, 30), now=1.0)
    assert d.tier_changed and rc.tier == "320x240@30" and rc.bitrate_bit_s <= 375_000
    d = rc.set_ladder(DEFAULT, now=2.0)
    assert d.tier_changed and rc.tier == "640x480@30"
    rc.index = 3
    d = rc.set_ladder(fit_ladder(DEFAULT, 320, 240, 30), now=3.0)  # 320x240@10 is still there: stays
    assert not d.tier_changed and rc.tier == "320x240@10"


# ---------------------------------------------------------------- the real server

pytestmark_server = pytest.mark.timeout(180)


def split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack(">I", data[:4])
    return json.loads(data[4:4 + n]), data[4 + n:]


def annexb(payload: bytes) -> bytes:
    """The frame's length-prefixed NAL units back to Annex B, for PyAV's decoder."""
    out, i = [], 0
    while i < len(payload):
        (n,) = struct.unpack(">I", payload[i:i + 4])
        out.append(b"\x00\x00\x00\x01" + payload[i + 4:i + 4 + n])
        i += 4 + n
    return b"".join(out)


async def decoded_frames(srv: ServerProc, count: int, on_frame=None) -> list[tuple[dict, int, int]]:
    """``count`` decoded H.264 frames from /ws/video?codec=h264: (their header, decoded width, height)."""
    import av

    codec = av.CodecContext.create("h264", "r")
    got: list[tuple[dict, int, int]] = []
    async with aiohttp.ClientSession() as s, s.ws_connect(srv.ws_url + "/ws/video?codec=h264") as ws:
        while len(got) < count:
            msg = await asyncio.wait_for(ws.receive(), 60)
            if msg.type == aiohttp.WSMsgType.TEXT:
                continue
            assert msg.type == aiohttp.WSMsgType.BINARY, msg
            header, payload = split(msg.data)
            await ws.send_str(json.dumps({"type": "ack", "seq": header["seq"]}))
            for frame in codec.decode(av.Packet(annexb(payload))):
                got.append((header, frame.width, frame.height))
                if on_frame is not None:
                    await on_frame(len(got))
    return got


async def decoded_sizes(srv: ServerProc, count: int, on_frame=None) -> list[tuple[int, int, int, int, str]]:
    """(header width, height, decoded width, height, tier) of ``count`` frames."""
    return [(h["width"], h["height"], w, hh, h["tier"]) for h, w, hh in await decoded_frames(srv, count, on_frame)]


@pytestmark_server
def test_ok__a_320x240_camera_is_encoded_at_320x240_not_above(server_factory) -> None:
    srv = server_factory({"video": {"enabled": True, "width": 320, "height": 240, "fps": 15}})
    sizes = asyncio.run(decoded_sizes(srv, 5))
    assert {s[:4] for s in sizes} == {(320, 240, 320, 240)}, sizes
    body = srv.get("/api/video")[1]["encoded"]
    assert body["ladder"][0]["width"] == 320 and body["ladder"][0]["height"] == 240, body["ladder"]
    assert all(t["width"] <= 320 and t["height"] <= 240 and t["fps"] <= 15 for t in body["ladder"]), body["ladder"]
    assert body["encoders"] and all(e["width"] <= 320 and e["height"] <= 240 for e in body["encoders"]), body


@pytestmark_server
def test_ok__the_ladder_follows_the_capture_size_changed_at_run_time(server_factory) -> None:
    srv = server_factory({"video": {"enabled": True, "width": 640, "height": 480, "fps": 15}})
    wait_until(lambda: srv.get("/api/video")[1]["status"]["state"] == "ok", 30, "camera ok")

    async def shrink(n: int) -> None:
        if n == 3:
            status, body = await asyncio.to_thread(srv.put, "/api/video", {"width": 320, "height": 240})
            assert status == 200, body

    sizes = asyncio.run(decoded_sizes(srv, 40, shrink))
    assert sizes[0][:4] == (640, 480, 640, 480), sizes[:3]
    assert sizes[-1][:4] == (320, 240, 320, 240), sizes[-3:]  # the viewer moved to the refitted ladder
    ladder = srv.get("/api/video")[1]["encoded"]["ladder"]
    assert all(t["width"] <= 320 for t in ladder), ladder
    wait_until(lambda: all(e["width"] <= 320 for e in srv.get("/api/video")[1]["encoded"]["encoders"]), 30,
               "the 640x480 encoders stopped")
