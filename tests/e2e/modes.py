"""The two modes every dashboard panel test runs in, and the servers they share.

- ``local``: no users file; the page drives as the local admin, without login or lease.
- ``operator``: a users file (an operator ``olga``, an admin ``root``, a viewer ``vera``; cheap
  argon2 parameters, which the hashes carry); the page logs in through the real login page and
  takes the control lease with the dashboard's own "Take control" button (``conftest.py``'s
  ``open_dashboard``).

A test's own HTTP calls (``srv.post("/api/start")``, ``srv.state()``) go through
:class:`ModeServer.request`: in ``operator`` mode they carry the session cookie, CSRF token and
``Origin`` of the dashboard that holds the lease (so they act as the driver, as a script of the
same operator would), and an admin's bearer token before a page has taken it and for the admin-only
debug routes. A test is then the same code in both modes, and a difference between them fails it.

Servers are shared per module and mode (:class:`SharedServers`): starting one costs seconds of the
two cores, and most tests only need the default profile. A test that asks for the same
configuration as the one before gets the same server, reset (:meth:`SharedServers.reset`): lease
freed, e-stop latched and reset, the rover back where it started, acquisition as it was. At most one
shared server runs at a time (an idle one still runs its 100 Hz loop).
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.conftest import DEFAULT_CONFIG, REPO, TEST_DEFAULTS, ServerProc, deep_merge, wait_until
from tests.server.gateway.auth.client import PASSWORD, Creds, make_users
from tests.server.gateway.recording.real_run import ReplayProc

MODES = ("local", "operator")
OPERATOR = "olga"
ADMIN = "root"
VIEWER = "vera"
USERS = {OPERATOR: "operator", ADMIN: "admin", VIEWER: "viewer"}
COOKIE = "teleop_session"


def users_file(directory: Path) -> Path:
    """A users file for the ``operator`` mode (made once per module: each hash costs a little)."""
    return make_users(directory / "users.json", USERS)


def mode_overrides(mode: str, directory: Path) -> dict:
    """The ``[auth]`` table of a mode: no users (local) or the users file (operator); and a state directory of the
    test's own (a calibration another test left in the checkout's ``state/`` must not steer this one's rover)."""
    state = {"server": {"state_dir": str(directory / "state")}}
    if mode == "local":
        return {"auth": {"users_file": str(directory / "no-users.json")}, **state}
    path = directory / "users.json"
    if not path.exists():
        users_file(directory)
    return {"auth": {"users_file": str(path), "users_poll_s": 0.5}, **state}


class ModeServer:
    """What a server of either mode adds to :class:`ServerProc`: the test's requests carry credentials."""

    mode = "local"
    driver: Creds | None = None          # the lease holder's cookie session (set by open_dashboard)
    _admin: Creds | None = None

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.driver = None
        self._admin = None

    @property
    def login(self) -> bool:
        return self.mode != "local"

    def admin(self) -> Creds:
        """An admin's bearer token (logged in again when the gateway has forgotten it)."""
        if self._admin is None:
            status, body = super().request("POST", "/api/auth/login",  # type: ignore[misc]
                                           {"username": ADMIN, "password": PASSWORD, "bearer": True})
            assert status == 200, (status, body)
            self._admin = Creds(token=body["token"], session=body["session"])
        return self._admin

    def as_admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A request as the admin, whoever drives (the password entered again where the route wants it)."""
        if not self.login:
            return self.request(method, path, body=body)
        status, out = self.request(method, path, body=body, headers=self._headers(self.admin(), method))
        if status == 401 and (out or {}).get("error", {}).get("code") == "reauth_required":
            renewed = self.request("POST", "/api/auth/reauth", body={"password": PASSWORD},
                                   headers=self._headers(self.admin(), "POST"))
            assert renewed[0] == 200, renewed
            status, out = self.request(method, path, body=body, headers=self._headers(self.admin(), method))
        return status, out

    def _headers(self, creds: Creds, method: str) -> dict[str, str]:
        h = creds.headers()
        if creds.cookie and method != "GET":
            h["Origin"] = self.url  # type: ignore[attr-defined]
        return h

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None, timeout_s: float = 10.0) -> tuple[int, Any]:
        base = super().request  # type: ignore[misc]
        if not self.login or (headers and ("Authorization" in headers or "Cookie" in headers)):
            return base(method, path, body=body, raw=raw, headers=headers, timeout_s=timeout_s)
        # the debug routes are the admin's; everything else acts as the driver once a page drives
        creds = self.driver if self.driver is not None and not path.startswith("/api/debug/") else self.admin()
        status, out = base(method, path, body=body, raw=raw,
                           headers={**self._headers(creds, method), **(headers or {})}, timeout_s=timeout_s)
        if status == 401:  # the session ended (logout, a gateway restart): the admin's, fresh, instead
            if creds is self.driver:
                self.driver = None
            self._admin = None
            creds = self.admin()
            status, out = base(method, path, body=body, raw=raw,
                               headers={**self._headers(creds, method), **(headers or {})}, timeout_s=timeout_s)
        return status, out


class E2EServer(ModeServer, ServerProc):
    """``python -m server`` in a mode."""


class E2EReplay(ModeServer, ReplayProc):
    """``python -m server replay FILE`` in a mode."""


def write_config(directory: Path, name: str, mode: str, overrides: dict | None, config: str) -> Path:
    """The profile with the tests' defaults, the mode's ``[auth]`` and the test's overrides."""
    base = tomllib.loads((REPO / config).read_text())
    merged = deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), mode_overrides(mode, directory)),
                        overrides or {})
    path = directory / f"{name}.toml"
    path.write_text(tomli_w.dumps(merged))
    return path


def start_server(directory: Path, name: str, mode: str, overrides: dict | None = None,
                 config: str = DEFAULT_CONFIG) -> E2EServer:
    srv = E2EServer(write_config(directory, name, mode, overrides, config))
    srv.set_mode(mode)
    return srv.start()


class SharedServers:
    """One server per module and mode at a time, reused by consecutive tests that ask for the same
    configuration and reset between them."""

    def __init__(self, mode: str, directory: Path) -> None:
        self.mode = mode
        self.directory = directory
        self.key: str | None = None
        self.server: E2EServer | None = None
        self.baseline: dict[str, Any] = {}
        self.started = 0

    def get(self, overrides: dict | None = None, config: str = DEFAULT_CONFIG) -> E2EServer:
        key = json.dumps([config, overrides or {}], sort_keys=True)
        if self.server is not None and key == self.key and self.server.proc and self.server.proc.poll() is None:
            self.reset(self.server)
            return self.server
        self.close()
        self.started += 1
        self.server = start_server(self.directory, f"shared-{self.started}", self.mode, overrides, config)
        self.key = key
        self.baseline = self._baseline(self.server)
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.kill()
        self.server = self.key = None

    @staticmethod
    def _baseline(srv: E2EServer) -> dict[str, Any]:
        acq = srv.get("/api/acquisition")[1]
        truth = srv.state().get("truth") or {}
        pose = [truth[k] for k in ("x", "y", "yaw")] if all(k in truth for k in ("x", "y", "yaw")) else None
        return {"acquisition": {"rate_hz": acq["rate_hz"], "channels": acq["channels"]}, "pose": pose}

    def reset(self, srv: E2EServer) -> None:
        """Lease free, robot idle where it started, acquisition as it was; what a fresh server would be."""
        srv.driver = None
        if srv.login:
            status, body = srv.as_admin("POST", "/api/lease/take", {"force": True})
            assert status == 200, ("the admin's forced take between tests", status, body)
        srv.post("/api/estop", {"reason": "e2e: reset between tests"})
        wait_until(lambda: srv.state()["state"] == "estop", 10, "the e-stop between tests")
        pose = self.baseline.get("pose")
        truth = srv.state().get("truth") or {}
        if pose is not None and (math.dist(pose[:2], (truth["x"], truth["y"])) > 0.01
                                 or abs(pose[2] - truth["yaw"]) > 0.01):
            status, body = srv.post("/api/debug/driver", {"teleport": pose})
            assert status == 200, ("teleport back to the start", status, body)

        def reset_ok() -> bool:
            status, body = srv.post("/api/reset")
            return status == 200 or (status == 409 and srv.state()["state"] == "idle")

        wait_until(reset_ok, 10, "the reset between tests (a cause that persists?)", interval_s=0.2)
        wait_until(lambda: srv.state()["state"] == "idle", 10, "idle between tests")
        if pose is not None:
            # the position estimate follows a teleport over a few fixes: a mission planned from the start before it
            # had (a loaded machine) began its leg from where the last test left the rover, and failed its corridor
            def estimate_home() -> bool:
                values = srv.state()["values"]
                if values.get("est_x_m") is None or values.get("est_y_m") is None:
                    return True  # no position estimate on this robot
                return math.dist((values["est_x_m"], values["est_y_m"]), pose[:2]) < 0.1

            wait_until(estimate_home, 30, "the position estimate back at the start")
        acq = self.baseline["acquisition"]
        now = srv.get("/api/acquisition")[1]
        if (now["rate_hz"], now["channels"]) != (acq["rate_hz"], acq["channels"]):
            status, body = srv.as_admin("PUT", "/api/acquisition", acq)
            assert status == 200, ("the acquisition back as it was", status, body)
        if srv.login:
            status, body = srv.as_admin("POST", "/api/lease/release")
            assert status == 200, (status, body)
