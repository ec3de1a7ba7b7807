"""A robot's dashboard through the hub plays WebRTC video from the robot (issue 22 with the video issue): the hub
relays the signalling (``/fleet/{id}/ws/webrtc``), the picture and the telemetry data channel come from the robot
directly, and the page's commands stay on the hub's relayed socket (the robot closes the page's command channels):
in real Chromium, logged in to the hub, the video shows WebRTC frames with their age, the snapshots arrive on the
data channel, and the page starts the robot through the hub."""

from __future__ import annotations

import pytest

from tests.e2e.test_fleet_dashboard import badge, connected, log_in
from tests.server.fleet.fleetkit import RouterProc, hub_config, hub_keys, hub_proc, wait

pytestmark = pytest.mark.timeout(600)


def test_the_hub_page_plays_the_robots_webrtc_video_and_telemetry_directly(server_factory, browser, tmp_path):
    router = RouterProc().start()
    hub = None
    try:
        private, public = hub_keys(tmp_path)
        robot = server_factory({"video": {"enabled": True},
                                "fleet": {"enabled": True, "router": [router.endpoint], "fleet": "v",
                                          "robot_id": "r1", "hub_public_key": str(public)}})
        hub = hub_proc(hub_config(tmp_path, router, "v", private, users={"ann": "operator"})).start()
        ctx = browser.new_context(viewport={"width": 1440, "height": 900})
        ctx.add_init_script("localStorage.setItem('teleop.video.transport', 'webrtc')")
        page = ctx.new_page()
        log_in(page, hub, "ann", "/")
        page.wait_for_selector('.card[data-robot="r1"][data-online="true"]', timeout=120_000)
        page.goto(hub.url + "/fleet/r1/")
        connected(page, 5)
        page.wait_for_function("() => { const s = window.teleopVideo && window.teleopVideo.stats();"
                               " return s && s.transport === 'webrtc' && s.frames >= 10; }", timeout=120_000)
        stats = page.evaluate("() => window.teleopVideo.stats()")
        assert stats["ageSource"] == "strip", stats  # the picture's age, read from the picture (the robot's clock)
        page.wait_for_function("() => window.teleop.session.telemetryVia === 'data channel'", timeout=120_000)
        peers = [c for c in robot.get("/api/video")[1]["clients"] if c.get("webrtc")]
        assert [c["remote"] for c in peers] == ["fleet/ann"], peers
        assert peers[0]["webrtc"]["telemetry"]["sent"] > 0
        # the robot closed the page's command channels: speed, start and e-stop go through the hub's checks
        assert not page.evaluate("() => window.teleop.session.commandChannel")
        page.locator("#lease-take").click(timeout=60_000)
        page.wait_for_function("() => document.querySelector('#lease-panel').innerText.includes('You drive')",
                               timeout=60_000)
        page.click("#btn-start")
        badge(page, "running")
        wait(lambda: robot.state()["state"] == "running", 60, "r1 running, started through the hub")
        page.click("#estop")
        wait(lambda: robot.state()["state"] == "estop", 60, "r1 e-stopped from the hub's page")
        badge(page, "estop")
        ctx.close()
        wait(lambda: not [c for c in robot.get("/api/video")[1]["clients"] if c.get("webrtc")], 60,
             "the robot to close the page's peer")
    finally:
        if hub is not None:
            hub.kill()
        router.kill()
