"""The refusal table, against the real teleop server (``python -m server``: launcher, runtime, gateway).

Every route of the gateway and every websocket message type × who asks and how → the status,
over real sockets. Each cell first puts the robot where the request could act (running for
speed and stop, latched for reset, …) and then checks what happened: a refused cell must leave
the robot and every setting as they were, an allowed one must have done its work (the robot
started, the setpoint changed, the heartbeat renewed the link, the user was added, …).

The columns: in each, the operator ``olga`` holds the control lease. "operator without lease" is
another operator, "admin" an admin who does not hold it; "expired session" is ``olga``'s cookie
after ``session_max_s`` (on a second server with short sessions); "foreign Origin" is ``olga``'s
cookie and CSRF token with ``Origin: http://evil.example``; "foreign Host" is
``Host: attacker.rebind.example``; "text/plain body" is ``olga`` sending the JSON body as
``text/plain``. Every request is cookie-authenticated, like a browser (CSRF token and this origin
unless the column says otherwise). Websocket rows: ``ok`` = acknowledged (for ``heartbeat``,
which has no ack: no error before the next pong; for ``ack``: the next frame came), ``(N)`` = the
upgrade was refused with N, a number = the error reply's status.

The table is printed (``pytest -s`` shows it) and must match ``docs/security.md``
(``TELEOP_WRITE_DOCS=1`` rewrites it there).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp
import pytest

from tests.conftest import ServerProc
from tests.server.gateway.auth.client import FOREIGN_HOST, FOREIGN_ORIGIN, PASSWORD, Client, Creds, make_users

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[4]
DOC = REPO / "docs" / "security.md"
START, END = "<!-- refusal-table:start -->", "<!-- refusal-table:end -->"

COLUMNS = ["no credentials", "viewer", "operator without lease", "operator with lease", "admin",
           "expired session", "foreign Origin", "foreign Host", "text/plain body"]
IDENTITY = {"viewer": "vera", "operator without lease": "otto", "admin": "ada"}  # the others are olga
USERS = {"vera": "viewer", "otto": "operator", "olga": "operator", "ada": "admin",
         "root": "admin",      # the test's own eyes and hands (settings, users), never a column
         "lena": "viewer"}     # logs in in the login row
WS_STATUS = {"unauthenticated": 401, "forbidden": 403, "lease_held": 409, "lease_required": 409}
TURN = {"linear": 0.0, "angular": 0.2}   # a turn in place: the sim rover never drives into a wall here
UWB_A = {"pairs": [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], "degree": 1}
UWB_B = {"pairs": [[1.0, 1.1], [2.0, 2.1], [3.0, 3.1]], "degree": 1}


def server_config(tmp_path: Path, users: Path, **auth: Any) -> dict:
    return {
        "auth": {"users_file": str(users), "reauth_s": 3600, "login_failures_per_minute": 1000,
                 "login_failures_per_hour": 10000, **auth},
        "server": {"state_dir": str(tmp_path / "state")},
        "safety": {"command_timeout_s": 60.0},   # the robot runs between cells without heartbeats
        "video": {"enabled": True, "width": 160, "height": 120, "fps": 5, "render_process": False},
    }


# ---------------------------------------------------------------------- the run
@dataclass
class Column:
    name: str
    creds: Creds | None = None           # who asks (None: nobody)
    origin: str | None = "same"
    host: str | None = None
    text: bool = False
    ws: Any = None                       # the column's telemetry socket, or the refused upgrade's status
    video: Any = None


@dataclass
class Run:
    """One server under test, the client, the lease holder's session and the test's admin."""

    srv: ServerProc
    client: Client
    holder: Creds | None = None
    root: Creds | None = None
    sessions: dict[str, Creds] = field(default_factory=dict)

    # ---- the test's own requests (as root, a bearer session; re-logged-in when it ended)
    async def as_root(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        for _ in range(2):
            if self.root is None:
                self.root = await self.client.login("root", bearer=True)
            status, payload, _ = await self.client.request(method, path, self.root, json_body=body, origin=None)
            if status != 401:
                return status, payload
            self.root = None
        raise AssertionError(f"root cannot {method} {path}")

    async def get(self, path: str) -> Any:
        status, payload = await self.as_root("GET", path)
        assert status == 200, (path, status, payload)
        return payload

    async def state(self) -> dict:
        return await self.get("/api/state")

    async def wait_state(self, predicate: Callable[[dict], bool], what: str, timeout_s: float = 15.0) -> dict:
        async with asyncio.timeout(timeout_s):
            while True:
                s = await self.state()
                if predicate(s):
                    return s
                await asyncio.sleep(0.02)
        raise AssertionError(what)  # pragma: no cover - the timeout raises

    async def next_snapshot(self) -> dict:
        """A snapshot published after everything sent so far reached the runtime (a runtime round trip
        first: it answers in order, after any heartbeat written before it)."""
        await self.get("/api/events?limit=1")
        seq = (await self.state())["seq"]
        return await self.wait_state(lambda s: s["seq"] > seq, "a new snapshot")

    # ---- the lease holder (olga): drives the robot into the state a cell needs
    async def as_holder(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, payload, _ = await self.client.request(method, path, self.holder, json_body=body)
        return status, payload

    async def ensure_holder(self) -> None:
        """olga is logged in, holds the lease, and nobody has asked for it."""
        if self.holder is None or (await self.client.request("GET", "/api/auth/me", self.holder))[0] != 200:
            self.holder = await self.client.login("olga")
        lease = await self.get("/api/lease")
        if lease["holder"] is None or lease["holder"]["session"] != self.holder.session:
            if lease["holder"] is not None:  # a stale session of olga's from an earlier column
                await self.as_root("POST", "/api/lease/take", {"force": True})
                await self.as_root("POST", "/api/lease/release", {})
            status, payload = await self.as_holder("POST", "/api/lease/take", {})
            assert status == 200, payload
        elif lease["request"] is not None:
            status, payload = await self.as_holder("POST", "/api/lease/handover", {"accept": False})
            assert status == 200, payload

    async def robot(self, want: str) -> dict:
        """Bring the robot to ``idle``, ``running`` (zero setpoint, no behaviour) or ``estop``."""
        s = await self.state()
        if s["state"] in ("estop", "fault"):
            status, payload = await self.as_holder("POST", "/api/reset", {})
            assert status == 200, payload
        elif s["state"] in ("running", "stopping") and (want != "running" or s["behavior"] or
                                                       any(v for k, v in s["setpoint"].items() if k != "source")):
            if s["state"] == "running":
                await self.as_holder("POST", "/api/stop", {})
        s = await self.wait_state(lambda s: s["state"] in ("idle", "running") and not s["behavior"]
                                  and (s["state"] == "idle" or want == "running"), f"robot ready for {want}")
        if want in ("running", "estop") and s["state"] == "idle":
            status, payload = await self.as_holder("POST", "/api/start", {})
            assert status == 200, payload
        if want == "estop":
            status, payload = await self.as_holder("POST", "/api/estop", {"reason": "test set-up"})
            assert status == 200, payload
        return await self.wait_state(lambda s: s["state"] == want, f"robot {want}")


# ---------------------------------------------------------------------- what each row does and shows
Observe = Callable[[Run, Column], Awaitable[Any]]


@dataclass
class Row:
    label: str
    kind: str                       # http | upgrade | ws | stream
    method: str = "GET"
    target: str = ""                # path, or websocket message type
    body: Any = None
    prep: Callable[[Run, Column], Awaitable[None]] | None = None
    observe: Observe | None = None  # read before and after the cell
    moved: Callable[[Any, Any], bool] | None = None   # did the request take effect?
    accept: str | None = None       # Accept header
    socket: str = "/ws/telemetry"
    always_acts: bool = True        # False: an allowed call may find nothing to do (idempotent lease calls)


def robot_in(want: str) -> Callable[[Run, Column], Awaitable[None]]:
    async def prep(run: Run, col: Column) -> None:
        await run.robot(want)
    return prep


async def robot_state(run: Run, col: Column) -> str:
    return (await run.state())["state"]


async def setpoint(run: Run, col: Column) -> float:
    return (await run.state())["setpoint"]["angular"]


async def behavior(run: Run, col: Column) -> Any:
    return (await run.state())["behavior"]


async def link_age(run: Run, col: Column) -> float:
    return (await run.next_snapshot())["link"]["age_s"]


async def running_and_aged(run: Run, col: Column) -> None:
    await run.robot("running")
    await run.wait_state(lambda s: (s["link"]["age_s"] or 0) >= 0.3, "the link to age")


async def uwb(run: Run, col: Column) -> Any:
    return ((await run.get("/api/calibration"))["uwb"] or {}).get("coefficients")


async def set_uwb(run: Run, col: Column) -> None:
    assert (await run.as_root("POST", "/api/calibration/uwb", UWB_A))[0] == 200


async def acquisition_rate(run: Run, col: Column) -> float:
    return (await run.get("/api/acquisition"))["rate_hz"]


async def set_acquisition(run: Run, col: Column) -> None:
    acq = await run.get("/api/acquisition")
    assert (await run.as_root("PUT", "/api/acquisition", {"rate_hz": 50, "channels": acq["channels"]}))[0] == 200


async def video_fps(run: Run, col: Column) -> int:
    return (await run.get("/api/video"))["settings"]["fps"]


async def set_video(run: Run, col: Column) -> None:
    assert (await run.as_root("PUT", "/api/video", {"fps": 5}))[0] == 200


async def newbie(run: Run, col: Column) -> str | None:
    users = {u["name"]: u["role"] for u in (await run.get("/api/users"))["users"]}
    return users.get("newbie")


def newbie_as(role: str | None) -> Callable[[Run, Column], Awaitable[None]]:
    async def prep(run: Run, col: Column) -> None:
        now = await newbie(run, col)
        if now is not None and role is None:
            assert (await run.as_root("DELETE", "/api/users/newbie"))[0] == 200
        elif now is None and role is not None:
            assert (await run.as_root("POST", "/api/users", {"name": "newbie", "role": role,
                                                             "password": "another long one"}))[0] == 201
        elif now is not None and now != role:
            assert (await run.as_root("PUT", "/api/users/newbie", {"role": role}))[0] == 200
    return prep


async def lease_request(run: Run, col: Column) -> Any:
    return (await run.get("/api/lease"))["request"]


async def lease_holder(run: Run, col: Column) -> Any:
    holder = (await run.get("/api/lease"))["holder"]
    return holder and holder["user"]


async def someone_asks(run: Run, col: Column) -> None:
    bot = await run.client.login("otto", bearer=True)
    status, payload, _ = await run.client.request("POST", "/api/lease/request", bot, json_body={}, origin=None)
    assert status == 200, payload


async def signed_in(run: Run, col: Column) -> bool:
    if col.creds is None:
        return False
    return (await run.client.request("GET", "/api/auth/me", col.creds))[0] == 200


ROWS: list[Row] = [
    Row("GET /", "http", "GET", "/", accept="text/html"),
    Row("GET /login", "http", "GET", "/login", accept="text/html"),
    Row("GET /static (/static/js/main.js)", "http", "GET", "/static/js/main.js"),
    Row("GET /api/state", "http", "GET", "/api/state"),
    Row("GET /api/robot", "http", "GET", "/api/robot"),
    Row("GET /api/robot.svg", "http", "GET", "/api/robot.svg"),
    Row("GET /api/events", "http", "GET", "/api/events"),
    Row("GET /api/acquisition", "http", "GET", "/api/acquisition"),
    Row("GET /api/calibration", "http", "GET", "/api/calibration"),
    Row("GET /api/telemetry", "http", "GET", "/api/telemetry"),
    Row("GET /api/video", "http", "GET", "/api/video"),
    Row("GET /api/video/snapshot.jpg", "http", "GET", "/api/video/snapshot.jpg"),
    Row("GET /video.mjpeg", "stream", "GET", "/video.mjpeg"),
    Row("GET /api/lease", "http", "GET", "/api/lease"),
    Row("GET /api/auth/me", "http", "GET", "/api/auth/me"),
    Row("GET /api/users", "http", "GET", "/api/users"),
    Row("POST /api/start", "http", "POST", "/api/start", {}, robot_in("idle"), robot_state,
        lambda b, a: b == "idle" and a == "running"),
    Row("POST /api/speed", "http", "POST", "/api/speed", TURN, robot_in("running"), setpoint,
        lambda b, a: b == 0.0 and a == TURN["angular"]),
    Row("POST /api/heartbeat", "http", "POST", "/api/heartbeat", {}, running_and_aged, link_age,
        lambda b, a: None not in (a, b) and a < b),
    Row("POST /api/stop", "http", "POST", "/api/stop", {}, robot_in("running"), robot_state,
        lambda b, a: b == "running" and a in ("stopping", "idle")),
    Row("POST /api/estop", "http", "POST", "/api/estop", {"reason": "refusal table"}, robot_in("running"),
        robot_state, lambda b, a: b == "running" and a == "estop"),
    Row("POST /api/reset", "http", "POST", "/api/reset", {}, robot_in("estop"), robot_state,
        lambda b, a: b == "estop" and a == "idle"),
    Row("POST /api/heading", "http", "POST", "/api/heading", {"heading_deg": 180}, robot_in("running"), behavior,
        lambda b, a: b is None and a is not None),
    Row("POST /api/calibration/magnetometer", "http", "POST", "/api/calibration/magnetometer", {},
        robot_in("running"), behavior, lambda b, a: b is None and a is not None),
    Row("POST /api/calibration/uwb", "http", "POST", "/api/calibration/uwb", UWB_B, set_uwb, uwb,
        lambda b, a: a != b),
    Row("PUT /api/acquisition", "http", "PUT", "/api/acquisition", None, set_acquisition, acquisition_rate,
        lambda b, a: b == 50 and a == 40),
    Row("PUT /api/video", "http", "PUT", "/api/video", {"fps": 4}, set_video, video_fps,
        lambda b, a: b == 5 and a == 4),
    Row("POST /api/debug/block", "http", "POST", "/api/debug/block", {"seconds": 0}),
    Row("POST /api/debug/driver", "http", "POST", "/api/debug/driver", {"battery_v": None}),
    Row("POST /api/users", "http", "POST", "/api/users", {"name": "newbie", "role": "viewer",
                                                          "password": "another long one"},
        newbie_as(None), newbie, lambda b, a: b is None and a == "viewer"),
    Row("PUT /api/users/{name}", "http", "PUT", "/api/users/newbie", {"role": "operator"}, newbie_as("viewer"),
        newbie, lambda b, a: b == "viewer" and a == "operator"),
    Row("DELETE /api/users/{name}", "http", "DELETE", "/api/users/newbie", None, newbie_as("viewer"), newbie,
        lambda b, a: b is not None and a is None),
    Row("POST /api/lease/take", "http", "POST", "/api/lease/take", {}),
    Row("POST /api/lease/request", "http", "POST", "/api/lease/request", {}, None, lease_request,
        lambda b, a: b is None and a is not None, always_acts=False),  # the holder's own: nothing to do
    Row("POST /api/lease/handover", "http", "POST", "/api/lease/handover", {"accept": False}, someone_asks,
        lease_request, lambda b, a: b is not None and a is None),
    Row("POST /api/lease/release", "http", "POST", "/api/lease/release", {}, None, lease_holder,
        lambda b, a: b == "olga" and a is None, always_acts=False),  # another's release: nothing to do
    Row("POST /api/auth/login", "http", "POST", "/api/auth/login",
        {"username": "lena", "password": PASSWORD, "bearer": True}),
    Row("POST /api/auth/reauth", "http", "POST", "/api/auth/reauth", {"password": PASSWORD}),
    Row("GET /ws/telemetry (upgrade)", "upgrade"),
    Row("ws `ping`", "ws", target="ping", body={"t": 1.0}),
    Row("ws `start`", "ws", target="start", body={}, prep=robot_in("idle"), observe=robot_state,
        moved=lambda b, a: b == "idle" and a == "running"),
    Row("ws `speed`", "ws", target="speed", body=TURN, prep=robot_in("running"), observe=setpoint,
        moved=lambda b, a: b == 0.0 and a == TURN["angular"]),
    Row("ws `heartbeat`", "ws", target="heartbeat", body={}, prep=running_and_aged, observe=link_age,
        moved=lambda b, a: None not in (a, b) and a < b),
    Row("ws `stop`", "ws", target="stop", body={}, prep=robot_in("running"), observe=robot_state,
        moved=lambda b, a: b == "running" and a in ("stopping", "idle")),
    Row("ws `estop`", "ws", target="estop", body={}, prep=robot_in("running"), observe=robot_state,
        moved=lambda b, a: b == "running" and a == "estop"),
    Row("ws `reset`", "ws", target="reset", body={}, prep=robot_in("estop"), observe=robot_state,
        moved=lambda b, a: b == "estop" and a == "idle"),
    Row("GET /ws/video (upgrade)", "upgrade", socket="/ws/video"),
    Row("ws `ack` (/ws/video)", "ws", target="ack", socket="/ws/video"),
    Row("POST /api/auth/password", "http", "POST", "/api/auth/password", {"current": PASSWORD, "new": PASSWORD},
        None, signed_in, lambda b, a: b and not a),
    Row("POST /api/auth/logout", "http", "POST", "/api/auth/logout", {}, None, signed_in,
        lambda b, a: b and not a),
]

ALLOWED = {"200", "201", "303", "101", "ok"}


# ---------------------------------------------------------------------- one cell
async def column_creds(run: Run, name: str) -> Column:
    await run.ensure_holder()
    if name == "no credentials":
        return Column(name)
    if name in IDENTITY:
        return Column(name, await run.client.login(IDENTITY[name]))
    col = Column(name, run.holder)
    if name == "foreign Origin":
        col.origin = FOREIGN_ORIGIN
    elif name == "foreign Host":
        col.host = FOREIGN_HOST
    elif name == "text/plain body":
        col.text = True
    return col


async def restore(run: Run, col: Column) -> None:
    """After a cell: olga holds the lease again, nobody asks, the column's identity is signed in."""
    if col.name == "expired session":
        return
    await run.ensure_holder()
    if col.name in IDENTITY:
        if not await signed_in(run, col):
            col.creds = await run.client.login(IDENTITY[col.name])
    elif col.creds is not None:
        col.creds = run.holder


async def send_http(run: Run, row: Row, col: Column) -> str:
    if col.text and row.method == "GET":
        return "—"
    body = row.body
    if row.target == "/api/acquisition" and row.method == "PUT":
        body = {"rate_hz": 40, "channels": (await run.get("/api/acquisition"))["channels"]}
    kw: dict[str, Any] = {"origin": col.origin, "host": col.host,
                          "headers": {"Accept": row.accept} if row.accept else None}
    if col.text:
        kw.update(data=json.dumps(body if body is not None else {}), content_type="text/plain")
    else:
        kw.update(json_body=body)
    if row.kind == "stream":
        return str(await run.client.status_only(row.method, row.target, col.creds, **kw))
    status, _, _ = await run.client.request(row.method, row.target, col.creds, **kw)
    return str(status)


async def send_ws(run: Run, row: Row, col: Column) -> str:
    if col.text:
        return "—"
    attr = "video" if row.socket == "/ws/video" else "ws"
    if row.kind == "upgrade":
        sock = await run.client.ws(col.creds, origin=col.origin, host=col.host, path=row.socket)
        setattr(col, attr, sock)
        return str(sock) if isinstance(sock, int) else "101"
    sock = getattr(col, attr)
    if isinstance(sock, int):
        return f"({sock})"
    if row.target == "ack":
        return await video_ack(sock)
    if row.target == "heartbeat":  # no ack: an error comes back before the pong, or nothing does
        return await heartbeat_then_ping(sock)
    reply = await Client.ws_call(sock, row.target, **(row.body or {}))
    return "ok" if reply["type"] in ("ack", "pong") else str(WS_STATUS.get(reply["error"]["code"],
                                                                             reply["error"]["code"]))


async def heartbeat_then_ping(ws: aiohttp.ClientWebSocketResponse) -> str:
    await ws.send_json({"type": "heartbeat", "id": "hb"})
    await ws.send_json({"type": "ping", "id": "after-hb", "t": 1.0})
    async with asyncio.timeout(10):
        while True:
            msg = json.loads((await ws.receive()).data)
            if msg.get("type") == "error" and msg.get("id") == "hb":
                return str(WS_STATUS.get(msg["error"]["code"], msg["error"]["code"]))
            if msg.get("type") == "pong" and msg.get("id") == "after-hb":
                return "ok"


async def video_ack(ws: aiohttp.ClientWebSocketResponse) -> str:
    """Take a frame, ack it, and see the next one come (the credit flow of /ws/video)."""
    async def frame() -> int:
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                n = int.from_bytes(msg.data[:4], "big")
                return json.loads(msg.data[4:4 + n])["seq"]
            if msg.type != aiohttp.WSMsgType.TEXT:
                return -1

    async with asyncio.timeout(20):
        seq = await frame()
        if seq < 0:
            return "closed"
        await ws.send_json({"type": "ack", "seq": seq})
        return "ok" if await frame() > seq else "closed"


async def run_cell(run: Run, row: Row, col: Column, prepare: bool = True) -> str:
    if prepare and row.prep is not None:
        await row.prep(run, col)
    before = await row.observe(run, col) if row.observe is not None else None
    if row.kind in ("http", "stream"):
        got = await send_http(run, row, col)
    else:
        got = await send_ws(run, row, col)
    if row.observe is not None and got != "—":
        after = await row.observe(run, col)
        moved = row.moved(before, after)
        assert moved == (got in ALLOWED) or got in ALLOWED and not row.always_acts, \
            f"{row.label} / {col.name}: answered {got} but {'took effect' if moved else 'did nothing'} ({before!r} → {after!r})"
    return got


async def run_column(run: Run, col: Column, results: dict[str, list[str]]) -> None:
    for row in ROWS:
        results[row.label].append(await run_cell(run, row, col))
        await restore(run, col)
    for sock in (col.ws, col.video):
        if sock is not None and not isinstance(sock, int):
            await sock.close()
    if col.creds is not None and col.name in IDENTITY:
        await run.client.request("POST", "/api/auth/logout", col.creds, json_body={})


# ---------------------------------------------------------------------- the table
EXPECTED = {  # columns in COLUMNS order
    "GET /":                            ["303", "200", "200", "200", "200", "303", "200", "400", "—"],
    "GET /login":                       ["200", "200", "200", "200", "200", "200", "200", "400", "—"],
    "GET /static (/static/js/main.js)": ["200", "200", "200", "200", "200", "200", "200", "400", "—"],
    "GET /api/state":                   ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/robot":                   ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/robot.svg":               ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/events":                  ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/acquisition":             ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/calibration":             ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/telemetry":               ["401", "403", "403", "403", "200", "401", "403", "400", "—"],
    "GET /api/video":                   ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/video/snapshot.jpg":      ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /video.mjpeg":                 ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/lease":                   ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/auth/me":                 ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "GET /api/users":                   ["401", "403", "403", "403", "200", "401", "403", "400", "—"],
    "POST /api/start":                  ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/speed":                  ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/heartbeat":              ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/stop":                   ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/estop":                  ["401", "200", "200", "200", "200", "401", "403", "400", "200"],
    "POST /api/reset":                  ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/heading":                ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/calibration/magnetometer": ["401", "403", "403", "403", "409", "401", "403", "400", "415"],
    "POST /api/calibration/uwb":        ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "PUT /api/acquisition":             ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "PUT /api/video":                   ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "POST /api/debug/block":            ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "POST /api/debug/driver":           ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "POST /api/users":                  ["401", "403", "403", "403", "201", "401", "403", "400", "415"],
    "PUT /api/users/{name}":            ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "DELETE /api/users/{name}":         ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "POST /api/lease/take":             ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/lease/request":          ["401", "403", "200", "200", "200", "401", "403", "400", "415"],
    "POST /api/lease/handover":         ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/lease/release":          ["401", "403", "200", "200", "200", "401", "403", "400", "415"],
    "POST /api/auth/login":             ["200", "200", "200", "200", "200", "200", "403", "400", "415"],
    "POST /api/auth/reauth":            ["401", "200", "200", "200", "200", "401", "403", "400", "415"],
    "GET /ws/telemetry (upgrade)":      ["401", "101", "101", "101", "101", "401", "403", "400", "—"],
    "ws `ping`":                        ["(401)", "ok", "ok", "ok", "ok", "(401)", "(403)", "(400)", "—"],
    "ws `start`":                       ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `speed`":                       ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `heartbeat`":                   ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `stop`":                        ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `estop`":                       ["(401)", "ok", "ok", "ok", "ok", "(401)", "(403)", "(400)", "—"],
    "ws `reset`":                       ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "GET /ws/video (upgrade)":          ["401", "101", "101", "101", "101", "401", "403", "400", "—"],
    "ws `ack` (/ws/video)":             ["(401)", "ok", "ok", "ok", "ok", "(401)", "(403)", "(400)", "—"],
    "POST /api/auth/password":          ["401", "200", "200", "200", "200", "401", "403", "400", "415"],
    "POST /api/auth/logout":            ["401", "200", "200", "200", "200", "401", "403", "400", "415"],
}


def markdown(results: dict[str, list[str]]) -> str:
    lines = ["| route / message | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {row.label} | " + " | ".join(results[row.label]) + " |" for row in ROWS]
    return "\n".join(lines)


async def expired_column(server_factory, tmp_path: Path, results: dict[str, list[str]]) -> None:
    """The expired-session column, on a server whose sessions end 6 s after login."""
    users = make_users(tmp_path / "users-short.json", USERS)
    srv = server_factory(server_config(tmp_path / "b", users, session_idle_s=6, session_max_s=6))
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        run = Run(srv, Client(srv.url, http))
        olga = await run.client.login("olga")
        assert (await run.client.request("POST", "/api/lease/take", olga, json_body={}))[0] == 200
        async with asyncio.timeout(30):  # max age: asking does not extend it
            while True:
                if (await run.client.request("GET", "/api/auth/me", olga))[0] == 401:
                    break
                await asyncio.sleep(0.2)
        col = Column("expired session", olga)
        for row in ROWS:  # no set-up: nobody here can drive (the robot stays idle)
            results[row.label].append(await run_cell(run, row, col, prepare=False))


async def test_refusal_table(server_factory, tmp_path, capsys) -> None:
    users = make_users(tmp_path / "users.json", USERS)
    srv = server_factory(server_config(tmp_path, users))
    results: dict[str, list[str]] = {row.label: [] for row in ROWS}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        run = Run(srv, Client(srv.url, http))
        for name in COLUMNS:
            if name == "expired session":
                await expired_column(server_factory, tmp_path, results)
                continue
            col = await column_creds(run, name)
            await run_column(run, col, results)
    table = markdown(results)
    with capsys.disabled():
        print("\n\nRefusal table of the real server (status per request; ws: 'ok' = acknowledged, "
              "(N) = upgrade refused with N)\n")
        print(table)
    mismatches = [f"{row.label} / {col}: expected {exp}, got {got}"
                  for row in ROWS for col, exp, got in zip(COLUMNS, EXPECTED[row.label], results[row.label])
                  if exp != got]
    assert not mismatches, "\n".join(mismatches)
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"{DOC} lacks the refusal-table markers"
    block = text[text.index(START) + len(START):text.index(END)].strip()
    if os.environ.get("TELEOP_WRITE_DOCS") == "1" and block != table:
        DOC.write_text(text[:text.index(START) + len(START)] + "\n" + table + "\n" + text[text.index(END):],
                       encoding="utf-8")
        block = table
    assert block == table, "docs/security.md has a different refusal table: run with TELEOP_WRITE_DOCS=1"
