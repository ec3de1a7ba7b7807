"""Message budgets are per login session, not per address alone: two users behind one NAT or reverse proxy share an
address, and a viewer who spends its budget (its refused messages still cost) must not starve the lease holder's
commands. Real server, logged in, both users on 127.0.0.1."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.server.gateway.auth.client import Client, make_users

RATE = {"telemetry": {"command_rate_hz": 5, "command_burst": 10}, "safety": {"command_timeout_s": 30.0}}


async def test_a_viewer_spending_its_budget_does_not_starve_the_operator_at_the_same_address(server_factory,
                                                                                             tmp_path) -> None:
    users = make_users(tmp_path / "users.json", {"olga": "operator", "vera": "viewer", "ada": "admin"})
    srv = server_factory({"auth": {"users_file": str(users)}, **RATE})
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        client = Client(srv.url, http)
        olga, vera, ada = await client.login("olga"), await client.login("vera"), await client.login("ada")
        assert (await client.request("POST", "/api/lease/take", olga, json_body={}))[0] == 200
        ows, vws = await client.ws(olga), await client.ws(vera)
        assert (await Client.ws_call(ows, "start"))["type"] == "ack"
        for _ in range(15):  # 10 in the burst, then 5 refused: spent, and in debt (not yet flooding: no close)
            await vws.send_json({"type": "ping"})
        stats = {}
        for _ in range(200):  # every one of vera's messages read by the server
            stats = (await client.request("GET", "/api/telemetry", ada))[1]
            refused = [c["refused"] for c in stats["per_client"]]
            if sum(refused) >= 5:
                break
            await asyncio.sleep(0.02)
        assert sum(c["refused"] for c in stats["per_client"]) >= 5, stats["per_client"]
        reply = await Client.ws_call(ows, "speed", linear=0.1, angular=0.0)
        assert reply["type"] == "ack", reply  # olga's own budget: not the one vera spent
        assert not vws.closed and not ows.closed
        state = (await client.request("GET", "/api/state", olga))[1]
        assert state["setpoint"]["linear"] == 0.1, state["setpoint"]
        await ows.close()
        await vws.close()
