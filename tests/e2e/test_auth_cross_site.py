"""A real Chromium page from a second local origin attacks the real server: nothing moves the robot.

The attack page is served from ``http://localhost:P2`` (another origin, and another site, than the
dashboard at ``http://127.0.0.1:P1``). It tries what issue 10 reproduced: ``fetch`` without CORS
(start with no body, speed as text/plain), a JSON heartbeat (needs a preflight), form posts
(text/plain to reset, url-encoded to start), a websocket that sends start, and the MJPEG stream in
an ``<img>``. Twice: against a server in local mode (no login stands in the way: only the
cross-site defences), and against a server with users while the victim is logged in, holds the
lease, and has the dashboard open in the same browser.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web

from tests.conftest import ServerProc
from tests.server.gateway.auth.client import PASSWORD, make_users

pytestmark = pytest.mark.e2e

ATTACK_PAGE = """<!doctype html><title>cats</title><body>
<iframe name="sink1" style="display:none"></iframe><iframe name="sink2" style="display:none"></iframe>
<form id="reset" method="post" action="{target}/api/reset" enctype="text/plain" target="sink1">
  <input name='{{"x":' value='1}}'></form>
<form id="start" method="post" action="{target}/api/start" target="sink2"><input name="x" value="1"></form>
<img id="video" src="{target}/video.mjpeg">
<script>
window.results = {{}};
const video = document.getElementById("video");
video.onload = () => {{ results.video = "loaded"; }};
video.onerror = () => {{ results.video = "blocked"; }};
(async () => {{
  const t = "{target}";
  const tryFetch = async (name, path, init) => {{
    try {{ const r = await fetch(t + path, init); results[name] = "status " + r.status; }}
    catch (e) {{ results[name] = "blocked: " + e.message; }}
  }};
  await tryFetch("start_no_cors", "/api/start", {{method: "POST", mode: "no-cors", credentials: "include"}});
  await tryFetch("speed_text_plain", "/api/speed", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{linear: 0.0, angular: 0.3}})}});
  await tryFetch("heartbeat_json", "/api/heartbeat", {{method: "POST", credentials: "include",
    headers: {{"Content-Type": "application/json"}}, body: "{{}}"}});
  document.getElementById("reset").submit();
  document.getElementById("start").submit();
  await new Promise((done) => {{
    const ws = new WebSocket(t.replace("http", "ws") + "/ws/telemetry");
    ws.onopen = () => {{ ws.send(JSON.stringify({{type: "start", id: 1}})); results.ws = "open"; }};
    ws.onmessage = (e) => {{ results.ws_message = e.data.slice(0, 80); }};
    ws.onerror = () => {{ results.ws = "error"; }};
    ws.onclose = (e) => {{ results.ws_close = e.code; done(); }};
  }});
  results.done = true;
}})();
</script>"""

ATTACKED = ("/api/start", "/api/speed", "/api/reset", "/ws/telemetry", "/video.mjpeg")


class AttackSite:
    """The attacker's page on its own aiohttp server in a thread (port 0 on 127.0.0.1)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        async def page(request: web.Request) -> web.Response:
            return web.Response(text=ATTACK_PAGE.format(target=self.target), content_type="text/html")

        app = web.Application()
        app.router.add_get("/", page)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> "AttackSite":
        self.thread.start()
        assert self._ready.wait(20), "the attack page server did not start"
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}/"  # localhost vs 127.0.0.1: another origin and another site


def attack(context, srv: ServerProc, wait_for) -> dict:
    with AttackSite(srv.url) as site:
        page = context.new_page()
        page.goto(site.url)
        page.wait_for_function("() => window.results && window.results.done && window.results.video",
                               timeout=30000)
        results = page.evaluate("window.results")
        # the form posts go to a hidden frame: wait until the server has seen (and refused) each attempt
        def all_refused() -> bool:
            missing = [path for path in ATTACKED if f" {path} " not in refusals(srv)]
            assert not missing, f"not refused (yet): {missing}; page: {results}; server: {refusals(srv)}"
            return True

        wait_for(all_refused, 20, "every attempt to reach the server and be refused")
        page.close()
    return results


def refusals(srv: ServerProc) -> str:
    return "".join(line for line in srv.output if "refused " in line)


def check_nothing_moved(srv: ServerProc, results: dict, before: dict, after: dict, events: list[dict]) -> None:
    assert after["state"] == before["state"] == "idle", (after["state"], results)
    assert after["setpoint"] == before["setpoint"]
    assert not [e for e in events if e.get("kind") == "command"], events
    assert results.get("ws") != "open" and "ws_message" not in results, results
    assert results["video"] == "blocked", results
    assert results["heartbeat_json"].startswith("blocked"), results  # no CORS: the preflight fails


def test_a_foreign_page_cannot_drive_a_local_mode_server(server_factory, browser, wait_for) -> None:
    srv = server_factory({"video": {"enabled": True, "width": 160, "height": 120, "fps": 5,
                                    "render_process": False}})
    before = srv.state()
    context = browser.new_context()
    try:
        results = attack(context, srv, wait_for)
    finally:
        context.close()
    check_nothing_moved(srv, results, before, srv.state(), srv.get("/api/events?limit=1000")[1]["events"])


def test_a_foreign_page_cannot_drive_for_a_logged_in_holder(server_factory, browser, tmp_path, wait_for) -> None:
    users = make_users(tmp_path / "users.json", {"olga": "operator", "root": "admin"})
    srv = server_factory({"auth": {"users_file": str(users)},
                          "video": {"enabled": True, "width": 160, "height": 120, "fps": 5, "render_process": False}})
    token = srv.post("/api/auth/login", {"username": "root", "password": PASSWORD, "bearer": True})[1]["token"]
    root = {"Authorization": f"Bearer {token}"}
    context = browser.new_context()
    try:
        dash = context.new_page()  # the victim: logged in, holding the lease, the dashboard open
        dash.goto(srv.url + "/login")
        dash.fill("#login-user", "olga")
        dash.fill("#login-password", PASSWORD)
        dash.click("#login-submit")
        dash.wait_for_url(srv.url + "/")
        dash.click("#lease-take")
        dash.wait_for_function("() => document.querySelector('#lease-panel').innerText.includes('You drive')")
        before = srv.get("/api/state", headers=root)[1]
        results = attack(context, srv, wait_for)
        assert srv.get("/api/lease", headers=root)[1]["holder"]["user"] == "olga"
    finally:
        context.close()
    check_nothing_moved(srv, results, before, srv.get("/api/state", headers=root)[1],
                        srv.get("/api/events?limit=1000", headers=root)[1]["events"])
