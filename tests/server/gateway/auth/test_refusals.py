"""The refusal table: each route and websocket message × who asks and how → the status.

Every cell is a real request over a real socket to the stand-in gateway with the real
trust layer (``conftest.py``). A cell that is refused must leave the robot untouched; a
cell that is allowed must reach the handler. The table is printed (``pytest -s``) and must
match the one in ``docs/security.md`` (``TELEOP_WRITE_DOCS=1`` rewrites it there).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.server.gateway.auth.conftest import FOREIGN_HOST, FOREIGN_ORIGIN, Creds, Gateway

DOC = Path(__file__).resolve().parents[4] / "docs" / "security.md"
START, END = "<!-- refusal-table:start -->", "<!-- refusal-table:end -->"

COLUMNS = ["no credentials", "viewer", "operator without lease", "operator with lease", "admin",
           "expired session", "foreign Origin", "foreign Host", "text/plain body"]

# (label, kind, method, path or message type, JSON body)
ROWS = [
    ("GET /api/state", "http", "GET", "/api/state", None),
    ("POST /api/start", "http", "POST", "/api/start", {}),
    ("POST /api/speed", "http", "POST", "/api/speed", {"linear": 0.1, "angular": 0.0}),
    ("POST /api/heartbeat", "http", "POST", "/api/heartbeat", {}),
    ("POST /api/reset", "http", "POST", "/api/reset", {}),
    ("POST /api/estop", "http", "POST", "/api/estop", {"reason": "test"}),
    ("PUT /api/acquisition", "http", "PUT", "/api/acquisition", {"rate_hz": 10, "channels": []}),
    ("POST /api/users", "http", "POST", "/api/users", {"name": "newbie", "role": "viewer",
                                                       "password": "another long one"}),
    ("POST /api/lease/take", "http", "POST", "/api/lease/take", {}),
    ("GET /ws/telemetry (upgrade)", "upgrade", "GET", "/ws/telemetry", None),
    ("ws `ping`", "ws", None, "ping", {"t": 1.0}),
    ("ws `start`", "ws", None, "start", {}),
    ("ws `speed`", "ws", None, "speed", {"linear": 0.1, "angular": 0.0}),
    ("ws `heartbeat`", "ws", None, "heartbeat", {}),
    ("ws `estop`", "ws", None, "estop", {}),
]

EXPECTED = {
    "GET /api/state":             ["401", "200", "200", "200", "200", "401", "200", "400", "—"],
    "POST /api/start":            ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/speed":            ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/heartbeat":        ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/reset":            ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "POST /api/estop":            ["401", "200", "200", "200", "200", "401", "403", "400", "200"],
    "PUT /api/acquisition":       ["401", "403", "403", "403", "200", "401", "403", "400", "415"],
    "POST /api/users":            ["401", "403", "403", "403", "201", "401", "403", "400", "415"],
    "POST /api/lease/take":       ["401", "403", "409", "200", "409", "401", "403", "400", "415"],
    "GET /ws/telemetry (upgrade)": ["401", "101", "101", "101", "101", "401", "403", "400", "—"],
    "ws `ping`":                  ["(401)", "ok", "ok", "ok", "ok", "(401)", "(403)", "(400)", "—"],
    "ws `start`":                 ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `speed`":                 ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `heartbeat`":             ["(401)", "403", "409", "ok", "409", "(401)", "(403)", "(400)", "—"],
    "ws `estop`":                 ["(401)", "ok", "ok", "ok", "ok", "(401)", "(403)", "(400)", "—"],
}

# Cells whose success does not reach a robot handler (auth's own routes).
NO_ROBOT_ACTION = {"POST /api/users", "POST /api/lease/take", "GET /api/state", "GET /ws/telemetry (upgrade)",
                   "ws `ping`"}


async def column_setup(gw: Gateway, column: str) -> tuple[Creds | None, dict]:
    """Log in who the column needs; olga (an operator) holds the lease in every column."""
    olga = await gw.login("olga")
    status, body, _ = await gw.request("POST", "/api/lease/take", olga)
    assert status == 200, body
    how: dict = {}
    if column == "no credentials":
        return None, how
    if column == "viewer":
        return await gw.login("vera"), how
    if column == "operator without lease":
        return await gw.login("otto"), how
    if column == "admin":
        return await gw.login("ada"), how
    if column == "expired session":
        gw.clock.advance(gw.svc.cfg.session_idle_s + 1)
        return olga, how
    if column == "foreign Origin":
        how["origin"] = FOREIGN_ORIGIN
    elif column == "foreign Host":
        how["host"] = FOREIGN_HOST
    elif column == "text/plain body":
        how["text"] = True
    return olga, how


async def run_cell(gw: Gateway, row: tuple, creds: Creds | None, how: dict, ws_cache: dict) -> str:
    label, kind, method, target, body = row
    text = how.get("text")
    if kind == "http":
        if text and method == "GET":
            return "—"
        kw: dict = {"origin": how.get("origin", "same"), "host": how.get("host")}
        if text:
            kw.update(data="linear=0.5&angular=0", content_type="text/plain")
        else:
            kw.update(json_body=body)
        status, _, _ = await gw.request(method, target, creds, **kw)
        return str(status)
    if text:
        return "—"
    if "ws" not in ws_cache:
        ws_cache["ws"] = await gw.ws(creds, origin=how.get("origin", "same"), host=how.get("host"))
    ws = ws_cache["ws"]
    if kind == "upgrade":
        return str(ws) if isinstance(ws, int) else "101"
    if isinstance(ws, int):
        return f"({ws})"
    reply = await gw.ws_call(ws, target, **body)
    return "ok" if reply["type"] == "ack" else str(reply["status"])


def markdown(results: dict[str, list[str]]) -> str:
    lines = ["| route / message | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(results[label]) + " |" for label, *_ in ROWS]
    return "\n".join(lines)


async def test_refusal_table(start_gateway, users_file, capsys) -> None:
    results: dict[str, list[str]] = {label: [] for label, *_ in ROWS}
    for column in COLUMNS:
        gw = await start_gateway(users_file)  # a fresh gateway per column: its own lease and clock state
        creds, how = await column_setup(gw, column)
        ws_cache: dict = {}
        for row in ROWS:
            before = len(gw.robot.actions)
            got = await run_cell(gw, row, creds, how, ws_cache)
            results[row[0]].append(got)
            moved = len(gw.robot.actions) - before
            allowed = got in ("200", "201", "ok")
            if row[0] not in NO_ROBOT_ACTION:
                assert moved == (1 if allowed else 0), f"{row[0]} / {column}: {got} but {moved} action(s)"
            else:
                assert moved == 0, f"{row[0]} / {column} reached the robot"
        ws = ws_cache.get("ws")
        if ws is not None and not isinstance(ws, int):
            await ws.close()
    table = markdown(results)
    with capsys.disabled():
        print("\n\nRefusal table (status per request; ws: 'ok' = ack, (N) = upgrade refused with N)\n")
        print(table)
    mismatches = [f"{label} / {col}: expected {exp}, got {got}"
                  for label, *_ in ROWS
                  for col, exp, got in zip(COLUMNS, EXPECTED[label], results[label]) if exp != got]
    assert not mismatches, "\n".join(mismatches)
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"{DOC} lacks the refusal-table markers"
    block = text[text.index(START) + len(START):text.index(END)].strip()
    if os.environ.get("TELEOP_WRITE_DOCS") == "1" and block != table:
        DOC.write_text(text[:text.index(START) + len(START)] + "\n" + table + "\n" + text[text.index(END):],
                       encoding="utf-8")
        block = table
    assert block == table, "docs/security.md has a different refusal table: run with TELEOP_WRITE_DOCS=1"


@pytest.mark.parametrize("column", ["operator without lease", "admin"])
async def test_lease_refusal_names_the_holder(start_gateway, users_file, column) -> None:
    gw = await start_gateway(users_file)
    creds, _ = await column_setup(gw, column)
    status, body, _ = await gw.request("POST", "/api/speed", creds, json_body={"linear": 0.1, "angular": 0})
    assert status == 409
    assert body["error"]["code"] == "lease_held"
    assert "olga" in body["error"]["message"]
    assert body["error"]["details"]["holder"]["user"] == "olga"
