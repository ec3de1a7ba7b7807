"""Real Chromium against today's real app with the trust layer on (``real_gateway.py`` in a process).

- the login page: no CSP violation, a wrong password is refused, the right one leads to
  the dashboard, the session cookie is HttpOnly;
- the real dashboard under the CSP: it connects (cookie + Origin on the websocket), and an
  operator who takes the lease can start the robot;
- local mode: a page from another origin (``http://localhost:P2`` against
  ``http://127.0.0.1:P1``) tries fetch, a form post and a websocket: nothing moves the robot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from server.gateway.auth.users import UserStore
from tests.server.gateway.auth.conftest import CHEAP_HASHER, PASSWORD
from tests.conftest import wait_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[4]
CHROMIUM = os.environ.get("TELEOP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Gateway:
    def __init__(self, users: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(REPO / "tests/server/gateway/auth/real_gateway.py"), "--users", str(users)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        self.url = ""
        threading.Thread(target=self._pump, daemon=True).start()
        wait_until(lambda: self.url or self.proc.poll() is not None, 60, "the gateway to listen")
        if not self.url:
            raise RuntimeError("gateway did not start:\n" + "".join(self.output))

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            if "teleop listening on " in line:
                self.url = line.strip().rsplit(" ", 1)[1]

    def local_get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def chromium():
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"Chromium not found at {CHROMIUM} (scripts/install-browser.sh)", pytrace=False)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def gateway(tmp_path):
    started: list[Gateway] = []

    def start(users: dict[str, str] | None) -> Gateway:
        path = tmp_path / f"users-{len(started)}.json"
        store = UserStore(path, hasher=CHEAP_HASHER)
        for name, role in (users or {}).items():
            store.add(name, role, PASSWORD)
        gw = Gateway(path)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


def watch(page) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    return problems


def test_login_page_then_dashboard_under_the_csp(chromium, gateway) -> None:
    gw = gateway({"ada": "admin"})
    page = chromium.new_context().new_page()
    problems = watch(page)
    page.goto(gw.url + "/")
    assert page.url.startswith(gw.url + "/login?next="), page.url  # no session: to the login page
    page.fill("#login-user", "ada")
    page.fill("#login-password", "not the password")
    page.click("#login-submit")
    page.wait_for_selector("#login-error:not([hidden])")
    assert "wrong user name or password" in page.inner_text("#login-error")
    problems.clear()  # the refused login's 401 is logged by Chromium as a failed resource
    page.fill("#login-password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(gw.url + "/")
    page.wait_for_function("() => window.teleop && window.teleop.session.connected", timeout=30000)
    assert page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read the session
    cookie = next(c for c in page.context.cookies() if c["name"] == "teleop_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    # an operator takes the lease (CSRF token from /api/auth/me) and starts the robot from the page
    taken = page.evaluate("""async () => {
        const me = await (await fetch('/api/auth/me')).json();
        const r = await fetch('/api/lease/take', {method: 'POST', body: '{}',
            headers: {'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token}});
        return [r.status, (await r.json()).holder.user];
    }""")
    assert taken == [200, "ada"]
    page.click("#btn-start")
    page.wait_for_function("() => document.querySelector('#state-badge').classList.contains('state-running')",
                           timeout=15000)
    page.click("#estop")
    page.wait_for_function("() => document.querySelector('#state-badge').classList.contains('state-estop')",
                           timeout=15000)
    assert not problems, problems


ATTACK_PAGE = """<!doctype html><title>cats</title><body>
<form id="f" method="post" action="{target}/api/reset" enctype="text/plain"><input name="x" value="1"></form>
<script>
window.results = {{}};
(async () => {{
  const t = "{target}";
  const tryFetch = async (name, path, init) => {{
    try {{ const r = await fetch(t + path, init); results[name] = "status " + r.status; }}
    catch (e) {{ results[name] = "blocked: " + e.message; }}
  }};
  await tryFetch("start_no_cors", "/api/start", {{method: "POST", mode: "no-cors"}});
  await tryFetch("speed_text_plain", "/api/speed", {{method: "POST", mode: "no-cors",
    headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{linear: 0.3, angular: 0}})}});
  await tryFetch("heartbeat_json", "/api/heartbeat", {{method: "POST",
    headers: {{"Content-Type": "application/json"}}, body: "{{}}"}});
  await new Promise((done) => {{
    const ws = new WebSocket(t.replace("http", "ws") + "/ws/telemetry");
    ws.onopen = () => {{ ws.send(JSON.stringify({{type: "start", id: 1}})); results.ws = "open"; }};
    ws.onmessage = (e) => {{ results.ws_message = e.data.slice(0, 80); }};
    ws.onerror = () => {{ results.ws = "error"; }};
    ws.onclose = (e) => {{ results.ws_close = e.code; done(); }};
    setTimeout(done, 3000);
  }});
  results.done = true;
}})();
</script>"""


def test_a_foreign_page_cannot_drive_a_local_mode_server(chromium, gateway) -> None:
    gw = gateway(None)  # local mode: no login stands in the way, only the cross-site defences
    target = gw.url
    attack = web.Application()

    async def page_handler(request: web.Request) -> web.Response:
        return web.Response(text=ATTACK_PAGE.format(target=target), content_type="text/html")

    attack.router.add_get("/", page_handler)
    port_box: list[int] = []
    running: dict = {}

    def serve_attack() -> None:
        import asyncio

        async def main() -> None:
            running["loop"], running["stop"] = asyncio.get_running_loop(), asyncio.Event()
            runner = web.AppRunner(attack, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port_box.append(site._server.sockets[0].getsockname()[1])
            await running["stop"].wait()
            await runner.cleanup()

        asyncio.run(main())

    thread = threading.Thread(target=serve_attack, daemon=True)
    thread.start()
    try:
        wait_until(lambda: port_box, 20, "the attack page server")
        page = chromium.new_context().new_page()
        page.goto(f"http://localhost:{port_box[0]}/")  # another origin (and another site) than 127.0.0.1
        page.wait_for_function("() => window.results && window.results.done", timeout=20000)
        results = page.evaluate("window.results")
        with page.expect_navigation():
            page.evaluate("document.getElementById('f').submit()")  # a form post navigates to the target
        form_answer = page.content()
        state = gw.local_get("/api/state")
        events = gw.local_get("/api/events?limit=100")["events"]
    finally:
        if "loop" in running:
            running["loop"].call_soon_threadsafe(running["stop"].set)
        thread.join(10)
    assert state["state"] == "idle", (state, results)
    assert not [e for e in events if e.get("kind") == "command"], events
    assert results.get("ws") != "open" and "ws_message" not in results, results
    assert "bad_origin" in form_answer or "unsupported_media_type" in form_answer, form_answer[:300]
    # the attempts reached the server and the trust layer refused them (not only the browser)
    refused = "".join(line for line in gw.output if "refused " in line)
    for path in ("/api/start", "/api/speed", "/api/reset", "/ws/telemetry"):
        assert f" {path} " in refused, (path, refused, results)


MOUNT_LEASE_PANEL = """async () => {
    // what main.js does for a <section data-panel-module="lease.js" data-panel-factory="createLease">
    const root = document.createElement('section');
    root.className = 'panel';
    root.id = 'lease-panel';
    document.querySelector('.col-left').prepend(root);
    const mod = await import('/static/js/lease.js');
    const panel = mod.createLease({root});
    panel.setState(window.teleop.session.latest || {});
    setInterval(() => panel.setState(window.teleop.session.latest || {}), 200);
}"""


def log_in(chromium, gw, user: str):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    problems = watch(page)
    page.goto(gw.url + "/login")
    page.fill("#login-user", user)
    page.fill("#login-password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(gw.url + "/")
    page.wait_for_function("() => window.teleop && window.teleop.session.connected", timeout=30000)
    page.evaluate(MOUNT_LEASE_PANEL)
    return page, problems


def panel_says(page, text: str, timeout_s: float = 15.0) -> None:
    page.wait_for_function("t => document.querySelector('#lease-panel').innerText.includes(t)", arg=text,
                           timeout=timeout_s * 1000)


def test_lease_panel_hand_over_between_two_browsers(chromium, gateway) -> None:
    gw = gateway({"olga": "operator", "otto": "operator"})
    olga, olga_problems = log_in(chromium, gw, "olga")
    otto, otto_problems = log_in(chromium, gw, "otto")
    panel_says(olga, "Nobody drives.")
    olga.click("#lease-take")
    panel_says(olga, "You drive")
    panel_says(otto, "olga drives")
    otto.click("#lease-request")
    panel_says(otto, "You asked olga for control")
    panel_says(olga, "otto asks for control")
    (REPO / "test-output").mkdir(exist_ok=True)
    olga.screenshot(path=str(REPO / "test-output" / "lease-panel-request.png"))
    olga.click("#lease-handover")
    panel_says(otto, "You drive")
    panel_says(olga, "otto drives")
    # over HTTP (the real app's websocket messages are not checked until the gateway wires authorize_ws)
    post = """async (path) => {
        const me = await (await fetch('/api/auth/me')).json();
        const r = await fetch(path, {method: 'POST', body: '{}',
            headers: {'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token}});
        return [r.status, await r.json()];
    }"""
    assert not olga_problems and not otto_problems, (olga_problems, otto_problems)
    status, body = olga.evaluate(post, "/api/start")  # (Chromium logs the 409 as a failed resource)
    assert status == 409 and body["error"]["code"] == "lease_held" and "otto" in body["error"]["message"]
    status, body = otto.evaluate(post, "/api/start")
    assert status == 200, body
    assert not otto_problems, otto_problems
