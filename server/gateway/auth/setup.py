"""``setup_auth``: install the trust layer on an aiohttp application (the gateway calls it once)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import argon2
from aiohttp import web

from server.gateway.auth.config import AuthConfig
from server.gateway.auth.permissions import PermissionTable
from server.gateway.auth.routes import add_routes
from server.gateway.auth.service import AUTH_KEY, AuthService


def setup_auth(app: web.Application, cfg: AuthConfig, *, bound_host: str, permissions: PermissionTable,
               clock: Callable[[], float] = time.monotonic, hasher: argon2.PasswordHasher | None = None,
               web_dir: Path | None = None, housekeeping_s: float | None = 1.0) -> AuthService:
    """Install the trust layer on ``app`` (before it starts) and return its service.

    Adds the middleware (after the ones already there, e.g. the error middleware; it
    answers its refusals itself), the security-header hook, the login page, the auth,
    user and lease routes (and their rules to ``permissions``), and the housekeeping
    task (every ``housekeeping_s``; None: none, for tests that drive the clock).
    ``bound_host`` is the address or name the server listens on (Host allow-list).
    Raises :class:`server.gateway.auth.users.UsersFileError` when the users file exists but
    cannot be used. ``clock`` and ``hasher`` are for tests.
    """
    service = AuthService(cfg, bound_host=bound_host, permissions=permissions, clock=clock, hasher=hasher,
                          housekeeping_s=housekeeping_s)
    app[AUTH_KEY] = service
    app.middlewares.append(service.middleware())
    app.on_response_prepare.append(service.on_response_prepare)
    app.cleanup_ctx.append(service.background)
    add_routes(app, service, web_dir=web_dir)
    return service
