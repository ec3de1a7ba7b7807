"""Fixtures for tests over an emulated link (linkemu, docs/networks.md), for every test directory
(``tests/conftest.py`` registers this plugin).

- ``link_factory(profile="lan", nat=False, seed=None) -> Link``: links torn down after the test.
- ``linked_server(profile="4g", config_overrides=None, config=..., nat=False) -> LinkedServer``: the
  real server (``python -m server``: launcher, runtime, gateway, renderer) in the *robot*
  namespace, listening on the robot's address; the test talks to it from the *operator*
  namespace: ``srv.get("/api/state")`` etc. (as ``ServerProc``, logged in as ``ada``, an admin,
  by bearer token), ``with srv.operator(): …`` or ``srv.call_in_operator(asyncio.run, main())`` for
  the test's own clients (aiohttp, websockets: ``srv.auth_headers()``).
- ``operator_browser(link, args=()) -> playwright Browser``: headless Chromium (with extra command-line
  ``args``) whose network is the operator's (Playwright starts a wrapper that enters the namespace and execs Chromium;
  Playwright talks to it over inherited pipes). ``log_in(page, srv)`` signs a page in.

Off the loopback the server is in login mode (it refuses to listen beyond loopback without a
user: docs/security.md), so every linked server has the users of
``tests/server/gateway/auth/client.py`` (``PASSWORD``). Where the emulator cannot run (not
root, no ``ip``/``tc``/``nft``, no ``/dev/net/tun``) these fixtures skip, saying what is missing.
"""

from __future__ import annotations

import contextlib
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import tomli_w

import linkemu
from linkemu import Link
from tests.conftest import DEFAULT_CONFIG, REPO, TEST_DEFAULTS, ServerProc, deep_merge
from tests.server.gateway.auth.client import PASSWORD, make_users

ADMIN = "ada"


def skip_unless_links() -> None:
    """Skip the calling test, with the reasons, where a link cannot be emulated."""
    problems = linkemu.missing()
    if problems:
        pytest.skip("the link emulator cannot run here: " + "; ".join(problems))


class LinkedServer(ServerProc):
    """A :class:`ServerProc` in the robot's namespace, reached from the operator's."""

    def __init__(self, config_path: Path, link: Link) -> None:
        super().__init__(config_path)
        self.link = link
        self.host = link.robot_ip
        self._tokens: dict[str, str] = {}

    def command(self) -> list[str]:
        return self.link.command_in("robot", [*super().command(), "--host", self.link.robot_ip])

    def operator(self) -> contextlib.AbstractContextManager[None]:
        """This thread in the operator's namespace for a ``with`` block (its new sockets are the operator's)."""
        return self.link.netns("operator")

    def call_in_operator(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.link.call_in("operator", fn, *args, **kwargs)

    def token(self, user: str = ADMIN) -> str:
        """A bearer token of ``user`` (logged in once, over the link)."""
        if user not in self._tokens:
            status, body = self.request("POST", "/api/auth/login", headers={},
                                        body={"username": user, "password": PASSWORD, "bearer": True})
            assert status == 200, (status, body)
            self._tokens[user] = body["token"]
        return self._tokens[user]

    def auth_headers(self, user: str = ADMIN) -> dict[str, str]:
        """What a script's websocket or HTTP client sends: the bearer token and the server's Origin."""
        return {"Authorization": f"Bearer {self.token(user)}", "Origin": self.url}

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None, timeout_s: float = 30.0) -> tuple[int, Any]:
        """As :meth:`ServerProc.request`, from the operator's namespace, as ``ada`` unless ``headers``
        carry other credentials (``headers={}`` for none)."""
        if headers is None:
            headers = {"Authorization": f"Bearer {self.token()}"}
        with self.operator():
            return super().request(method, path, body=body, raw=raw, headers=headers, timeout_s=timeout_s)


@pytest.fixture
def link_factory() -> Iterator[Callable[..., Link]]:
    made: list[Link] = []

    def make(profile: str | linkemu.Profile = "lan", **kwargs: Any) -> Link:
        skip_unless_links()
        link = Link(profile, **kwargs)
        made.append(link)
        return link.start()

    yield make
    for link in made:
        link.close()


@pytest.fixture
def linked_server(tmp_path: Path, link_factory) -> Iterator[Callable[..., LinkedServer]]:
    started: list[LinkedServer] = []

    def make(profile: str | linkemu.Profile = "4g", config_overrides: dict | None = None,
             config: str = DEFAULT_CONFIG, nat: bool = False) -> LinkedServer:
        link = link_factory(profile, nat=nat)
        users = make_users(tmp_path / f"users-{len(started)}.json")
        base = tomllib.loads((REPO / config).read_text())
        hermetic = {"auth": {"users_file": str(users)}, "server": {"state_dir": str(tmp_path / f"state-{len(started)}")}}
        merged = deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), hermetic), config_overrides or {})
        path = tmp_path / f"linked-config-{len(started)}.toml"
        path.write_text(tomli_w.dumps(merged))
        srv = LinkedServer(path, link)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        srv.kill()


@pytest.fixture
def operator_browser() -> Iterator[Callable[[Link], Any]]:
    """``operator_browser(link, args=())`` → a Playwright ``Browser`` running in ``link``'s operator namespace."""
    from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).is_file():
        pytest.fail(f"Chromium not found at {CHROMIUM}: run scripts/install-browser.sh (or set TELEOP_CHROMIUM)",
                    pytrace=False)
    from playwright.sync_api import sync_playwright

    # the sync API marks its loop as running in this thread: stopped at teardown so later tests can
    # use asyncio.run (tests/e2e/conftest.py explains)
    pw = sync_playwright().start()
    browsers: list[Any] = []

    def launch(link: Link, args: tuple[str, ...] = ()) -> Any:
        browser = pw.chromium.launch(executable_path=link.wrapper("operator", CHROMIUM),
                                     args=[*CHROMIUM_ARGS, *args], headless=True)
        browsers.append(browser)
        return browser

    try:
        yield launch
    finally:
        for browser in browsers:
            with contextlib.suppress(Exception):
                browser.close()
        pw.stop()


def log_in(page: Any, srv: LinkedServer, user: str = ADMIN, timeout_s: float = 60.0) -> None:
    """Sign ``page`` in through the login form and wait for the dashboard's socket."""
    page.goto(srv.url + "/login", timeout=timeout_s * 1000)
    page.fill("#login-user", user)
    page.fill("#login-password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(srv.url + "/", timeout=timeout_s * 1000)
    page.wait_for_function("() => window.teleop && window.teleop.session.connected", timeout=timeout_s * 1000)

