"""Logging in: per-address failure limits, proxies, unknown names, the second factor, hostile bodies."""

from __future__ import annotations

import datetime as dt

import argon2
import pyotp
import pytest

from server.gateway.auth.users import UserStore
from tests.server.gateway.auth.conftest import CHEAP_HASHER, PASSWORD, Gateway


async def attempt(gw: Gateway, user: str, password: str, forwarded_for: str | None = None, **extra):
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else None
    status, body, resp = await gw.request("POST", "/api/auth/login", headers=headers,
                                          json_body={"username": user, "password": password, **extra})
    return status, body, resp


async def test_three_failures_a_minute_then_429_even_for_the_right_password(start_gateway, users_file,
                                                                          clock) -> None:
    gw = await start_gateway(users_file, login_failures_per_minute=3, login_failures_per_hour=10)
    for user in ("vera", "vera", "nobody"):  # unknown names count too
        status, body, _ = await attempt(gw, user, "wrong password")
        assert status == 401 and body["error"]["code"] == "invalid_credentials"
    status, body, resp = await attempt(gw, "vera", PASSWORD)
    assert status == 429 and body["error"]["code"] == "rate_limited"
    assert 1 <= int(resp.headers["Retry-After"]) <= 60
    clock.advance(61)
    status, _, _ = await attempt(gw, "vera", PASSWORD)
    assert status == 200


async def test_ten_failures_an_hour(start_gateway, users_file, clock) -> None:
    gw = await start_gateway(users_file, login_failures_per_minute=3, login_failures_per_hour=10)
    for i in range(10):
        status, _, _ = await attempt(gw, "vera", f"wrong {i}")
        assert status == 401, i
        if i % 3 == 2:
            clock.advance(61)
    status, _, resp = await attempt(gw, "vera", PASSWORD)
    assert status == 429 and int(resp.headers["Retry-After"]) > 60
    clock.advance(3600)
    assert (await attempt(gw, "vera", PASSWORD))[0] == 200


async def test_forwarded_for_is_believed_only_from_trusted_proxies(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file, trusted_proxies=["127.0.0.1"])
    for _ in range(3):
        assert (await attempt(gw, "vera", "wrong password", "203.0.113.5"))[0] == 401
    assert (await attempt(gw, "vera", PASSWORD, "203.0.113.5"))[0] == 429   # that client is limited
    assert (await attempt(gw, "vera", PASSWORD, "198.51.100.7"))[0] == 200  # another is not
    creds = await gw.login("vera", headers={"X-Forwarded-For": "198.51.100.7"})
    _, me, _ = await gw.request("GET", "/api/auth/me", creds, headers={"X-Forwarded-For": "198.51.100.7"})
    assert me["remote"] == "198.51.100.7" and me["external"] is True

    untrusting = await start_gateway(users_file)  # no trusted proxy: the header is ignored
    for _ in range(3):
        assert (await attempt(untrusting, "vera", "wrong password", "203.0.113.5"))[0] == 401
    assert (await attempt(untrusting, "vera", PASSWORD, "198.51.100.7"))[0] == 429  # all count as 127.0.0.1


async def test_local_client_is_not_external(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    creds = await gw.login("vera")
    _, me, _ = await gw.request("GET", "/api/auth/me", creds)
    assert me["user"] == "vera" and me["role"] == "viewer" and me["external"] is False
    assert me["remote"] == "127.0.0.1" and me["csrf_token"] == creds.csrf


class CountingHasher(argon2.PasswordHasher):
    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.verified: list[str] = []

    def verify(self, hash, password):  # noqa: A002 - argon2's name
        self.verified.append(hash)
        return super().verify(hash, password)


def test_unknown_name_costs_one_argon2_verify_like_a_known_one(tmp_path) -> None:
    hasher = CountingHasher()
    store = UserStore(tmp_path / "users.json", hasher=hasher)
    store.add("alice", "admin", PASSWORD)
    assert store.verify_password("nobody", PASSWORD) is None
    assert store.verify_password("alice", "wrong password") is None
    assert store.verify_password("alice", PASSWORD) is not None
    assert len(hasher.verified) == 3
    dummy, wrong, right = hasher.verified
    assert dummy == store.dummy_hash() and dummy != store.get("alice").password_hash
    assert argon2.extract_parameters(dummy) == argon2.extract_parameters(right)  # same cost


async def test_second_factor(start_gateway, users_file) -> None:
    store = UserStore(users_file, hasher=CHEAP_HASHER)
    store.load()
    user, _ = store.update("otto", totp=True)
    gw = await start_gateway(users_file)
    status, body, _ = await attempt(gw, "otto", PASSWORD)
    assert status == 401 and body["error"]["code"] == "otp_required"
    status, body, _ = await attempt(gw, "otto", PASSWORD, otp="000000")
    assert status == 401 and body["error"]["code"] == "invalid_credentials"
    code = pyotp.TOTP(user.totp_secret).now()
    status, body, _ = await attempt(gw, "otto", PASSWORD, otp=code)
    assert status == 200, body
    status, body, _ = await attempt(gw, "otto", PASSWORD, otp=code)  # a code works once
    assert status == 401 and body["error"]["code"] == "invalid_credentials"


def test_totp_accepts_one_step_of_drift_and_no_more(tmp_path) -> None:
    store = UserStore(tmp_path / "users.json", hasher=CHEAP_HASHER)
    user = store.add("alice", "admin", PASSWORD, totp=True)
    totp = pyotp.TOTP(user.totp_secret)
    now = 1_700_000_000.0
    at = lambda s: totp.at(dt.datetime.fromtimestamp(s, dt.timezone.utc))  # noqa: E731
    assert not store.verify_otp(user, at(now - 90), now)
    assert store.verify_otp(user, at(now - 30), now)
    assert store.verify_otp(user, at(now), now)
    assert not store.verify_otp(user, at(now - 30), now)  # older than the last accepted: a replay
    assert not store.verify_otp(user, "12345x", now)


async def test_totp_required_refuses_users_without_it(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file, totp_required=True)
    status, body, _ = await attempt(gw, "vera", PASSWORD)
    assert status == 403 and "--totp" in body["error"]["message"]


async def test_bearer_token_for_scripts(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    creds = await gw.login("olga", bearer=True)
    assert creds.token and creds.cookie is None
    # no Origin, no CSRF token: a script
    status, _, _ = await gw.request("POST", "/api/lease/take", creds, json_body={}, origin=None)
    assert status == 200
    status, _, _ = await gw.request("POST", "/api/speed", creds, json_body={"linear": 0.1, "angular": 0.0},
                                    origin=None)
    assert status == 200
    status, body, _ = await gw.request("GET", "/api/state", headers={"Authorization": "Bearer not-a-token"})
    assert status == 401 and "bearer token" in body["error"]["message"]
    status, _, _ = await gw.request("GET", "/api/state", headers={"Authorization": "Basic dmVyYTp4"})
    assert status == 401


@pytest.mark.parametrize("body, status, code", [
    (b"x" * 20000, 413, "too_large"),
    (b"[" * 5000 + b"]" * 5000, 400, "malformed"),   # the gateway's one body reader: nested too deeply
    (b"{\"username\": " + b"[" * 5000, 400, "malformed"),
    (b"{\"username\": \"vera\", \"password\": \"x\"", 400, "malformed"),
    (b"not json", 400, "malformed"),
    (b"{\"username\": \"vera\"}", 422, "missing_field"),
    (b"{\"username\": \"vera\", \"password\": \"x\", \"admin\": true}", 422, "unknown_field"),
    (b"{\"username\": \"" + b"v" * 100 + b"\", \"password\": \"x\"}", 422, "invalid"),
    (b"{\"username\": 1, \"password\": \"x\"}", 422, "wrong_type"),
])
async def test_hostile_login_bodies_are_refused_cleanly(start_gateway, users_file, body, status, code) -> None:
    gw = await start_gateway(users_file)
    got, payload, _ = await gw.request("POST", "/api/auth/login", data=body)
    assert (got, payload["error"]["code"]) == (status, code), payload
    assert len(gw.svc.sessions) == 0


async def test_a_failed_dummy_hash_is_logged_not_left_unretrieved(caplog) -> None:
    import asyncio

    from server.gateway.auth.service import _log_dummy_failure

    loop = asyncio.get_running_loop()
    failed, cancelled, done = loop.create_future(), loop.create_future(), loop.create_future()
    failed.set_exception(MemoryError("argon2: out of memory"))
    cancelled.cancel()
    done.set_result("$argon2id$...")
    with caplog.at_level("WARNING", logger="server.gateway.auth.service"):
        for future in (failed, cancelled, done):
            _log_dummy_failure(future)
    assert [r.getMessage() for r in caplog.records] == [
        "the login's dummy password hash could not be made ahead: argon2: out of memory"]
