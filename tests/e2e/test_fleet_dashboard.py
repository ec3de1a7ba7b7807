"""A robot's full dashboard through the hub, in real Chromium (issue 22): the hub serves robot 2's own page at
``/fleet/r2/`` and relays its API calls and its telemetry socket over Zenoh. Its gauges follow the robot, the hub
user takes the robot's lease from the page's lease panel, starts and drives it with the joystick (the robot's own
``/api/state`` moves) and e-stops it from that page; a hub viewer sees the page and its Start is refused; and with
the hub killed under the page while the robot runs on its relayed heartbeats, the robot stops by its own watchdog."""

from __future__ import annotations

import pytest

from tests.server.fleet.fleetkit import RouterProc, hub_config, hub_keys, hub_proc, wait

#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def log_in(page, hub, user: str, path: str) -> None:
    """Through the hub's login page: the dashboard sends the browser there and back to ``path``."""
    page.goto(hub.url + path)
    page.wait_for_url(hub.url + "/login?next=**", timeout=60_000)
    page.fill("#login-user", user)
    page.fill("#login-password", f"pw-{user}-12345")
    page.click("#login-submit")
    page.wait_for_url(hub.url + path, timeout=60_000)


def connected(page, min_telemetry: int = 0) -> None:
    page.wait_for_function(
        "n => window.teleop && window.teleop.session.connected && window.teleop.session.counts.telemetry >= n",
        arg=min_telemetry, timeout=120_000)


def badge(page, state: str) -> None:
    page.wait_for_function("s => document.querySelector('#state-badge').classList.contains('state-' + s)",
                           arg=state, timeout=60_000)


def press_joystick(page, fy: float = 0.8) -> None:
    box = page.locator("#joystick").bounding_box()
    assert box, "joystick not laid out"
    cx, cy, r = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, box["width"] / 2
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx, cy - fy * r * 0.66, steps=6)


def test_robot_2s_dashboard_through_the_hub(server_factory, browser, tmp_path) -> None:
    router = RouterProc().start()
    hub = None
    try:
        private, public = hub_keys(tmp_path)
        robots = {rid: server_factory({"fleet": {"enabled": True, "router": [router.endpoint], "fleet": "d",
                                                 "robot_id": rid, "hub_public_key": str(public)}})
                  for rid in ("r1", "r2")}
        hub = hub_proc(hub_config(tmp_path, router, "d", private, users={"ann": "operator", "val": "viewer"})).start()
        r2 = robots["r2"]
        # the fleet page's card opens the dashboard
        ctx = browser.new_context(viewport={"width": 1440, "height": 900})
        page = ctx.new_page()
        log_in(page, hub, "ann", "/")
        page.wait_for_selector('.card[data-robot="r2"][data-online="true"]', timeout=120_000)
        page.click('.card[data-robot="r2"] [data-act="dashboard"]')
        page.wait_for_url(hub.url + "/fleet/r2/", timeout=60_000)
        assert page.get_attribute('meta[name="api-base"]', "content") == "/fleet/r2"
        # its gauges follow the robot: the relayed snapshots arrive and the page shows them
        connected(page)
        first = page.evaluate("() => window.teleop.session.counts.telemetry")
        connected(page, first + 20)
        badge(page, "idle")
        page.wait_for_function("() => document.querySelector('#lease-panel').innerText.includes('Signed in as ann')",
                               timeout=60_000)

        # a hub viewer sees the same page; their Start is refused (the hub's check), nothing moves
        vctx = browser.new_context(viewport={"width": 1440, "height": 900})
        vpage = vctx.new_page()
        log_in(vpage, hub, "val", "/fleet/r2/")
        connected(vpage, 5)
        badge(vpage, "idle")
        vpage.click("#btn-start")
        vpage.wait_for_function("() => /start refused: .*forbidden/.test(document.querySelector('#command-error')"
                                ".innerText)", timeout=60_000)
        assert r2.state()["state"] == "idle"
        vctx.close()

        # the lease from the page's own panel: the robot's lease, held by the hub user
        page.locator("#lease-take").click(timeout=60_000)
        page.wait_for_function("() => document.querySelector('#lease-panel').innerText.includes('You drive')",
                               timeout=60_000)
        assert r2.get("/api/lease")[1]["holder"]["user"] == "ann@hub"
        page.click("#btn-start")
        badge(page, "running")
        wait(lambda: r2.state()["state"] == "running", 60, "r2 running, started from its dashboard on the hub")
        press_joystick(page)
        try:
            wait(lambda: r2.state()["values"]["linear_m_s"] > 0.1, 60, "r2 moving, driven from the hub's page")
            page.wait_for_function("() => window.teleop.session.latest.values.linear_m_s > 0.1", timeout=60_000)
        finally:
            page.mouse.up()
        assert robots["r1"].state()["state"] == "idle"
        # the e-stop button of that page stops the robot
        page.click("#estop")
        wait(lambda: r2.state()["state"] == "estop", 60, "r2 e-stopped from its dashboard on the hub")
        badge(page, "estop")

        # running again on the page's relayed heartbeats alone, then the hub dies under the page: the robot's own
        # watchdog stops it
        page.click("#btn-reset")
        page.click("#reset-confirm")
        badge(page, "idle")
        page.click("#btn-start")
        badge(page, "running")
        wait(lambda: r2.state()["state"] == "running", 60, "r2 running again")
        assert r2.state()["state"] == "running"
        hub.kill()
        wait(lambda: r2.state()["state"] == "estop", 60, "r2 stopped by its own watchdog when the hub died")
        assert r2.state()["cause"]["trigger"] == "link_loss"
        ctx.close()
    finally:
        if hub is not None:
            hub.kill()
        router.kill()
