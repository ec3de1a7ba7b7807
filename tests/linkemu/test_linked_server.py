"""The real server in the robot's namespace, its clients in the operator's, over the emulated ``4g`` link:
one demonstration per kind of client (plain HTTP, a websocket, Chromium), for the fixtures of
``tests/linkemu/plugin.py``.

Each test also checks that its traffic really crossed the link: the delay line counted the
packets, and a round trip took at least the link's minimum round trip (2 × (60 − 20) ms). A lower
bound is safe on a loaded machine (load only adds time); no upper bound is asserted.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

MIN_RTT_4G_S = 2 * (0.060 - 0.020)


def crossed_link(link) -> bool:
    stats = link.stats()
    return stats["uplink"]["passed"] > 0 and stats["downlink"]["passed"] > 0


def test_real_server_over_4g_answers_api_state(linked_server):
    srv = linked_server("4g")
    srv.token()  # log in first: the timed request below is one round trip on an open connection or two
    t0 = time.monotonic()
    status, body = srv.get("/api/state")
    elapsed = time.monotonic() - t0
    assert status == 200, body
    assert body["state"] == "idle"
    assert elapsed >= MIN_RTT_4G_S, f"{elapsed * 1e3:.1f} ms: faster than the link allows, so it did not cross it"
    assert crossed_link(srv.link)


def test_websocket_over_4g_gets_telemetry(linked_server):
    srv = linked_server("4g")
    headers = srv.auth_headers()

    async def first_snapshot() -> dict:
        async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/ws/telemetry",
                                                                    headers=headers) as ws:
            async with asyncio.timeout(30):
                while True:
                    msg = await ws.receive()
                    assert msg.type == aiohttp.WSMsgType.TEXT, msg
                    data = json.loads(msg.data)
                    if data.get("type") == "telemetry":
                        return data

    snapshot = srv.call_in_operator(asyncio.run, first_snapshot())
    assert snapshot["data"]["state"] == "idle", snapshot
    assert crossed_link(srv.link)


@pytest.mark.e2e
def test_chromium_over_4g_loads_the_dashboard_and_shows_idle(linked_server, operator_browser):
    from tests.linkemu.plugin import log_in

    srv = linked_server("4g")
    browser = operator_browser(srv.link)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    log_in(page, srv)
    page.wait_for_function("s => document.querySelector('#state-badge').classList.contains('state-' + s)",
                           arg="idle", timeout=60_000)
    assert "idle" in page.locator("#state-badge").inner_text().lower()
    assert crossed_link(srv.link)
    assert not errors, errors
    context.close()
