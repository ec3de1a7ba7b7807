"""The hub's fleet page in real Chromium (issue 22): two robots appear as cards, robot 2 is driven through the hub
(lease, start, hold forward), its card's e-stop stops it, and a confirmed "stop all" stops the other."""

from __future__ import annotations

import pytest

from tests.server.fleet.fleetkit import RouterProc, hub_config, hub_keys, hub_proc, wait

#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def test_drive_robot_2_through_the_hub_and_stop_all(server_factory, browser, tmp_path) -> None:
    router = RouterProc().start()
    hub = None
    try:
        private, public = hub_keys(tmp_path)
        robots = {rid: server_factory({"fleet": {"enabled": True, "router": [router.endpoint], "fleet": "e",
                                                 "robot_id": rid, "hub_public_key": str(public)}})
                  for rid in ("r1", "r2")}
        hub = hub_proc(hub_config(tmp_path, router, "e", private)).start()
        page = browser.new_page()
        page.goto(hub.url + "/")
        for rid in robots:
            page.wait_for_selector(f'.card[data-robot="{rid}"][data-online="true"][data-state="idle"]',
                                   timeout=120_000)
        page.click('.card[data-robot="r2"] [data-act="open"]')
        page.wait_for_selector("#drive:not([hidden])")
        page.click("#take-lease")
        wait(lambda: (robots["r2"].get("/api/lease")[1].get("holder") or {}).get("user") == "local@hub", 30,
             "the page's hub user holds r2's lease")
        page.click("#start")
        wait(lambda: robots["r2"].state()["state"] == "running", 30, "r2 running")
        page.hover("#forward")
        page.mouse.down()
        try:
            wait(lambda: robots["r2"].state()["values"]["linear_m_s"] > 0.1, 30, "r2 moving, driven from Chromium")
            page.wait_for_selector('#drive-state[data-state="running"]', timeout=30_000)  # its telemetry too
        finally:
            page.mouse.up()
        assert robots["r1"].state()["state"] == "idle"
        page.click('.card[data-robot="r2"] [data-act="estop"]')
        wait(lambda: robots["r2"].state()["state"] == "estop", 30, "r2 e-stopped from its card")
        page.wait_for_selector('.card[data-robot="r2"][data-state="estop"]', timeout=30_000)
        page.once("dialog", lambda d: d.accept())
        page.click("#stop-all")
        wait(lambda: robots["r1"].state()["state"] == "estop", 30, "r1 stopped by stop all")
        page.close()
    finally:
        if hub is not None:
            hub.kill()
        router.kill()
