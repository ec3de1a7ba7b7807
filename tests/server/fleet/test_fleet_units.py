"""The fleet link's pieces in process: a flood of queries is refused at once beyond the in-flight cap (memory stays
bounded), the summary of a snapshot, the signatures."""

from __future__ import annotations

import json

from aiohttp import web

from server.gateway.fleet.config import FleetConfig
from server.gateway.fleet.robot import MAX_IN_FLIGHT, FleetRobot
from tests.server.fleet.fleetkit import hub_keys


class FakeQuery:
    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.dropped = False

    def reply(self, key, payload: bytes) -> None:
        self.replies.append(payload)

    def drop(self) -> None:
        self.dropped = True


def test_a_flood_beyond_the_in_flight_cap_is_refused_not_queued(tmp_path) -> None:
    _, public = hub_keys(tmp_path)
    robot = FleetRobot(web.Application(), FleetConfig(enabled=True, router=["tcp/127.0.0.1:7447"],
                                                      hub_public_key=str(public)))
    robot.tasks = {object() for _ in range(MAX_IN_FLIGHT)}  # (stand-ins for requests being answered)
    q = FakeQuery()
    robot.spawn(q)  # no event loop needed: refused before any task is made
    assert q.dropped and json.loads(q.replies[0])["error"]["code"] == "busy"
    assert len(robot.tasks) == MAX_IN_FLIGHT and robot.counts["refused"] == 1


def test_every_hub_route_has_a_permission_rule(tmp_path) -> None:
    """A route without a rule would answer 403 to everyone (the dashboard's relayed routes included)."""
    from server.config import HUB_TABLES, load_config
    from server.gateway.auth import AUTH_KEY
    from server.hub.app import create_hub_app

    private, _public = hub_keys(tmp_path)
    path = tmp_path / "hub.toml"
    path.write_text(f'[hub]\nrouter = ["tcp/127.0.0.1:7447"]\nkey_file = "{private}"\nevents_dir = ""\n'
                    f'[auth]\nusers_file = "{tmp_path / "users.json"}"\n')
    app = create_hub_app(load_config(str(path), tables=HUB_TABLES), bound_host="127.0.0.1")
    assert app[AUTH_KEY].permissions.missing(app) == []
    assert {"/fleet/{id}/", "/fleet/{id}/api/{tail}", "/fleet/{id}/ws/telemetry", "/api/fleet/{id}/preview.jpg",
            "/api/fleet/{id}/events/files/{name}"} <= {r.resource.canonical for r in app.router.routes()}


def test_a_flood_on_a_robot_socket_of_the_hub_never_refuses_the_e_stop() -> None:
    """Over MAX_PENDING commands in flight the hub refuses more at once (bounded memory), but never an e-stop
    (the old check refused it too)."""
    import asyncio

    from server.hub.app import MAX_PENDING, Outbox, refuse_flood

    async def go() -> None:
        out, pending = Outbox(), {asyncio.get_running_loop().create_future() for _ in range(MAX_PENDING + 1)}
        assert refuse_flood(pending, {"type": "speed", "id": 1}, out)
        assert not refuse_flood(pending, {"type": "estop", "id": 2}, out)
        assert [m["error"]["code"] for m in out.pending.values()] == ["rate_limited"]
        assert not refuse_flood(set(), {"type": "speed", "id": 3}, Outbox())

    asyncio.run(go())
