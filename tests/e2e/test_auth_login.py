"""Real Chromium against the real server with users: the login page, the dashboard under its CSP,
the control lease between two browsers, and what the page does when its session ends.

- the login page refuses a wrong password, lets the right one in, and the session cookie is
  HttpOnly and SameSite=Strict; the dashboard runs under the CSP with no violation;
- two operators in two browsers: one takes control, the other's Start is refused naming the
  holder, asks, is handed the lease, drives; then its link drops (the page goes away): the robot
  stops by itself and the lease is free again, as the first browser shows;
- an admin whose password check is stale is asked for the password again, then the setting applies;
- a session ended from outside (password changed with the CLI) sends the page to the login page.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, ServerProc
from tests.server.gateway.auth.client import PASSWORD, make_users

pytestmark = pytest.mark.e2e

EXPECTED_REFUSALS = ("status of 401", "status of 403", "status of 409")  # Chromium logs refused fetches


def start_server(server_factory, tmp_path, users: dict[str, str], **auth) -> tuple[ServerProc, object]:
    path = make_users(tmp_path / "users.json", users)
    srv = server_factory({"auth": {"users_file": str(path), "users_poll_s": 0.2, **auth},
                          "server": {"state_dir": str(tmp_path / "state")}})
    return srv, path


class Browser:
    """One operator's browser (its own context: its own cookies), with the console watched."""

    def __init__(self, browser, srv: ServerProc) -> None:
        self.srv = srv
        self.context = browser.new_context(viewport={"width": 1440, "height": 900})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))

    def _console(self, m) -> None:
        if m.type == "error" and not any(code in m.text for code in EXPECTED_REFUSALS):
            self.problems.append(f"console {m.type}: {m.text}")

    def log_in(self, user: str, password: str = PASSWORD) -> "Browser":
        self.page.goto(self.srv.url + "/login")
        self.page.fill("#login-user", user)
        self.page.fill("#login-password", password)
        self.page.click("#login-submit")
        self.page.wait_for_url(self.srv.url + "/")
        self.wait_connected()
        return self

    def wait_connected(self) -> None:
        self.page.wait_for_function("() => window.teleop && window.teleop.session.connected", timeout=30000)

    def panel_says(self, text: str, timeout_s: float = 15.0) -> None:
        self.page.wait_for_function("t => document.querySelector('#lease-panel').innerText.includes(t)",
                                    arg=text, timeout=timeout_s * 1000)

    def badge(self, state: str, timeout_s: float = 15.0) -> None:
        self.page.wait_for_function(
            "s => document.querySelector('#state-badge').classList.contains('state-' + s)",
            arg=state, timeout=timeout_s * 1000)

    def close(self) -> None:
        try:
            self.context.close()
        except Exception:  # already closed by the test
            pass


@pytest.fixture
def browsers(browser):
    opened: list[Browser] = []

    def open_(srv: ServerProc) -> Browser:
        b = Browser(browser, srv)
        opened.append(b)
        return b

    yield open_
    for b in opened:
        b.close()


def test_login_page_then_the_dashboard_under_its_csp(server_factory, tmp_path, browsers) -> None:
    srv, _ = start_server(server_factory, tmp_path, {"ada": "admin"})
    b = browsers(srv)
    b.page.goto(srv.url + "/")
    assert b.page.url.startswith(srv.url + "/login?next="), b.page.url  # no session: to the login page
    b.page.fill("#login-user", "ada")
    b.page.fill("#login-password", "not the password")
    b.page.click("#login-submit")
    b.page.wait_for_selector("#login-error:not([hidden])")
    assert "wrong user name or password" in b.page.inner_text("#login-error")
    b.page.fill("#login-password", PASSWORD)
    b.page.click("#login-submit")
    b.page.wait_for_url(srv.url + "/")
    b.wait_connected()
    assert b.page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read the session
    cookie = next(c for c in b.context.cookies() if c["name"] == "teleop_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert b.page.get_attribute('meta[name="csrf-token"]', "content")  # for api.js
    b.panel_says("Signed in as ada (admin).")
    b.panel_says("Nobody drives.")
    assert not b.problems, b.problems  # no CSP violation, no error


def test_two_operators_hand_over_and_the_holders_link_drops(server_factory, tmp_path, browsers, wait_for) -> None:
    srv, _ = start_server(server_factory, tmp_path, {"olga": "operator", "otto": "operator", "root": "admin"})
    token = srv.post("/api/auth/login", {"username": "root", "password": PASSWORD, "bearer": True})[1]["token"]
    root = {"Authorization": f"Bearer {token}"}

    def state() -> dict:
        return srv.get("/api/state", headers=root)[1]

    olga, otto = browsers(srv).log_in("olga"), browsers(srv).log_in("otto")
    olga.panel_says("Nobody drives.")
    olga.page.click("#lease-take")
    olga.panel_says("You drive")
    otto.panel_says("olga drives")  # the lease message reached the other browser
    otto.page.click("#btn-start")
    otto.page.wait_for_selector("#command-error:not([hidden])")
    assert "lease_held" in otto.page.inner_text("#command-error")
    assert state()["state"] == "idle"
    otto.page.click("#lease-request")
    otto.panel_says("You asked olga for control")
    olga.panel_says("otto asks for control")
    olga.page.click("#lease-handover")
    otto.panel_says("You drive")
    olga.panel_says("otto drives")
    otto.page.click("#btn-start")
    otto.badge("running")
    olga.badge("running")
    assert state()["state"] == "running"
    # otto's page keeps the link alive; olga's sends nothing (it may not drive)
    assert not [m for m in olga.page.evaluate("window.teleop.session.sentSince(0)") if m["type"] == "heartbeat"]
    otto.close()  # the holder's link drops
    wait_for(lambda: state()["state"] == "estop", 15, "the link-loss stop")
    assert state()["cause"]["trigger"] == "link_loss"
    olga.panel_says("Nobody drives.")
    olga.badge("estop")
    assert not olga.problems, olga.problems


def test_a_stale_password_check_asks_for_the_password_then_applies(server_factory, tmp_path, browsers,
                                                                 wait_for) -> None:
    srv, _ = start_server(server_factory, tmp_path, {"ada": "admin"}, reauth_s=0.5)
    ada = browsers(srv).log_in("ada")
    ada.page.wait_for_function("() => document.querySelector('#acq-rate').value !== ''")
    ada.page.wait_for_timeout(600)  # longer than reauth_s since the login: the check is stale
    ada.page.fill("#acq-rate", "40")
    ada.page.click("#acq-apply")
    ada.page.wait_for_selector("#reauth-dialog[open]")
    ada.page.fill("#reauth-password", PASSWORD)
    ada.page.click("#reauth-confirm")
    ada.page.wait_for_function("() => document.querySelector('#acq-status').textContent.startsWith('applied: 40')")
    token = srv.post("/api/auth/login", {"username": "ada", "password": PASSWORD, "bearer": True})[1]["token"]
    assert srv.get("/api/acquisition", headers={"Authorization": f"Bearer {token}"})[1]["rate_hz"] == 40
    assert not ada.problems, ada.problems


def test_a_session_ended_from_outside_sends_the_page_to_login(server_factory, tmp_path, browsers) -> None:
    srv, users = start_server(server_factory, tmp_path, {"olga": "operator"})
    olga = browsers(srv).log_in("olga")
    out = subprocess.run([sys.executable, "-m", "server", "users", "--file", str(users), "passwd", "olga",
                          "--password-stdin"], input="a brand new password\n", capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    olga.page.wait_for_url(srv.url + "/login?next=%2F", timeout=30000)  # the socket closed with 4401
    olga.page.fill("#login-user", "olga")
    olga.page.fill("#login-password", "a brand new password")
    olga.page.click("#login-submit")
    olga.page.wait_for_url(srv.url + "/")
    olga.wait_connected()



def test_the_page_goes_to_login_once_however_many_parts_find_the_session_gone(server_factory, tmp_path,
                                                                              browsers) -> None:
    """The session socket, a 401 and the lease panel can all find the session gone at once (a server restart);
    a second ``location.assign`` aborted the first navigation (Playwright: net::ERR_ABORTED). Three calls in the
    real page, with the navigation recorded instead of made: one navigation; then the real one lands."""
    srv, _ = start_server(server_factory, tmp_path, {"olga": "operator"})
    page = browsers(srv).log_in("olga").page
    urls = page.evaluate("""() => import('/static/js/api.js').then(m => {
        const urls = [];
        for (let i = 0; i < 3; i++) m.goToLogin((url) => urls.push(url));
        return urls;
    })""")
    assert urls == ["/login?next=%2F"], urls
