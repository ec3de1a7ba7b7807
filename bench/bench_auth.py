"""What the trust layer costs (figures, never assertions).

Run: ``.venv/bin/python bench/bench_auth.py [--quick]``.

- the middleware's checks per request, in process (``make_mocked_request``: no socket),
  for a cookie session, a bearer token and local mode, against a bare handler call;
- requests per second over a real socket (keep-alive, one client) to the same stand-in
  app with and without the trust layer, for ``GET /api/state`` and ``POST /api/speed``;
- one websocket message check (``authorize_ws``);
- argon2id at the production cost (the price of a login, and of an unknown name).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import argon2  # noqa: E402
from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestServer, make_mocked_request  # noqa: E402

from common import best_us  # noqa: E402
from server.gateway.auth import AuthConfig, default_permissions, setup_auth  # noqa: E402
from server.gateway.auth.service import PRINCIPAL_KEY  # noqa: E402
from server.gateway.auth.users import UserStore  # noqa: E402

CHEAP = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


async def ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def stand_in(users_file: str | None) -> tuple[web.Application, object]:
    app = web.Application()
    app.router.add_get("/api/state", ok)
    app.router.add_post("/api/speed", ok)
    svc = None
    if users_file is not None:
        svc = setup_auth(app, AuthConfig.from_table({"users_file": users_file}), bound_host="127.0.0.1",
                         permissions=default_permissions(), hasher=CHEAP)
    return app, svc


async def in_process(n: int, users: Path) -> None:
    app, svc = stand_in(str(users))
    app.freeze()
    token, session = svc.sessions.create("olga", "cookie", "127.0.0.1")
    svc.lease.take(session.id, "olga")
    btoken, bsession = svc.sessions.create("olga", "bearer", "127.0.0.1")
    base = {"Host": "127.0.0.1:8080", "Origin": "http://127.0.0.1:8080"}
    cases = {
        "GET /api/state, cookie": ("GET", "/api/state", {**base, "Cookie": f"teleop_session={token}"}),
        "POST /api/speed, cookie+CSRF+lease": ("POST", "/api/speed", {**base, "Cookie": f"teleop_session={token}",
                                                                      "X-CSRF-Token": session.csrf,
                                                                      "Content-Type": "application/json"}),
        "POST /api/speed, bearer+lease": ("POST", "/api/speed", {"Host": "127.0.0.1:8080",
                                                                 "Authorization": f"Bearer {btoken}",
                                                                 "Content-Type": "application/json"}),
    }
    local_app, local_svc = stand_in(str(users.parent / "none.json"))
    local_app.freeze()
    print(f"\nin-process checks per request (best of 3 × {n}):")
    for name, (method, path, headers) in cases.items():
        if "bearer" in name:
            svc.lease.take(bsession.id, "olga", force=True)
        req = await _resolved(app, method, path, headers)
        us = await _time_async(lambda r=req: svc._guard(r, ok), n)
        print(f"  {name:<40} {us:7.2f} µs")
    req = await _resolved(local_app, "GET", "/api/state", {"Host": "127.0.0.1:8080"})
    us = await _time_async(lambda: local_svc._guard(req, ok), n)
    print(f"  {'GET /api/state, local mode':<40} {us:7.2f} µs")
    req = await _resolved(app, "GET", "/api/state", {})
    us = await _time_async(lambda: ok(req), n)
    print(f"  {'bare handler call (reference)':<40} {us:7.2f} µs")
    svc.lease.take(session.id, "olga", force=True)
    ws_req = await _resolved(app, "GET", "/ws/telemetry", {**base, "Cookie": f"teleop_session={token}"})
    ws_req[PRINCIPAL_KEY] = (await _principal(svc, ws_req))
    us = best_us(lambda: svc.authorize_ws(ws_req, "speed"), n)
    print(f"  {'authorize_ws(speed) with the lease':<40} {us:7.2f} µs")


async def _principal(svc, req):
    principal, _ = svc._authenticate(req)
    return principal


async def _resolved(app: web.Application, method: str, path: str, headers: dict) -> web.Request:
    req = make_mocked_request(method, path, headers=headers, app=app).clone(remote="127.0.0.1")
    info = await app.router.resolve(req)
    info.add_app(app)
    req._match_info = info
    return req


async def _time_async(make, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            await make()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


async def over_socket(n: int, users: Path) -> None:
    print(f"\nover a real socket, one keep-alive client, {n} requests (requests/s):")
    for label, users_file in (("without auth", None), ("with auth (cookie session)", str(users))):
        app, svc = stand_in(users_file)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        origin = f"http://127.0.0.1:{server.port}"
        headers = {"Origin": origin, "Content-Type": "application/json"}
        if svc is not None:
            token, session = svc.sessions.create("olga", "cookie", "127.0.0.1")
            svc.lease.take(session.id, "olga")
            headers.update({"Cookie": f"teleop_session={token}", "X-CSRF-Token": session.csrf})
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            for method, path, body in (("GET", "/api/state", None), ("POST", "/api/speed",
                                                                     json.dumps({"linear": 0.1, "angular": 0}))):
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    for _ in range(n):
                        async with http.request(method, origin + path, data=body, headers=headers) as resp:
                            await resp.read()
                            assert resp.status == 200, resp.status
                    best = min(best, time.perf_counter() - t0)
                print(f"  {label:<28} {method} {path:<12} {n / best:8.0f} /s  ({best / n * 1e6:6.1f} µs each)")
        await server.close()


def argon2_cost(n: int) -> None:
    ph = argon2.PasswordHasher()
    h = ph.hash("correct horse battery")
    t = best_us(lambda: ph.verify(h, "correct horse battery"), n)
    print(f"\nargon2id verify at the production cost (t={ph.time_cost}, m={ph.memory_cost} KiB, "
          f"p={ph.parallelism}): {t / 1000:.1f} ms; two checks at a time → at most "
          f"{2 / (t / 1e6):.0f} logins/s per gateway")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    n = 2000 if args.quick else 20000
    with tempfile.TemporaryDirectory() as d:
        users = Path(d) / "users.json"
        UserStore(users, hasher=CHEAP).add("olga", "operator", "correct horse battery")
        asyncio.run(in_process(n, users))
        asyncio.run(over_socket(300 if args.quick else 2000, users))
    argon2_cost(3 if args.quick else 10)


if __name__ == "__main__":
    main()
