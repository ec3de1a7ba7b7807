"""A client for the trust layer's tests: explicit credentials, Origin, Host and content type per
request (no cookie jar), login, websockets; and the users file with cheap argon2 parameters.

Used against the stand-in gateway (``conftest.py``) and against the real ``python -m server``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import argon2

from server.gateway.auth import Role
from server.gateway.auth.users import UserStore

# the production cost is ~0.1 s and 64 MiB a check; the hash carries its parameters, so a server
# verifies these cheaply too
CHEAP_HASHER = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
PASSWORD = "correct horse battery"
USERS = {"vera": Role.VIEWER, "otto": Role.OPERATOR, "olga": Role.OPERATOR, "ada": Role.ADMIN}
FOREIGN_ORIGIN = "http://evil.example"
FOREIGN_HOST = "attacker.rebind.example"


def make_users(path: Path, users: dict[str, Role | str] | None = None) -> Path:
    store = UserStore(path, hasher=CHEAP_HASHER)
    for name, role in (USERS if users is None else users).items():
        store.add(name, role, PASSWORD)
    return path


@dataclass
class Creds:
    cookie: str | None = None
    csrf: str | None = None
    token: str | None = None
    session: str | None = None

    def headers(self, csrf: bool = True) -> dict[str, str]:
        h = {}
        if self.cookie:
            h["Cookie"] = self.cookie
            if csrf and self.csrf:
                h["X-CSRF-Token"] = self.csrf
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h


class Client:
    """Requests to a server at ``origin`` with explicit credentials, Origin, Host and content type
    (no cookie jar: each call says who it is)."""

    def __init__(self, origin: str, http: aiohttp.ClientSession) -> None:
        self.origin = origin
        self.http = http

    def url(self, path: str) -> str:
        return f"{self.origin}{path}"

    def _prepare(self, method: str, creds: Creds | None, json_body: Any, data: bytes | str | None,
                 content_type: str | None, origin: str | None, host: str | None, csrf: bool,
                 headers: dict[str, str] | None) -> tuple[dict[str, str], bytes | None]:
        h = dict(creds.headers(csrf) if creds else {})
        if origin == "same":
            origin = self.origin if method != "GET" else None
        if origin:
            h["Origin"] = origin
        if host:
            h["Host"] = host
        body: bytes | None = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
        elif data is not None:
            body = data.encode() if isinstance(data, str) else data
        if body is not None and content_type:
            h["Content-Type"] = content_type
        h.update(headers or {})
        return h, body

    async def request(self, method: str, path: str, creds: Creds | None = None, *, json_body: Any = None,
                      data: bytes | str | None = None, content_type: str | None = "application/json",
                      origin: str | None = "same", host: str | None = None, csrf: bool = True,
                      headers: dict[str, str] | None = None) -> tuple[int, Any, aiohttp.ClientResponse]:
        """(status, the JSON body or the text, the response). ``origin="same"``: this server's origin on
        anything but a GET; ``creds`` with ``csrf``: the session's CSRF token too."""
        h, body = self._prepare(method, creds, json_body, data, content_type, origin, host, csrf, headers)
        async with self.http.request(method, self.url(path), data=body, headers=h, allow_redirects=False) as resp:
            raw = await resp.read()
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = raw.decode(errors="replace")
            return resp.status, payload, resp

    async def status_only(self, method: str, path: str, creds: Creds | None = None, *, json_body: Any = None,
                          data: bytes | str | None = None, content_type: str | None = "application/json",
                          origin: str | None = "same", host: str | None = None, csrf: bool = True,
                          headers: dict[str, str] | None = None) -> int:
        """The status of a streaming response (MJPEG), without reading the endless body."""
        h, body = self._prepare(method, creds, json_body, data, content_type, origin, host, csrf, headers)
        async with self.http.request(method, self.url(path), data=body, headers=h, allow_redirects=False) as resp:
            status = resp.status
            resp.close()
            return status

    async def login(self, user: str, password: str = PASSWORD, bearer: bool = False,
                    headers: dict[str, str] | None = None, **body: Any) -> Creds:
        status, payload, resp = await self.request("POST", "/api/auth/login", headers=headers,
                                                   json_body={"username": user, "password": password,
                                                              "bearer": bearer, **body})
        assert status == 200, (status, payload)
        if bearer:
            return Creds(token=payload["token"], session=payload["session"])
        morsel = resp.cookies.get("teleop_session")
        assert morsel is not None, resp.headers
        return Creds(cookie=f"teleop_session={morsel.value}", csrf=payload["csrf_token"], session=payload["session"])

    async def ws(self, creds: Creds | None = None, origin: str | None = "same", host: str | None = None,
                 path: str = "/ws/telemetry"):
        """Open a websocket; returns the socket, or the refused upgrade's status as an int."""
        h = dict(creds.headers(csrf=False) if creds else {})
        if origin == "same":
            origin = self.origin
        if origin:
            h["Origin"] = origin
        if host:
            h["Host"] = host
        try:
            return await self.http.ws_connect(self.url(path), headers=h)
        except aiohttp.WSServerHandshakeError as err:
            return err.status

    _ids = iter(range(1, 1 << 30))

    @classmethod
    async def ws_call(cls, ws: aiohttp.ClientWebSocketResponse, msg_type: str, timeout_s: float = 10.0,
                      **fields: Any) -> dict:
        """Send a message and return its reply (ack, error or pong with its id), skipping telemetry."""
        msg_id = next(cls._ids)
        await ws.send_json({"type": msg_type, "id": msg_id, **fields})
        async with asyncio.timeout(timeout_s):
            while True:
                msg = await ws.receive()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"no reply to {msg_type}: the socket sent {msg.type.name} ({msg.data!r})")
                reply = json.loads(msg.data)
                if reply.get("type") in ("ack", "error", "pong") and reply.get("id") == msg_id:
                    return reply


