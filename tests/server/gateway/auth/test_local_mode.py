"""Local mode (no user): loopback clients are admins, the cross-site defences stay; bind refusal."""

from __future__ import annotations

import pytest

from server.gateway.auth import BindRefused, check_bind
from server.gateway.auth.users import UserStore
from tests.server.gateway.auth.conftest import CHEAP_HASHER, FOREIGN_HOST, FOREIGN_ORIGIN, PASSWORD

SPEED = {"linear": 0.1, "angular": 0.0}


async def test_loopback_client_is_the_local_admin_without_login(start_gateway) -> None:
    gw = await start_gateway()  # no users file
    assert gw.svc.local_mode
    status, me, _ = await gw.request("GET", "/api/auth/me")
    assert status == 200 and (me["user"], me["role"], me["via"], me["local_mode"]) == ("local", "admin", "local",
                                                                                         True)
    # a curl user: no Origin, no token; no lease in local mode
    assert (await gw.request("POST", "/api/start", json_body={}, origin=None))[0] == 200
    assert (await gw.request("POST", "/api/speed", json_body=SPEED))[0] == 200
    assert (await gw.request("POST", "/api/start", origin=None))[0] == 200  # no body at all
    assert (await gw.request("PUT", "/api/acquisition", json_body={"rate_hz": 10}))[0] == 200  # no re-auth
    status, body, _ = await gw.request("POST", "/api/lease/take", json_body={})
    assert status == 409 and body["error"]["code"] == "local_mode"
    ws = await gw.ws(origin=None)
    assert (await gw.ws_call(ws, "start"))["type"] == "ack"
    await ws.close()


async def test_a_foreign_page_still_cannot_drive_in_local_mode(start_gateway) -> None:
    """The issue's reproductions: the operator's own browser, a foreign page, no login needed."""
    gw = await start_gateway()
    cases = [
        dict(origin=FOREIGN_ORIGIN),                                           # fetch, no body
        dict(origin=FOREIGN_ORIGIN, data="linear=0.5", content_type="text/plain"),
        dict(origin=FOREIGN_ORIGIN, data="a=1", content_type="application/x-www-form-urlencoded"),
        dict(origin="null"),                                                   # sandboxed iframe
        dict(origin=None, host=FOREIGN_HOST),                                  # DNS rebinding
        dict(origin=None, data="{\"linear\": 0.5, \"angular\": 0}", content_type="text/plain"),
        dict(origin=None, headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}),
    ]
    for path in ("/api/start", "/api/speed", "/api/heartbeat", "/api/reset"):
        for case in cases:
            status, body, _ = await gw.request("POST", path, **case)
            assert status in (400, 403, 415), (path, case, status, body)
    assert await gw.ws(origin=FOREIGN_ORIGIN) == 403
    assert await gw.ws(host=FOREIGN_HOST) == 400
    assert gw.robot.actions == []


async def test_requests_through_a_proxy_are_not_local(start_gateway) -> None:
    gw = await start_gateway()
    status, body, _ = await gw.request("GET", "/api/state", headers={"X-Forwarded-For": "203.0.113.9"})
    assert status == 401 and "proxy" in body["error"]["message"]
    status, _, _ = await gw.request("GET", "/api/state", headers={"Forwarded": "for=203.0.113.9"})
    assert status == 401


async def test_first_user_turns_local_mode_off(start_gateway, tmp_path) -> None:
    path = tmp_path / "users.json"
    gw = await start_gateway(path)
    assert gw.svc.local_mode
    status, body, _ = await gw.request("POST", "/api/users", json_body={"name": "ada", "role": "admin",
                                                                         "password": PASSWORD})
    assert status == 201, body
    assert not gw.svc.local_mode
    assert (await gw.request("GET", "/api/state"))[0] == 401  # now everyone logs in
    await gw.login("ada")


async def test_cli_added_user_is_noticed(start_gateway, tmp_path) -> None:
    path = tmp_path / "users.json"
    gw = await start_gateway(path)
    UserStore(path, hasher=CHEAP_HASHER).add("ada", "admin", PASSWORD)
    await gw.svc.poll_users()
    assert not gw.svc.local_mode
    assert (await gw.request("GET", "/api/state"))[0] == 401


async def test_corrupt_users_file_at_run_time_keeps_the_previous_users(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    vera = await gw.login("vera")
    users_file.write_text("{ not json")
    await gw.svc.poll_users()
    assert not gw.svc.local_mode  # never falls open
    assert (await gw.request("GET", "/api/state", vera))[0] == 200


async def test_corrupt_users_file_at_start_up_is_an_error(start_gateway, tmp_path) -> None:
    path = tmp_path / "users.json"
    path.write_text('{"version": 1, "users": [{"name": "x", "role": "emperor", "password_hash": "h"}]}')
    with pytest.raises(ValueError, match="emperor|role"):
        await start_gateway(path)


@pytest.mark.parametrize("host, users, refused", [
    ("127.0.0.1", False, False),
    ("localhost", False, False),
    ("::1", False, False),
    ("127.0.0.2", False, False),
    ("0.0.0.0", False, True),
    ("::", False, True),
    ("", False, True),
    ("192.168.1.20", False, True),
    ("robot.lan", False, True),
    ("0.0.0.0", True, False),
    ("robot.lan", True, False),
])
def test_bind_refused_beyond_loopback_without_users(host, users, refused) -> None:
    if refused:
        with pytest.raises(BindRefused) as err:
            check_bind(host, users)
        assert "python -m server users add NAME --role admin" in str(err.value)
    else:
        check_bind(host, users)
