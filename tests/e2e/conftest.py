"""Real Chromium for the dashboard tests, plus a small page object.

The browser is the distribution's Chromium (``scripts/install-browser.sh``;
``TELEOP_CHROMIUM`` overrides the path), driven by Playwright. It is never
downloaded and the tests never skip: no browser is a failure.

The server comes from ``tests/conftest.py`` (``server_factory``, ``wait_for``): the real
``python -m server`` in a subprocess; or, for the dashboard's panel tests, from
``dashboard_server``: the same server in each of the two modes of ``modes.py`` (``local``, and
``operator``: logged in through the login page, holding the lease), shared by consecutive tests
of a module that ask for the same configuration.

A test's first page opens in the *warm context*: one browser context kept for the whole run, with a
page on ``127.0.0.1`` always open in it, so the dashboard loads into a live renderer process (a load
in a new context started one: ~1.9 CPU-seconds of the machine where the warm one takes ~0.7). Between
tests it keeps nothing: its other pages are closed, its cookies and every origin's storage cleared.
A second user's page (its own cookies) and a page with context options (touch) get a context of
their own, as before.

Every page ``open_dashboard`` opens has ``window.fetch`` wrapped (an init script) and its network
watched: under login, each state-changing request the dashboard makes must carry ``X-CSRF-Token``,
or the test fails at teardown.
"""

from __future__ import annotations

import http.server
import re
import threading
import urllib.parse

import os
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest

from tests.conftest import DEFAULT_CONFIG
from tests.e2e.modes import COOKIE, MODES, OPERATOR, SharedServers, start_server
from tests.server.gateway.auth.client import PASSWORD, Creds

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "test-output"
CHROMIUM = os.environ.get("TELEOP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1440, "height": 900}
TABLET = {"width": 800, "height": 1280}


class _Chromium:
    """One Chromium for the whole e2e run, started on first use.

    Playwright's sync API marks its asyncio loop as running in this thread for as
    long as it is started, which breaks every later test that calls asyncio.run()
    (or pytest-asyncio). So the browser is stopped as soon as the next test is not
    an e2e test (pytest_runtest_teardown below) and started again if one comes.
    """

    def __init__(self) -> None:
        self._pw = None
        self._browser = None
        self._warm = None  # (context, keeper page)

    def get(self):
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        self.stop()
        if not Path(CHROMIUM).is_file():
            pytest.fail(f"Chromium not found at {CHROMIUM}: run scripts/install-browser.sh "
                        "(or set TELEOP_CHROMIUM). The e2e tests do not skip.", pytrace=False)
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as err:  # a test dependency in pyproject
            pytest.fail(f"playwright is not installed: {err}", pytrace=False)
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        except Exception:
            self.stop()
            raise
        return self._browser

    def warm_context(self):
        """The warm context (module docstring), cleared of the last test's cookies and storage."""
        browser = self.get()
        if self._warm is None or self._warm[0].browser is not browser or self._warm[1].is_closed():
            context = browser.new_context(viewport=DESKTOP)
            keeper = context.new_page()
            keeper.goto(_keeper_url())
            self._warm = (context, keeper)
        context, keeper = self._warm
        self.clear_warm()
        return context

    def clear_warm(self, origins: Iterable[str] = ()) -> None:
        """Close the warm context's pages but its keeper; clear its cookies and ``origins``' storage."""
        if self._warm is None or self._warm[1].is_closed():
            return
        context, keeper = self._warm
        for page in context.pages:
            if page is not keeper:
                page.close()
        context.clear_cookies()
        origins = {o for o in origins if o.startswith(("http://", "https://"))}  # not about:, data:, chrome-error:
        if origins:
            cdp = context.new_cdp_session(keeper)
            for origin in origins:
                cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
            cdp.detach()

    def stop(self) -> None:
        self._warm = None
        if self._browser is not None:
            try:
                self._browser.close()
            except Exception:  # already gone
                pass
        if self._pw is not None:
            self._pw.stop()
        self._pw = self._browser = None


class _KeeperPage(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        body = b"<!doctype html><title>keeper</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


_KEEPER: list[http.server.ThreadingHTTPServer] = []


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _keeper_url() -> str:
    """A page on 127.0.0.1 (the site every test server is on) for the warm context to keep open."""
    if not _KEEPER:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeeperPage)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, name="keeper-page", daemon=True).start()
        _KEEPER.append(srv)
    return f"http://127.0.0.1:{_KEEPER[0].server_address[1]}/"


_CHROMIUM = _Chromium()
_E2E_DIR = Path(__file__).resolve().parent


def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or _E2E_DIR not in Path(str(nextitem.path)).resolve().parents:
        _CHROMIUM.stop()


@pytest.fixture(scope="session")
def chromium() -> _Chromium:
    """The session's Chromium (see :class:`_Chromium`)."""
    yield _CHROMIUM
    _CHROMIUM.stop()


@pytest.fixture
def browser(chromium):
    """The running Chromium (a playwright Browser)."""
    return chromium.get()


# Every fetch() the page makes, reported to the test (it survives reloads: an init script runs in
# each new document). What the header says is what the page asked for, before the browser sent it.
FETCH_PROBE = """(() => {
  const real = window.fetch;
  window.fetch = function (input, init) {
    try {
      const req = input instanceof Request ? input : null;
      const method = String((init && init.method) || (req && req.method) || "GET").toUpperCase();
      const headers = new Headers((init && init.headers) || (req && req.headers) || undefined);
      window.__teleopFetch({ method, url: String(req ? req.url : input), page: location.pathname,
                             csrf: headers.get("X-CSRF-Token") || "" });
    } catch (err) { /* the probe is never in the way */ }
    return real.apply(this, arguments);
  };
})();"""
STATE_CHANGING = ("POST", "PUT", "PATCH", "DELETE")


class Dashboard:
    """The operator page in one browser context, with what it logged and every request it made."""

    def __init__(self, context, page, server, wait_for: Callable[..., Any]) -> None:
        self.context = context
        self.page = page
        self.server = server
        self.wait_for = wait_for
        self.console: list[tuple[str, str, str]] = []
        self.page_errors: list[str] = []
        self.tolerated_page_errors: set[str] = set()  # a test's own proxy's errors (tests/e2e/clocks.py), exactly
        self.fetches: list[dict] = []          # from the page's fetch() (FETCH_PROBE)
        self.sent: list[dict] = []             # from the network: every request to the server
        self.user: str | None = None           # logged in as (None: local mode)
        self.session: Creds | None = None      # its cookie and CSRF token
        self._watch(page)

    def _watch(self, page) -> None:
        page.on("console", lambda m: self.console.append((m.type, m.text, (m.location or {}).get("url", ""))))
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.expose_function("__teleopFetch", self._fetched)
        page.add_init_script(script=FETCH_PROBE)
        page.on("request", self._request)

    def _fetched(self, record: dict) -> None:
        self.fetches.append(record)

    def _request(self, request) -> None:
        if request.url.startswith(self.server.url):
            path = request.url[len(self.server.url):]
            self.sent.append({"method": request.method, "path": path,
                              "csrf": request.headers.get("x-csrf-token", "")})

    # ------------------------------------------------------------------ requests
    def state_changing(self) -> list[dict]:
        """The dashboard's own state-changing fetches (the login page's login is not the dashboard's)."""
        return [f for f in self.fetches if f["method"] in STATE_CHANGING and f["page"] != "/login"]

    def requests_without_token(self) -> list[dict]:
        """State-changing requests without a CSRF token, as the page asked (fetch) and as the network saw."""
        bad = [f for f in self.state_changing() if not f["csrf"]]
        bad += [r for r in self.sent if r["method"] in STATE_CHANGING and not r["csrf"]
                and not r["path"].startswith("/api/auth/login")]
        return bad

    # ------------------------------------------------------------------ login and the lease
    def log_in(self, user: str = OPERATOR, password: str = PASSWORD) -> None:
        """Through the real login page: the dashboard sends the browser there, and back after."""
        page, url = self.page, self.server.url
        page.goto(url + "/")
        page.wait_for_url(url + "/login?next=**")
        page.fill("#login-user", user)
        page.fill("#login-password", password)
        page.click("#login-submit")
        page.wait_for_url(url + "/")
        self.user = user
        self.session = self.creds()
        self.wait_connected()
        self.page.wait_for_function("u => document.querySelector('#lease-panel').innerText.includes(u)",
                                    arg=f"Signed in as {user}", timeout=20000)

    def lease_says(self, text: str, timeout_s: float = 15.0) -> None:
        self.page.wait_for_function("t => document.querySelector('#lease-panel').innerText.includes(t)",
                                    arg=text, timeout=timeout_s * 1000)

    def take_lease(self) -> None:
        """With the dashboard's own control; then the test's HTTP calls act as this session."""
        self.page.locator("#lease-take").click(timeout=20000)
        self.lease_says("You drive")
        self.server.driver = self.session

    def creds(self) -> Creds:
        cookie = next(c for c in self.context.cookies() if c["name"] == COOKIE)
        return Creds(cookie=f"{COOKIE}={cookie['value']}", csrf=self.page.get_attribute('meta[name="csrf-token"]',
                                                                                          "content"))

    # ------------------------------------------------------------------ reading the page
    def console_errors(self) -> list[tuple[str, str, str]]:
        errors = [c for c in self.console if c[0] == "error"]
        if not (REPO / "web/static/js/video.js").exists():
            # video.js belongs to another module; until it lands the import 404s (and is tolerated)
            errors = [c for c in errors if "video.js" not in c[2] and "video.js" not in c[1]]
        return errors

    def js(self, expr: str, arg: Any = None) -> Any:
        # a bare expression would be eval()ed, which the dashboard's CSP (script-src 'self') forbids
        if not re.match(r"\s*(\(|async\b|\w+\s*=>|function\b)", expr):
            expr = f"() => ({expr})"
        return self.page.evaluate(expr, arg)

    def epoch(self) -> int:
        return self.js("window.teleop ? window.teleop.session.epoch : 0")

    def wait_connected(self, min_epoch: int = 1, timeout_s: float = 20.0) -> int:
        self.page.wait_for_function(
            "e => window.teleop && window.teleop.session.connected && window.teleop.session.epoch >= e",
            arg=min_epoch, timeout=timeout_s * 1000)
        return self.epoch()

    def wait_badge(self, state: str, timeout_s: float = 20.0) -> None:  # a deadline: CI's 2 cores run slow
        self.page.wait_for_function(
            "s => document.querySelector('#state-badge').classList.contains('state-' + s)",
            arg=state, timeout=timeout_s * 1000)

    def sent_since(self, epoch: int) -> list[dict]:
        return self.js("e => window.teleop.session.sentSince(e)", epoch)

    def widget_text(self, channel: str, selector: str) -> str:
        return self.page.locator(f'{selector}[data-channel="{channel}"]').first.inner_text()

    # ------------------------------------------------------------------ acting
    def click_start(self) -> None:
        self.page.click("#btn-start")
        self.wait_badge("running")

    def joystick_center(self) -> tuple[float, float, float]:
        box = self.page.locator("#joystick").bounding_box()
        assert box, "joystick not laid out"
        return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, box["width"] / 2

    def press_joystick(self, fx: float = 0.0, fy: float = 0.8) -> None:
        """Mouse down on the joystick and drag to (fx, fy) of its radius (fy > 0 is forward)."""
        cx, cy, r = self.joystick_center()
        self.page.mouse.move(cx, cy)
        self.page.mouse.down()
        self.page.mouse.move(cx + fx * r * 0.66, cy - fy * r * 0.66, steps=6)

    def move_mouse_by(self, dx: float, dy: float) -> None:
        cx, cy, _ = self.joystick_center()
        self.page.mouse.move(cx + dx, cy + dy, steps=3)

    def release_mouse(self) -> None:
        self.page.mouse.up()

    def screenshot(self, name: str, full_page: bool = True) -> Path:
        OUTPUT.mkdir(exist_ok=True)
        path = OUTPUT / name
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


@pytest.fixture
def open_dashboard(chromium, browser, wait_for):
    """open_dashboard(server, viewport=DESKTOP, setup=None, user=OPERATOR, take_lease=True, tab_of=None,
    **context_options) -> Dashboard, connected; ``setup(page)`` runs before the page loads.

    On a server with users (``server.login``) the page logs in as ``user`` through the login page and,
    with ``take_lease``, takes the control lease with its own button. ``tab_of=dash`` opens another tab
    of that dashboard's browser (the same session, so it holds the lease too). The test's first page
    without ``context_options`` opens in the warm context (module docstring); any later one, or one
    with options, in a context of its own (its own cookies: another user)."""
    opened: list[Dashboard] = []
    warm: list[Any] = []
    visited: set[str] = set()  # every URL a page of the warm context loaded

    def open_(server, viewport: dict | None = None, setup: Callable[[Any], None] | None = None,
              user: str = OPERATOR, take_lease: bool = True, tab_of: Dashboard | None = None,
              **context_options: Any) -> Dashboard:
        if tab_of is not None:
            context = tab_of.context
        elif not context_options and not warm and not opened:
            context = chromium.warm_context()
            warm.append(context)
        else:
            context = browser.new_context(viewport=viewport or DESKTOP, **context_options)
        page = context.new_page()
        if context in warm:
            page.on("framenavigated", lambda frame: visited.add(frame.url))
            if viewport is not None:
                page.set_viewport_size(viewport)
        if setup is not None:  # before the page loads: routes, init scripts
            setup(page)
        dash = Dashboard(context, page, server, wait_for)
        opened.append(dash)
        if getattr(server, "login", False) and tab_of is None:
            dash.log_in(user)
            if take_lease:
                dash.take_lease()
        else:
            page.goto(server.url + "/")
            dash.wait_connected()
            if tab_of is not None:
                dash.user, dash.session = tab_of.user, tab_of.session
        return dash

    yield open_
    sessions: dict[str, tuple[Any, Creds]] = {}
    for dash in opened:
        if dash.session is not None:
            sessions[dash.session.cookie] = (dash.server, dash.session)
        if dash.context in warm:
            continue
        try:
            dash.context.close()
        except Exception:  # already closed by the test
            pass
    if warm:  # the pages' origins: every server the test's dashboards used (a later test may get its port)
        chromium.clear_warm({_origin(dash.server.url) for dash in opened} | {_origin(url) for url in visited})
    for srv, creds in sessions.values():  # the session ends with the test, and any lease or request it had
        if srv.proc is not None and srv.proc.poll() is None:
            srv.request("POST", "/api/auth/logout", body={}, headers={**creds.headers(), "Origin": srv.url})
    for dash in opened:
        errors = [e for e in dash.page_errors if e not in dash.tolerated_page_errors]
        assert not errors, f"uncaught errors in the page: {errors}"
        if dash.user is not None:
            bad = dash.requests_without_token()
            assert not bad, f"state-changing requests without X-CSRF-Token under login: {bad}"


@pytest.fixture(scope="module", params=MODES)
def mode(request) -> str:
    """``local`` (no users) or ``operator`` (logged in, holding the lease): see modes.py."""
    return request.param


@pytest.fixture(scope="module")
def shared_servers(mode, tmp_path_factory):
    pool = SharedServers(mode, tmp_path_factory.mktemp(f"servers-{mode}"))
    yield pool
    pool.close()


@pytest.fixture
def dashboard_server(shared_servers, tmp_path):
    """dashboard_server(overrides=None, config=DEFAULT_CONFIG, fresh=False) -> the server in this test's
    mode: the module's shared one for this configuration, reset; ``fresh=True``: its own (a test that
    kills it, or leaves state behind)."""
    own = []

    def get(overrides: dict | None = None, config: str = DEFAULT_CONFIG, fresh: bool = False):
        if not fresh:
            return shared_servers.get(overrides, config)
        shared_servers.close()  # one server at a time on two shared cores
        own.append(start_server(tmp_path, f"own-{len(own)}", shared_servers.mode, overrides, config))
        return own[-1]

    yield get
    for srv in own:
        srv.kill()
