"""The command registry (server/gateway/commands.py, issue 19 §1) against the real gateway app, in process on a
fake runtime: every command exists on every transport, in the permission table and the docs; every transport's
command takes the same steps in the same order (a fake transport cannot skip one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.errors import ApiError
from server.gateway.auth import AUTH_KEY
from server.gateway.auth.service import Principal
from server.gateway.auth.permissions import Role
from server.gateway.commands import DISPATCHER, REGISTRY
from server.gateway.hooks import HOOKS
from server.gateway.keys import BUCKETS
from server.gateway.ratelimit import budget_key
from server.gateway.registry import ENVELOPE, Envelope, Transport
from server.gateway.replay import ROBOT_ROUTES
from tests.server.gateway.fake_runtime import gateway

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]

#: POST routes of the real app that are no command (auth, lease, recordings, replay playback, debug): a robot
#: command added beside the registry would show up here and fail the test
NOT_COMMANDS = {"/api/auth/login", "/api/auth/logout", "/api/auth/reauth", "/api/lease/take", "/api/lease/release",
                "/api/lease/request", "/api/lease/grant", "/api/lease/deny", "/api/lease/handover", "/api/recordings/start",
                "/api/recordings/stop", "/api/debug/block", "/api/debug/driver", "/api/debug/vision", "/api/users",
                "/api/users/{name}/password", "/api/auth/password", "/api/users/{name}/revoke"}


async def test_every_command_has_its_route_its_websocket_type_and_its_rules(tmp_path) -> None:
    async with gateway(tmp_path, tables={"debug": {"routes": True}}) as (client, _rt):
        app = client.server.app
        posts = {r.resource.canonical for r in app.router.routes() if r.method == "POST" and r.resource}
        table = app[AUTH_KEY].permissions
        for c in REGISTRY:
            assert c.path in posts, c.name
            assert table.rule("POST", c.path) is c.rule, c.name
            assert table.ws_rule("/ws/telemetry", c.name) is c.rule, c.name
            assert app[DISPATCHER].resolve(c.name) is c
        assert sorted(posts - {c.path for c in REGISTRY} - NOT_COMMANDS) == []
        # the websocket dispatches every command of the registry (none is unknown to it)
        async with client.ws_connect("/ws/telemetry") as ws:
            await ws.receive_json()
            for i, c in enumerate(REGISTRY):
                await ws.send_json({"type": c.name, "id": i, "junk_field": 1})
                while (m := await ws.receive_json())["type"] not in ("ack", "error") or m.get("id") != i:
                    pass
                assert m["type"] == "ack" if c.estop else m["error"]["code"] != "unknown_command", (c.name, m)


def test_replay_refuses_every_command_but_the_e_stop() -> None:
    for c in REGISTRY:  # as the middleware matches: the request's path by prefix (a route's {name} is any name)
        assert c.path.replace("{name}", "heading_turns").startswith(ROBOT_ROUTES) is (not c.estop), c.name
    assert "/api/joints" in ROBOT_ROUTES and "/api/trajectory" in ROBOT_ROUTES and "/api/go_to_marker" in ROBOT_ROUTES


def test_the_api_doc_has_the_registrys_command_table() -> None:
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    start, end = "<!-- command-table:start -->", "<!-- command-table:end -->"
    block = text[text.index(start) + len(start):text.index(end)].strip()
    assert block == REGISTRY.to_markdown(), "docs/api.md: paste REGISTRY.to_markdown() between the markers"


def test_the_envelope_is_declared_once() -> None:
    assert ENVELOPE == ("type", "id", "seq", "sent_t") == tuple(f for f in Envelope.__struct_fields__)


async def test_get_robot_lists_the_commands_the_registry_dispatches(tmp_path) -> None:
    async with gateway(tmp_path, "scara-sim") as (client, _rt):
        robot = await (await client.get("/api/robot")).json()
        assert robot["commands"] == ["joints", "jog", "tool", "tool_jog"]


# ---------------------------------------------------------------------- one path, the same steps
FAKE = Transport("fake", message=True, limited=True)


def principal(app, user: str, role: Role, *, lease: bool) -> Principal:
    svc = app[AUTH_KEY]
    _, session = svc.sessions.create(user, via="bearer", remote="10.9.8.7")
    if lease:
        svc.lease.take(session.id, user)
    return Principal(user, role, "bearer", "10.9.8.7", external=True, session=session)


@pytest.fixture
def logged_in(tmp_path):
    from tests.server.gateway.auth.client import CHEAP_HASHER, make_users

    return lambda: gateway(tmp_path, users=make_users, hasher=CHEAP_HASHER)


async def test_a_new_transport_takes_every_step_in_order(logged_in) -> None:
    async with logged_in() as (client, rt):
        app = client.server.app
        d = app[DISPATCHER]
        records: list[dict] = []
        app[HOOKS].on_command.append(records.append)
        holder = principal(app, "otto", Role.OPERATOR, lease=True)
        other = principal(app, "olga", Role.OPERATOR, lease=False)

        # 1 → 2: a bad body from a non-holder is refused for the lease (nothing of the body is said), not recorded
        with pytest.raises(ApiError) as err:
            await d.dispatch(other, "speed", {"linear": "fast", "angular": 0}, FAKE)
        assert err.value.code == "lease_held" and records == [] and "setpoint" not in rt.methods()
        # 1: the holder's bad body is refused for the body, recorded as refused, never reaches the runtime
        with pytest.raises(ApiError) as err:
            await d.dispatch(holder, "speed", {"linear": "fast", "angular": 0}, FAKE)
        assert err.value.code == "wrong_type" and records[-1]["accepted"] is False and "setpoint" not in rt.methods()
        # 3: out of budget: refused before the record and the call
        b = app[BUCKETS].get(budget_key(holder, holder.remote))  # the holder's session's budget
        n = len(records)
        while b.take():
            pass
        with pytest.raises(ApiError) as err:
            await d.dispatch(holder, "speed", {"linear": 0.1, "angular": 0}, FAKE)
        assert err.value.code == "rate_limited" and len(records) == n and "setpoint" not in rt.methods()
        # a transport cannot claim its budget was spent: only a Charge of the dispatcher's pays
        with pytest.raises(ApiError):
            await d.dispatch(holder, "speed", {"linear": 0.1, "angular": 0}, FAKE, charge=True)
        b.tokens, b.debt = b.burst, 0.0
        # 4, 5: recorded with its outcome, the runtime called with the transport as the source and the principal
        result = await d.dispatch(holder, "speed", {"type": "speed", "id": 1, "linear": 0.1, "angular": 0}, FAKE)
        assert result["state"] == "running"
        method, params, who = rt.calls[-1]
        assert method == "setpoint" and params["source"] == "fake" and who == f"otto/{holder.session.id}"
        assert records[-1]["command"] == "speed" and records[-1]["accepted"] and records[-1]["source"] == "fake"


async def test_the_datachannel_name_is_a_transport(tmp_path) -> None:
    async with gateway(tmp_path) as (client, rt):
        d = client.server.app[DISPATCHER]
        local = Principal("local", Role.ADMIN, "local", "127.0.0.1", external=False)
        await d.dispatch(local, "start", {"type": "start"}, "datachannel")
        assert rt.calls[-1] == ("start", {}, "local")
        reply = await d.dispatch(local, "estop", {"type": "estop", "reason": "dc"}, "datachannel")
        assert reply["latch"] == "confirmed" and rt.methods()[-2:] == ["estop", "estop_reason"]


@pytest.mark.parametrize("name", [c.name for c in REGISTRY if not c.estop])
async def test_every_command_is_recorded_over_http(tmp_path, name) -> None:
    """Issue 19: trajectory runs, their cancels and programs never reached the recording."""
    bodies = {"speed": {"linear": 0.1, "angular": 0.0}, "heading": {"heading_deg": 90},
              "calibrate_uwb": {"pairs": [[1.0, 1.0]]}, "trajectory": {"series": "circle"},
              "program": {"series": "scara_demo"}, "mission": {"waypoints": [{"x_m": 1.0, "y_m": 1.0}]}}
    config = "scara-sim" if name in ("joints", "jog", "tool", "tool_jog", "program") else \
        "stewart-sim" if name == "pose" else "rover-sim"
    async with gateway(tmp_path, config) as (client, rt):
        app = client.server.app
        records: list[dict] = []
        app[HOOKS].on_command.append(records.append)
        rt.results["trajectory"] = {"run": {"phase": "run"}}
        rt.results["program"] = {"text": "x", "lines": 1, "waypoints": 2, "axes": []}
        c = REGISTRY.get(name)
        path = c.path.replace("{name}", "heading_turns")
        r = await client.post(path + ("?format=json" if name == "program" else ""), json=bodies.get(name, {}))
        if name in ("joints", "tool", "pose"):
            assert r.status == 422  # required fields: refused, and recorded as refused
            assert records and records[-1]["accepted"] is False
            return
        assert r.status == 200, await r.text()
        if c.record == "none":
            assert records == []
        else:
            assert [x["command"] for x in records] == [name] and records[0]["accepted"] is True
