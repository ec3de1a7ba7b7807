"""Sessions end when they should: idle, absolute age, logout, password change (API and CLI), removal."""

from __future__ import annotations

import asyncio
import io

import aiohttp

from server.gateway.auth import cli
from tests.server.gateway.auth.conftest import PASSWORD, Gateway

SPEED = {"linear": 0.1, "angular": 0.0}


async def state(gw: Gateway, creds) -> int:
    status, _, _ = await gw.request("GET", "/api/state", creds)
    return status


async def test_idle_session_ends_and_use_keeps_it(start_gateway, users_file, clock) -> None:
    gw = await start_gateway(users_file, session_idle_s=60, session_max_s=3600)
    creds = await gw.login("vera")
    for _ in range(5):  # used every 50 s: alive after 250 s
        clock.advance(50)
        assert await state(gw, creds) == 200
    clock.advance(60)
    status, body, resp = await gw.request("GET", "/api/state", creds)
    assert status == 401 and body["error"]["code"] == "unauthenticated"
    assert "expired" in body["error"]["message"]
    assert "teleop_session" in resp.cookies and resp.cookies["teleop_session"].value == ""  # cleared


async def test_session_ends_at_max_age_however_busy(start_gateway, users_file, clock) -> None:
    gw = await start_gateway(users_file, session_idle_s=60, session_max_s=300)
    creds = await gw.login("vera")
    for _ in range(5):
        clock.advance(59)
        assert await state(gw, creds) == 200
    clock.advance(10)  # 305 s after login
    assert await state(gw, creds) == 401


async def test_expired_holder_frees_the_lease_without_a_request(start_gateway, users_file, clock) -> None:
    gw = await start_gateway(users_file, session_idle_s=60, session_max_s=3600)
    olga = await gw.login("olga")
    assert (await gw.request("POST", "/api/lease/take", olga))[0] == 200
    clock.advance(61)
    gw.svc.sessions.sweep()  # what the housekeeping task does every second
    assert gw.svc.lease.holder is None


async def test_logout_ends_the_session(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    creds = await gw.login("vera")
    status, _, resp = await gw.request("POST", "/api/auth/logout", creds)
    assert status == 200 and resp.cookies["teleop_session"].value == ""
    assert await state(gw, creds) == 401


async def test_password_change_by_admin_revokes_sessions_and_closes_sockets(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    otto1, otto2, vera = await gw.login("otto"), await gw.login("otto", bearer=True), await gw.login("vera")
    ws = await gw.ws(otto1)
    assert not isinstance(ws, int)
    ada = await gw.login("ada")
    status, body, _ = await gw.request("PUT", "/api/users/otto", ada, json_body={"password": "a brand new one"})
    assert status == 200, body
    assert await state(gw, otto1) == 401
    assert await state(gw, otto2) == 401
    assert await state(gw, vera) == 200
    msg = await asyncio.wait_for(ws.receive(), 10)
    assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 4401, msg
    await gw.login("otto", "a brand new one")


async def test_own_password_change_needs_the_current_one_and_revokes(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    vera = await gw.login("vera")
    status, body, _ = await gw.request("POST", "/api/auth/password", vera,
                                       json_body={"current": "wrong password", "new": "another long one"})
    assert status == 401 and body["error"]["code"] == "invalid_credentials"
    status, body, _ = await gw.request("POST", "/api/auth/password", vera,
                                       json_body={"current": PASSWORD, "new": "short"})
    assert status == 422 and "at least 8" in body["error"]["message"]
    assert await state(gw, vera) == 200  # a refused change changes nothing
    status, body, _ = await gw.request("POST", "/api/auth/password", vera,
                                       json_body={"current": PASSWORD, "new": "another long one"})
    assert status == 200 and body["relogin"] is True
    assert await state(gw, vera) == 401
    await gw.login("vera", "another long one")


async def test_password_change_by_the_cli_revokes_sessions(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    otto, vera = await gw.login("otto"), await gw.login("vera")
    rc = await asyncio.to_thread(cli.main, ["users", "--file", str(users_file), "passwd", "otto",
                                            "--password-stdin"], io.StringIO("changed by the cli\n"), io.StringIO())
    assert rc == 0
    await gw.svc.poll_users()  # what the housekeeping task does every users_poll_s
    assert await state(gw, otto) == 401
    assert await state(gw, vera) == 200
    await gw.login("otto", "changed by the cli")


async def test_removed_user_is_out_at_once(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    olga, ada = await gw.login("olga"), await gw.login("ada")
    assert (await gw.request("POST", "/api/lease/take", olga))[0] == 200
    status, _, _ = await gw.request("DELETE", "/api/users/olga", ada)
    assert status == 200
    assert await state(gw, olga) == 401
    assert gw.svc.lease.holder is None


async def test_demoted_holder_loses_the_lease_and_the_role_at_once(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    olga, ada = await gw.login("olga"), await gw.login("ada")
    assert (await gw.request("POST", "/api/lease/take", olga))[0] == 200
    status, _, _ = await gw.request("PUT", "/api/users/olga", ada, json_body={"role": "viewer"})
    assert status == 200
    assert gw.svc.lease.holder is None
    status, body, _ = await gw.request("POST", "/api/start", olga, json_body={})
    assert status == 403 and "viewer" in body["error"]["message"]
    assert await state(gw, olga) == 200  # still logged in: only the role changed


async def test_too_many_sessions_end_the_oldest(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file, max_sessions_per_user=2)
    first = await gw.login("vera")
    await gw.login("vera")
    await gw.login("vera")
    assert await state(gw, first) == 401


async def test_reauth_required_after_reauth_s(start_gateway, users_file, clock) -> None:
    gw = await start_gateway(users_file, reauth_s=300, session_idle_s=1800)
    ada = await gw.login("ada")
    new_user = {"name": "newbie", "role": "viewer", "password": "another long one"}
    clock.advance(301)
    status, body, _ = await gw.request("POST", "/api/users", ada, json_body=new_user)
    assert status == 401 and body["error"]["code"] == "reauth_required"
    assert gw.svc.users.get("newbie") is None
    status, body, _ = await gw.request("POST", "/api/auth/reauth", ada, json_body={"password": "not it at all"})
    assert status == 401
    status, body, _ = await gw.request("POST", "/api/auth/reauth", ada, json_body={"password": PASSWORD})
    assert status == 200
    status, body, _ = await gw.request("POST", "/api/users", ada, json_body=new_user)
    assert status == 201, body
    assert gw.svc.users.get("newbie").role.value == "viewer"



async def test_housekeeping_task_ends_expired_sessions_and_picks_up_cli_changes(start_gateway, users_file,
                                                                                 clock) -> None:
    gw = await start_gateway(users_file, housekeeping_s=0.05, users_poll_s=0.05, session_idle_s=60)
    olga, vera = await gw.login("olga"), await gw.login("vera")
    assert (await gw.request("POST", "/api/lease/take", olga))[0] == 200
    lease_freed, vera_ended = asyncio.Event(), asyncio.Event()
    gw.svc.on_lease_change(lambda change: lease_freed.set() if change.after is None else None)
    gw.svc.sessions.on_end.append(lambda s, why: vera_ended.set() if s.user == "vera" else None)
    clock.advance(30)
    assert await state(gw, vera) == 200  # vera stays active; olga idles on
    clock.advance(31)
    await asyncio.wait_for(lease_freed.wait(), 10)  # no request needed: the task swept olga's session
    assert await state(gw, olga) == 401
    rc = await asyncio.to_thread(cli.main, ["users", "--file", str(users_file), "remove", "vera"],
                                 io.StringIO(), io.StringIO())
    assert rc == 0
    await asyncio.wait_for(vera_ended.wait(), 10)
    assert await state(gw, vera) == 401
