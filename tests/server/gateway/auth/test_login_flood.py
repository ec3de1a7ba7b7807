"""A flood of concurrent wrong logins from one address, on the real server (issue 18, item 6).

The limit (3 failures a minute) was check-then-act: every attempt checked the count, then spent
~0.1 s on argon2, then counted. 40 concurrent wrong logins from one address got 32 real password
checks and 8 × 503, and everyone else's login 503 for ~3.5 s. Now an attempt is counted before its
check and an address has one check at a time.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from server.gateway.auth.users import UserStore
from tests.server.gateway.auth.client import PASSWORD, Client

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def production_cost_server(server_factory, tmp_path):
    """One operator with a hash at the production argon2 cost (~0.1 s a check, as in the field)."""
    users = tmp_path / "users.json"
    store = UserStore(users)  # the default hasher: what a real install has
    store.add("olga", "operator", PASSWORD)
    store.add("otto", "operator", PASSWORD)
    return server_factory({"auth": {"users_file": str(users)}, "server": {"state_dir": str(tmp_path / "state")}})


async def test_forty_concurrent_wrong_logins_get_at_most_the_limit_of_checks_and_nobody_else_waits(
        production_cost_server) -> None:
    srv = production_cost_server
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as attacker_http, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0)),
                                  cookie_jar=aiohttp.DummyCookieJar()) as other_http:
        attacker, other = Client(srv.url, attacker_http), Client(srv.url, other_http)

        async def wrong() -> tuple[int, dict, str | None]:
            status, body, resp = await attacker.request(
                "POST", "/api/auth/login", json_body={"username": "olga", "password": "not the password"})
            return status, body, resp.headers.get("Retry-After")

        flood = [asyncio.create_task(wrong()) for _ in range(40)]
        await asyncio.sleep(0.05)
        # someone else, from another address, logs in while the flood is being answered
        status, body, _ = await other.request("POST", "/api/auth/login",
                                              json_body={"username": "otto", "password": PASSWORD, "bearer": True})
        answers = await asyncio.gather(*flood)

    assert status == 200, body                                           # nobody else is kept out
    statuses = [s for s, _b, _ra in answers]
    checked = statuses.count(401)                                        # a 401 is a password check that was made
    assert 1 <= checked <= 3, statuses                                   # the limit: 3 failures a minute
    assert statuses.count(429) == 40 - checked, statuses                 # the rest refused before any check
    assert all(b["error"]["code"] == "rate_limited" and int(ra) >= 1 for s, b, ra in answers if s == 429)
    # the count holds: the right password from that address is still refused while it is over the limit
    # (or, below it, accepted: a right password never counts as a failure)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        status, body, _ = await Client(srv.url, http).request(
            "POST", "/api/auth/login", json_body={"username": "olga", "password": PASSWORD, "bearer": True})
    assert status == (429 if checked >= 3 else 200), body
