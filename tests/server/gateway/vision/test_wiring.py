"""The gateway's vision service without processes: results handed to the event loop latest-wins, the
channels declared once per runtime connection before any measurement goes out, what a measurement
carries, the edge checks of go-to-marker, and the profile check of safety rules on vision channels."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from server.config import ConfigError, load_config
from server.errors import ApiError
from server.gateway.vision import VisionWorker
from server.gateway.vision.routes import go_to_marker_params
from server.gateway.vision.service import VisionService
from tests.conftest import REPO
from tests.server.gateway.vision.scene import WORLD_CFG, frame, pipeline

pytestmark = pytest.mark.timeout(60)

START = {"x": 3.0, "y": 2.0, "yaw": 0.0}


class FakeRuntime:
    """A connected runtime client as the service uses it: requests answered, notifies recorded."""

    def __init__(self) -> None:
        self.connected = True
        self.connects = 1
        self.description: dict[str, Any] | None = {"world": WORLD_CFG, "channels": []}
        self.requests: list[tuple[str, dict]] = []
        self.notified: list[tuple[str, dict]] = []

    async def request(self, method: str, params: dict | None = None) -> Any:
        self.requests.append((method, params or {}))
        if method == "describe":
            return {"world": WORLD_CFG, "channels": [], "external": {"vision": {}}}
        return {"ok": True}

    def notify(self, method: str, params: dict) -> bool:
        self.notified.append((method, params))
        return self.connected

    def latest_snapshot(self) -> dict:
        return {}


class FakeVideo:
    def __init__(self) -> None:
        self.frame_listeners: list = []


def service(**vision) -> tuple[VisionService, FakeRuntime, FakeVideo]:
    cfg = load_config(None, overrides={"vision": {"enabled": True, **vision}}, tables=("video", "vision"))
    rt, video = FakeRuntime(), FakeVideo()
    return VisionService(cfg.vision, cfg.video, rt, video), rt, video


async def until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):  # the service's own tasks make the predicate true: poll them
        while True:
            if predicate():
                return
            await asyncio.sleep(0.01)


def test_channels_are_declared_before_measurements_and_again_on_a_new_runtime_connection() -> None:
    async def run() -> tuple[list, list, VisionService, FakeVideo]:
        svc, rt, video = service()
        await svc.start()
        try:
            await until(lambda: svc.declares == 1)
            assert len(video.frame_listeners) == 1  # the worker is fed by the camera now
            declared = rt.requests[0]
            svc.worker.run_once(frame(START), time.monotonic(), 1)
            await until(lambda: rt.notified)
            rt.connected, rt.connects = False, 2  # the runtime restarts: nothing goes out meanwhile
            svc.worker.run_once(frame(START), time.monotonic(), 2)
            await until(lambda: svc.not_sent == 1)
            rt.connected = True
            await until(lambda: svc.declares == 2)
            svc.worker.run_once(frame(START), time.monotonic(), 3)
            await until(lambda: len(rt.notified) == 2)
            return declared, rt.notified, svc, video
        finally:
            await svc.stop()

    declared, notified, svc, video = asyncio.run(run())
    method, params = declared
    assert method == "declare_channels" and params["source"] == "vision"
    names = [c["name"] for c in params["channels"]]
    assert names == svc.config.channel_names(range(6))  # the map of the sim world: markers 0-5
    assert {c["name"] for c in params["channels"] if c["gauge"]} == {
        "vision_markers", "vision_marker_id", "vision_marker_range_m", "vision_marker_bearing_rad",
        "vision_floor_free", "vision_clear_m", "vision_latency_s"}
    assert [m["id"] for m in params["markers"]] == [0, 1, 2, 3, 4, 5]
    assert params["markers"][0] == {"id": 0, "x_m": 6.0, "y_m": 2.0, "yaw_rad": math.pi}
    assert [p["sample_t"] < time.monotonic() for _, p in notified] == [True, True]
    m = notified[0][1]
    assert m["source"] == "vision" and set(m["channels"]) == set(names)
    assert m["channels"]["marker_1_range_m"] is None  # NaN goes as null (JSON has no NaN)
    assert m["observations"][0]["id"] == 0 and m["observations"][0]["range_m"] == pytest.approx(3.0, abs=0.1)
    assert video.frame_listeners == []  # stop() took the listener away


def test_results_reach_the_event_loop_latest_wins() -> None:
    async def run() -> tuple[list, int]:
        svc, rt, _ = service()
        await svc.start()
        try:
            await until(lambda: svc.declares == 1)
            jpeg = frame(START)
            results = [svc.worker.pipeline.process(*svc.worker._decode(jpeg), time.monotonic(), seq)  # noqa: SLF001
                       for seq in range(1, 6)]
            for r in results:  # five results before the loop runs once: only the newest goes out
                svc._on_result(r)  # noqa: SLF001
            await until(lambda: rt.notified)
            await asyncio.sleep(0.05)
            return rt.notified, svc.latest_json["seq"]
        finally:
            await svc.stop()

    notified, seq = asyncio.run(run())
    assert len(notified) == 1 and seq == 5


def test_vision_off_or_without_a_camera_says_why_and_starts_nothing() -> None:
    cfg = load_config(None, tables=("video", "vision"))
    off = VisionService(cfg.vision, cfg.video, FakeRuntime(), FakeVideo())
    assert off.reason == "vision is off ([vision] enabled = false)" and not off.active
    on = load_config(None, overrides={"vision": {"enabled": True}}, tables=("video", "vision"))
    no_camera = VisionService(on.vision, on.video, FakeRuntime(), None)
    assert no_camera.reason.startswith("vision needs the camera")
    asyncio.run(no_camera.start())
    assert no_camera.pipeline is None and no_camera.status()["running"] is False


def test_paused_frames_do_not_reach_the_worker() -> None:
    svc, _, _ = service()
    svc.worker = VisionWorker(pipeline(), 10.0)

    class F:
        jpeg, capture_t, seq = b"x", 0.0, 1

    svc.paused = True
    svc._offer(F())  # noqa: SLF001
    assert svc.worker.stats()["offered"] == 0
    svc.paused = False
    svc._offer(F())  # noqa: SLF001
    assert svc.worker.stats()["offered"] == 1


def test_channel_names_match_the_pipelines_specs() -> None:
    for kw, ids in (({}, range(6)), ({"floor_enabled": False}, range(6)), ({}, [])):
        pipe = pipeline(world_cfg={**WORLD_CFG, "markers": WORLD_CFG["markers"] if ids else []}, **kw)
        assert [s.name for s in pipe.channel_specs()] == pipe.config.channel_names(pipe.marker_ids)


# ---------------------------------------------------------------------- edge checks
@pytest.mark.parametrize("body, want", [
    ({}, {"marker_id": None, "standoff_m": 0.6, "speed_m_s": None, "lost_s": 1.5}),
    ({"marker_id": 3, "standoff_m": 1.5, "speed_m_s": 0.3, "lost_s": 4},
     {"marker_id": 3, "standoff_m": 1.5, "speed_m_s": 0.3, "lost_s": 4.0}),
])
def test_ok__go_to_marker(body, want) -> None:
    assert go_to_marker_params(body, {"limits": {"linear_m_s": [-0.5, 0.5]}}) == want


@pytest.mark.parametrize("body, code", [
    ({"marker_id": -1}, "out_of_limits"),
    ({"marker_id": 1.5}, "wrong_type"),
    ({"marker_id": True}, "wrong_type"),
    ({"standoff_m": 0.1}, "out_of_limits"),
    ({"standoff_m": 11}, "out_of_limits"),
    ({"speed_m_s": 0.6}, "out_of_limits"),
    ({"speed_m_s": 0.0}, "out_of_limits"),
    ({"speed_m_s": math.inf}, "not_finite"),
    ({"lost_s": 0.1}, "out_of_limits"),
    ({"lost_s": math.nan}, "not_finite"),
    ({"lost_s": "long"}, "wrong_type"),
    ({"id": 0}, "unknown_field"),
])
def test_fail__go_to_marker(body, code) -> None:
    with pytest.raises(ApiError) as err:
        go_to_marker_params(body, {"limits": {"linear_m_s": [-0.5, 0.5]}})
    assert err.value.code == code


# ---------------------------------------------------------------------- rules on vision channels at start-up
RULE = {"name": "floor", "channel": "vision_clear_m", "below": 0.5}


@pytest.mark.parametrize("over", [
    {"vision": {"enabled": True}, "video": {"enabled": True}, "safety": {"rules": [RULE]}},
    {"vision": {"enabled": True}, "safety": {"rules": [{**RULE, "channel": "marker_5_bearing_rad"}]}},
    {"vision": {"enabled": True, "markers": [{"id": 9, "position": [1, 2, 0.2]}]},
     "safety": {"rules": [{**RULE, "channel": "marker_9_range_m"}]}},
    {"vision": {"enabled": False}},  # no rule on vision: nothing to check
])
def test_ok__rules_on_vision_channels(over) -> None:
    load_config(REPO / "config" / "rover-sim.toml", overrides=over)


@pytest.mark.parametrize("over, message", [
    ({"safety": {"rules": [RULE]}}, "the vision pipeline is off"),
    ({"vision": {"enabled": True}, "video": {"enabled": False}, "safety": {"rules": [RULE]}},
     "the vision pipeline is off"),
    ({"vision": {"enabled": True}, "safety": {"rules": [{**RULE, "channel": "marker_7_range_m"}]}},
     "publishes no channel 'marker_7_range_m'"),
    ({"vision": {"enabled": True, "floor_enabled": False}, "safety": {"rules": [RULE]}},
     "publishes no channel 'vision_clear_m'"),
    ({"vision": {"enabled": True}, "safety": {"rules": [{**RULE, "channel": "vision_clearance"}]}},
     "publishes no channel 'vision_clearance'"),
])
def test_fail__rules_on_vision_channels(over, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(REPO / "config" / "rover-sim.toml", overrides=over)
