"""Cross-site and header defences: CSRF, Origin, Sec-Fetch-Site, Host, content type, headers, default deny."""

from __future__ import annotations

import asyncio

import aiohttp

import pytest
from aiohttp import web

from server.gateway.auth.headers import CSP
from tests.server.gateway.auth.conftest import FOREIGN_ORIGIN

SPEED = {"linear": 0.1, "angular": 0.0}


async def holder(gw):
    creds = await gw.login("olga")
    status, body, _ = await gw.request("POST", "/api/lease/take", creds, json_body={})
    assert status == 200, body
    return creds


async def test_cookie_requests_need_the_csrf_token(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    olga = await holder(gw)
    status, body, _ = await gw.request("POST", "/api/speed", olga, json_body=SPEED, csrf=False)
    assert status == 403 and body["error"]["code"] == "csrf_failed"
    status, body, _ = await gw.request("POST", "/api/speed", olga, json_body=SPEED, csrf=False,
                                       headers={"X-CSRF-Token": "guessed"})
    assert status == 403 and body["error"]["code"] == "csrf_failed"
    otto = await gw.login("otto")  # another session's token is no good either
    status, _, _ = await gw.request("POST", "/api/speed", olga, json_body=SPEED, csrf=False,
                                    headers={"X-CSRF-Token": otto.csrf})
    assert status == 403
    assert gw.robot.actions == []
    status, _, _ = await gw.request("POST", "/api/speed", olga, json_body=SPEED)
    assert status == 200 and gw.robot.actions == [("speed", "olga")]


async def test_the_page_can_embed_the_csrf_token(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    vera = await gw.login("vera")
    status, html, _ = await gw.request("GET", "/", vera)
    assert status == 200 and f'content="{vera.csrf}"' in html


@pytest.mark.parametrize("origin", [None, FOREIGN_ORIGIN, "null", "http://127.0.0.1:1", "https://127.0.0.1"])
async def test_cookie_state_change_needs_this_origin(start_gateway, users_file, origin) -> None:
    gw = await start_gateway(users_file)
    olga = await holder(gw)
    status, body, _ = await gw.request("POST", "/api/start", olga, json_body={}, origin=origin)
    assert status == 403 and body["error"]["code"] == "bad_origin"
    assert gw.robot.actions == []


async def test_bearer_requests_may_omit_origin_but_not_send_a_foreign_one(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    bot = await gw.login("olga", bearer=True)
    assert (await gw.request("POST", "/api/lease/take", bot, json_body={}, origin=None))[0] == 200
    status, body, _ = await gw.request("POST", "/api/start", bot, json_body={}, origin=FOREIGN_ORIGIN)
    assert status == 403 and body["error"]["code"] == "bad_origin"
    assert (await gw.request("POST", "/api/start", bot, json_body={}, origin=None))[0] == 200


async def test_allowed_origins_admit_another_page(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file, allowed_origins=["https://panel.example:8443"])
    olga = await holder(gw)
    status, _, _ = await gw.request("POST", "/api/start", olga, json_body={}, origin="https://panel.example:8443")
    assert status == 200
    ws = await gw.ws(olga, origin="https://panel.example:8443")
    assert not isinstance(ws, int)
    await ws.close()


@pytest.mark.parametrize("origin, expected", [("same", 101), (FOREIGN_ORIGIN, 403), (None, 403),
                                              ("null", 403)])
async def test_websocket_origin(start_gateway, users_file, origin, expected) -> None:
    gw = await start_gateway(users_file)
    vera = await gw.login("vera")
    ws = await gw.ws(vera, origin=origin)
    got = ws if isinstance(ws, int) else 101
    if not isinstance(ws, int):
        await ws.close()
    assert got == expected


async def test_websocket_e_stop_passes_after_the_session_ended_then_the_socket_closes(start_gateway, users_file,
                                                                                       clock) -> None:
    gw = await start_gateway(users_file, session_idle_s=60, session_max_s=3600)
    olga = await holder(gw)
    ws = await gw.ws(olga)
    clock.advance(61)  # expired, not yet swept: the socket is still open
    reply = await gw.ws_call(ws, "estop")  # a stop is harmless: whoever opened the socket may send it
    assert reply["type"] == "ack"
    await ws.send_json({"type": "speed", **SPEED})
    while (msg := await asyncio.wait_for(ws.receive(), 10)).type == aiohttp.WSMsgType.TEXT:
        assert msg.json()["status"] == 401
    assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 4401
    assert gw.robot.actions == [("estop", "olga")]


async def test_unknown_websocket_message_is_denied(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    ws = await gw.ws(await gw.login("ada"))
    reply = await gw.ws_call(ws, "debug_shell")
    assert reply["status"] == 403 and "not in the permission table" in reply["error"]["message"]
    await ws.close()


@pytest.mark.parametrize("site, mode, method, path, expected", [
    ("cross-site", "cors", "GET", "/api/state", 403),
    ("cross-site", "no-cors", "GET", "/static/css/login.css", 403),    # a foreign <link>/<img> embed
    ("same-site", "no-cors", "GET", "/api/state", 403),                # another port of this host
    ("cross-site", "navigate", "GET", "/api/state", 200),              # a link followed to here
    ("same-origin", "cors", "GET", "/api/state", 200),
    ("none", "navigate", "GET", "/api/state", 200),                    # typed in the address bar
])
async def test_fetch_metadata_refuses_cross_site_requests(start_gateway, users_file, site, mode, method, path,
                                                          expected) -> None:
    gw = await start_gateway(users_file)
    olga = await holder(gw)
    status, _, _ = await gw.request(method, path, olga, json_body={} if method == "POST" else None,
                                    headers={"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode})
    assert status == expected


@pytest.mark.parametrize("host, bound, allowed, expected", [
    ("127.0.0.1:{port}", "127.0.0.1", [], 200),
    ("localhost:{port}", "127.0.0.1", [], 200),
    ("[::1]:{port}", "127.0.0.1", [], 200),
    ("192.168.1.20:{port}", "0.0.0.0", [], 200),        # an IP literal cannot be rebound
    ("attacker.rebind.example", "127.0.0.1", [], 400),
    ("attacker.rebind.example:{port}", "0.0.0.0", [], 400),
    ("robot.lan:{port}", "robot.lan", [], 200),         # the name we were told to bind
    ("robot.example.org", "0.0.0.0", ["*.example.org"], 200),
    ("robot.example.org.evil", "0.0.0.0", ["*.example.org"], 400),
    ("a b", "127.0.0.1", [], 400),
    ("127.0.0.1:99999", "127.0.0.1", [], 400),
])
async def test_host_allow_list(start_gateway, users_file, host, bound, allowed, expected) -> None:
    gw = await start_gateway(users_file, bound_host=bound, allowed_hosts=allowed)
    vera = await gw.login("vera")
    status, body, _ = await gw.request("GET", "/api/state", vera, host=host.format(port=gw.server.port))
    assert status == expected, body
    if expected == 400:
        assert body["error"]["code"] == "bad_host"


@pytest.mark.parametrize("ctype, body", [
    ("text/plain", "linear=0.5"),
    ("application/x-www-form-urlencoded", "linear=0.5&angular=0"),
    ("multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--x--\r\n"),
    (None, "{\"linear\": 0.5, \"angular\": 0}"),
    ("application/json-seq", "{}"),
])
async def test_state_changing_bodies_must_be_json(start_gateway, users_file, ctype, body) -> None:
    gw = await start_gateway(users_file)
    olga = await holder(gw)
    status, payload, _ = await gw.request("POST", "/api/speed", olga, data=body, content_type=ctype,
                                          headers={} if ctype else {"Content-Type": ""})
    assert status == 415 and payload["error"]["code"] == "unsupported_media_type"
    status, _, _ = await gw.request("POST", "/api/estop", olga, data=body, content_type=ctype)
    assert status == 200  # the e-stop takes anything
    assert gw.robot.actions == [("estop", "olga")]


async def test_security_headers_on_every_kind_of_response(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    vera = await gw.login("vera")
    for method, path, creds in [("GET", "/api/state", vera), ("GET", "/static/css/login.css", None),
                                ("GET", "/no/such/page", None), ("GET", "/api/state", None),
                                ("GET", "/login", None)]:
        status, _, resp = await gw.request(method, path, creds)
        h = resp.headers
        assert h["Content-Security-Policy"] == CSP, path
        script_src = next(d for d in CSP.split("; ") if d.startswith("script-src"))
        assert script_src == "script-src 'self'" and "frame-ancestors 'none'" in CSP and "unsafe-eval" not in CSP
        assert h["X-Frame-Options"] == "DENY"
        assert h["X-Content-Type-Options"] == "nosniff"
        assert h["Referrer-Policy"] == "no-referrer"
        assert h["Server"] == "teleop"
        assert "Strict-Transport-Security" not in h  # plain HTTP
        assert "Access-Control-Allow-Origin" not in h


async def test_cors_preflight_is_not_answered(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    status, _, resp = await gw.request("OPTIONS", "/api/start", origin=FOREIGN_ORIGIN,
                                       headers={"Access-Control-Request-Method": "POST"})
    assert status == 405 and "Access-Control-Allow-Origin" not in resp.headers


async def test_pages_redirect_to_login_and_apis_answer_401(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    status, _, resp = await gw.request("GET", "/", headers={"Accept": "text/html"})
    assert status == 303 and resp.headers["Location"] in ("/login?next=%2F", "/login?next=/")
    status, body, resp = await gw.request("GET", "/api/state", headers={"Accept": "text/html"})
    assert status == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
    status, html, resp = await gw.request("GET", "/login")
    assert status == 200 and 'src="/static/js/login.js"' in html and "<script>" not in html


async def test_unlisted_route_is_denied_to_everyone(start_gateway, users_file) -> None:
    async def secret(request: web.Request) -> web.Response:
        return web.json_response({"secret": True})

    gw = await start_gateway(users_file, extra_routes=(("GET", "/api/secret", secret),))
    assert gw.svc.permissions.missing(gw.app) == [("GET", "/api/secret")]
    status, body, _ = await gw.request("GET", "/api/secret", await gw.login("ada"))
    assert status == 403 and "default deny" in body["error"]["message"]
    status, _, _ = await gw.request("GET", "/api/nonexistent", await gw.login("ada"))
    assert status == 404  # the router's own answer passes through
