"""A stand-in runtime for in-process gateway tests (issue 19 §7): the real gateway app
(:func:`server.gateway.app.create_app`) served by aiohttp's test server in the test's own event loop, over
real HTTP and websockets, with the runtime process replaced — as replay replaces it with a recording — by
:class:`FakeRuntime`, which answers every request and keeps what it was asked. The description is the real
robot's (:meth:`server.runtime.robot.Robot.describe` of a profile), so the edge checks see the real limits.

What stays on real processes (``server_factory``): failure behaviour, the stop paths, the link and the
runtime's own checks. What runs here: the gateway's validation, refusal and permission tables, row by row,
in milliseconds instead of a three-process start each.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import orjson
from aiohttp.test_utils import TestClient, TestServer

from server.config import REPO_ROOT, load_config
from server.runtime_api.client import RuntimeClient

_DESCRIPTIONS: dict[str, dict[str, Any]] = {}


def description(config: str = "rover-sim") -> dict[str, Any]:
    """The real robot's description for ``config/<config>.toml`` (cached; JSON as the hello carries it)."""
    if config not in _DESCRIPTIONS:
        from server.runtime.robot import Robot

        robot = Robot(load_config(REPO_ROOT / "config" / f"{config}.toml"))
        try:
            _DESCRIPTIONS[config] = orjson.loads(orjson.dumps(robot.describe(), option=orjson.OPT_SERIALIZE_NUMPY))
        finally:
            robot.driver.close() if hasattr(robot.driver, "close") else None
    return _DESCRIPTIONS[config]


class FakeRuntime(RuntimeClient):
    """Answers ``{"ok": true, "state": <state>}`` to every request unless ``results[method]`` says otherwise (a value,
    a function of the params, or an exception to raise); ``calls`` keeps ``(method, params, principal)``."""

    def __init__(self, desc: dict[str, Any], state: str = "running") -> None:
        super().__init__("fake:runtime")
        self.description = desc
        self.state = state
        self.calls: list[tuple[str, dict[str, Any], str | None]] = []
        self.results: dict[str, Any] = {}

    def start(self) -> None:
        self.runtime_pid = None
        self.connected = True
        self.connects += 1
        self.down_since = None
        self.latest = orjson.dumps({"seq": 1, "t": 0.0, "state": self.state, "values": {}, "setpoint": {},
                                    "command": {}})
        self.latest_t = asyncio.get_running_loop().time()
        self._connected_event.set()
        self.on_link(True)

    async def stop(self) -> None:
        self.connected = False

    def methods(self) -> list[str]:
        return [m for m, _, _ in self.calls]

    async def request(self, method: str, params: dict[str, Any] | None = None, timeout_s: float | None = None,
                      principal: str | None = None) -> Any:
        self.calls.append((method, params or {}, principal))
        r = self.results.get(method)
        if isinstance(r, BaseException):
            raise r
        if callable(r):
            return r(params or {})
        if r is not None:
            return r
        if method == "state":
            return orjson.loads(self.latest)
        if method in ("events",):
            return {"events": []}
        if method == "loop_stats":
            return {}
        return {"ok": True, "state": self.state}

    def notify(self, method: str, params: dict[str, Any] | None = None, principal: str | None = None) -> bool:
        self.calls.append((method, params or {}, principal))
        return True

    async def estop(self, retry_s: float = 0.0) -> dict[str, Any]:
        self.calls.append(("estop", {}, None))
        self.state = "estop"
        return {"state": "estop", "latch": "confirmed", "attempts": 1}


@contextlib.asynccontextmanager
async def gateway(tmp_path: Path, config: str = "rover-sim", *, state: str = "running",
                  tables: dict[str, Any] | None = None, users: Callable[[Path], Any] | None = None,
                  **create: Any) -> AsyncIterator[tuple[TestClient, FakeRuntime]]:
    """The real gateway app of ``config`` on a :class:`FakeRuntime`, served in this event loop: ``(client,
    runtime)``. No users (local mode: this machine is the admin) unless ``users(path)`` writes a users file."""
    from server.gateway.app import create_app

    users_file = tmp_path / "users.json"
    if users is not None:
        users(users_file)
    overrides = {"auth": {"users_file": str(users_file)}, "video": {"enabled": False},
                 "recording": {"dir": str(tmp_path / "recordings"), "always_on": False}, **(tables or {})}
    cfg = load_config(REPO_ROOT / "config" / f"{config}.toml", overrides=overrides)
    rt = FakeRuntime(description(config), state)
    app = create_app(cfg, rt, bound_host="127.0.0.1", **create)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        yield client, rt
    finally:
        await client.close()
