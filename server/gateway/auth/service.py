"""The trust layer of the gateway: one middleware that checks every request, in a fixed order.

For each request, cheapest and most general first:

1. ``Host`` in the allow-list (DNS rebinding) → 400 ``bad_host``;
2. the route's rule from the permission table; a route with no rule → 403 ``forbidden``
   (default deny; the router's own 404/405 pass through untouched);
3. cross-site: ``Sec-Fetch-Site: cross-site|same-site`` (sent by every current browser)
   is refused except for top-level ``GET`` navigations; ``Origin`` must be this origin or
   in ``allowed_origins`` on every state-changing request and websocket upgrade → 403 ``bad_origin``;
4. a state-changing request with a body must send it as ``application/json`` → 415 (not
   for the e-stop); an empty body passes whatever its ``Content-Type``;
5. who is calling: a bearer token, else the session cookie, else, in local mode, a
   loopback client without forwarding headers (the local admin); nobody → 401, or a
   redirect to ``/login`` for an HTML page;
6. a cookie-authenticated state-changing request must carry ``Origin`` and the session's
   ``X-CSRF-Token`` → 403 ``bad_origin`` / ``csrf_failed`` (not for the e-stop);
7. role → 403 ``forbidden``; a fresh password where the rule says ``reauth`` → 401
   ``reauth_required``; the control lease where it says ``lease`` → 409 ``lease_required``
   / ``lease_held`` (naming the holder).

The e-stop rule skips 4 and 6 and every role and lease check: any authenticated caller
stops the robot, with any body. Its Host and Origin checks stay: a foreign page is
refused even this (a stop is harmless, but a page the operator happens to have open
must not be able to latch stops at will; ``allowed_origins`` admits a separate e-stop
page). Websocket messages go through :meth:`AuthService.authorize_ws` with the
websocket table, the same order from step 5.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Awaitable, Callable, Literal
from urllib.parse import urlencode

import argon2
from aiohttp import web

from server.gateway.auth import net
from server.gateway.auth.config import AuthConfig, parse_networks
from server.gateway.auth.errors import AuthError, BadHost, BadRequestOrigin, Forbidden, Unauthenticated, \
    UnsupportedMediaType
from server.gateway.auth.headers import apply_security_headers
from server.gateway.auth.lease import Lease, LeaseChange
from server.gateway.auth.permissions import STATE_CHANGING, PermissionTable, Role, Rule
from server.gateway.auth.ratelimit import LoginLimiter
from server.gateway.auth.sessions import Session, SessionStore
from server.gateway.auth.users import UserStore, startup_notice
from server.gateway.observability.health import HEALTH

log = logging.getLogger(__name__)

COOKIE = "teleop_session"
COOKIE_TLS = "__Host-teleop_session"   # the __Host- prefix: Secure, Path=/, no Domain, set by this host only
CSRF_HEADER = "X-CSRF-Token"
WS_CLOSE_SESSION_ENDED = 4401          # application close code: the dashboard goes to /login
LOCAL_USER = "local"
#: password checks and hashes at once (argon2-cffi releases the GIL: two use both cores)
HASH_THREADS = 2

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Principal:
    """Who sent a request: for permission checks, the lease, and the recording of commands."""

    user: str
    role: Role
    via: Literal["local", "cookie", "bearer", "fleet"]   # fleet: a hub user (server/gateway/fleet/robot.py)
    remote: str
    external: bool                      # from outside the local network (dashboard banner)
    session: Session | None = None      # None in local mode

    @property
    def session_id(self) -> str | None:
        return self.session.id if self.session is not None else None

    def to_json(self) -> dict:
        return {"user": self.user, "role": self.role.value, "via": self.via, "session": self.session_id,
                "remote": self.remote, "external": self.external}


# typed request storage where aiohttp has it (3.12+), a namespaced string before
PRINCIPAL_KEY = web.RequestKey("teleop_principal", Principal) if hasattr(web, "RequestKey") \
    else "teleop.auth.principal"


class AuthService:
    """Users, sessions, login limits, the lease and the request checks of one gateway."""

    def __init__(self, cfg: AuthConfig, *, bound_host: str, permissions: PermissionTable,
                 clock: Callable[[], float] = time.monotonic, hasher: argon2.PasswordHasher | None = None,
                 wall_clock: Callable[[], float] = time.time, housekeeping_s: float | None = 1.0) -> None:
        self.cfg = cfg
        self.housekeeping_s = housekeeping_s
        self.bound_host = bound_host
        self.permissions = permissions
        self.clock = clock
        self.users = UserStore(cfg.users_file, hasher=hasher)
        self.users.load()
        self.sessions = SessionStore(cfg.session_idle_s, cfg.session_max_s, cfg.max_sessions_per_user, clock)
        self.limiter = LoginLimiter(cfg.login_failures_per_minute, cfg.login_failures_per_hour, clock)
        self.lease = Lease(cfg.lease_timeout_s, clock, wall_clock)
        self.trusted_proxies = parse_networks(cfg.trusted_proxies, "trusted_proxies")
        self.local_networks = parse_networks(cfg.local_networks, "local_networks")
        hostname = socket.gethostname().lower()
        self.allowed_hosts = tuple(cfg.allowed_hosts) + (hostname, f"{hostname}.local")
        self.allowed_origins = frozenset(net.parse_origin(o) for o in cfg.allowed_origins)
        # argon2 is 64 MiB and ~0.1 s of CPU a check: two threads of its own, so a login never waits
        # behind other work in the loop's default thread pool (six reports there delayed logins by 10 s)
        self.hash_pool = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="argon2")
        self.hash_waiting = 0
        self._dummy: asyncio.Future | None = None  # the dummy hash being made at start-up (background)
        # session id → {id(request): how to end that stream} for websockets and streaming responses
        self._streams: dict[str, dict[int, Callable[[], Awaitable[None] | None]]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._unlisted_warned: set[tuple[str, str]] = set()
        self._refusals_logged: dict[tuple, float] = {}
        self.sessions.on_end.append(self._session_ended)

    # ------------------------------------------------------------------ public surface
    @property
    def local_mode(self) -> bool:
        """No user configured: loopback clients are admins, nobody else gets in."""
        return not self.users.configured

    def principal(self, request: web.Request) -> Principal | None:
        """Who sent ``request`` (set by the middleware; for a websocket, who opened it)."""
        return request.get(PRINCIPAL_KEY)

    def csrf_token(self, request: web.Request) -> str | None:
        """The CSRF token of the request's cookie session (for a ``<meta>`` in the page), or None."""
        p = self.principal(request)
        return p.session.csrf if p is not None and p.via == "cookie" and p.session is not None else None

    def authorize_ws(self, request: web.Request, msg_type: str) -> Principal:
        """May the sender of this websocket send ``msg_type`` now? Raises :class:`AuthError`.

        ``request`` is the upgrade request of the socket. The e-stop passes for whoever
        opened the socket, even if their session has ended since.
        """
        principal = self.principal(request)
        if principal is None:
            raise Unauthenticated("this websocket was not authenticated")
        path = request.match_info.route.resource.canonical if request.match_info.route.resource else request.path
        rule = self.permissions.ws_rule(path, msg_type) if isinstance(msg_type, str) else None
        if rule is None:
            raise Forbidden(f"message type {msg_type!r} is not permitted on {path} (not in the permission table)")
        self.authorize_rule(principal, rule)
        return principal

    def authorize_rule(self, principal: Principal | None, rule: Rule) -> None:
        """May ``principal`` do what ``rule`` asks now (a command's rule, whatever transport brought it)? Raises
        :class:`AuthError`. The session must still live (a socket or channel outlives the request that opened
        it); the e-stop passes for whoever opened it, even if their session has ended since."""
        if principal is None:
            raise Unauthenticated("this connection was not authenticated")
        if rule.estop:
            return
        if principal.session is not None and not self.sessions.alive(principal.session, touch=True):
            raise Unauthenticated(f"your session has ended ({principal.session.ended}): log in again")
        self._authorize(principal, rule)

    def track_ws(self, request: web.Request, ws: web.WebSocketResponse,
                 close: Callable[[int, bytes], Awaitable[None]] | None = None) -> None:
        """Close ``ws`` with code 4401 when the session that opened it ends (logout, expiry,
        revocation), through ``close(code, message)`` when given (a socket with its own writer task
        must stop the writer before the close frame). Other streams of a session (the video socket,
        MJPEG) are dropped at the transport by the middleware without this call."""
        principal = self.principal(request)
        if principal is None or principal.session is None:
            return
        closer = close or ws.close

        def end() -> Awaitable[None]:
            return closer(code=WS_CLOSE_SESSION_ENDED, message=b"session ended: log in again")

        self._streams.setdefault(principal.session.id, {})[id(request)] = end

    def lease_json(self, request: web.Request | None = None) -> dict:
        """The lease state; with a request, ``"you"`` says whether its sender holds or asked for it."""
        out = self.lease.to_json()
        if request is not None:
            sid = (p := self.principal(request)) and p.session_id
            out["you"] = ("holder" if self.lease.holds(sid) else
                          "requester" if sid and self.lease.pending and self.lease.pending.session == sid else None)
        out["local_mode"] = self.local_mode
        out["users_file_problem"] = self.users.problem
        return out

    def startup_notice(self) -> str:
        """One line for the log at start-up: local mode or how many users."""
        return startup_notice(self.users)

    # ------------------------------------------------------------------ request checks
    def https(self, request: web.Request) -> bool:
        if request.secure:
            return True
        proto = request.headers.get("X-Forwarded-Proto", "")
        return proto.split(",")[0].strip().lower() == "https" and net.in_networks(request.remote,
                                                                                   self.trusted_proxies)

    def client(self, request: web.Request) -> str:
        return net.client_address(request.remote, request.headers.get("X-Forwarded-For"), self.trusted_proxies)

    def _check_host(self, request: web.Request) -> tuple[str, int | None]:
        value = request.headers.get("Host")
        if not value:
            raise BadHost("the request has no Host header")
        try:
            host, port = net.split_host(value)
        except ValueError as err:
            raise BadHost(f"bad Host header: {err}") from None
        if not net.host_allowed(host, self.bound_host, self.allowed_hosts):
            raise BadHost(f"Host {host!r} is not a name of this server (add it to [auth] allowed_hosts "
                          "if it is, e.g. behind a reverse proxy)")
        return host, port

    def _origin_ok(self, request: web.Request, origin: str, host: str, port: int | None) -> bool:
        parsed = net.parse_origin(origin)
        if parsed is None:
            return False
        if parsed in self.allowed_origins:
            return True
        scheme = "https" if self.https(request) else "http"
        return parsed == (scheme, host, port or (443 if scheme == "https" else 80))

    def _check_cross_site(self, request: web.Request, host: str, port: int | None) -> str | None:
        """Step 3: Sec-Fetch-Site and Origin. Returns the Origin header (None when absent)."""
        origin = request.headers.get("Origin")
        allowed_origin = origin is not None and self._origin_ok(request, origin, host, port)
        site = request.headers.get("Sec-Fetch-Site", "").lower()
        if site in ("cross-site", "same-site") and not allowed_origin:
            navigation = request.method in ("GET", "HEAD") and request.headers.get("Sec-Fetch-Mode") == "navigate"
            if not navigation:
                raise BadRequestOrigin(f"a {site} request was refused: only this server's own pages may call it")
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if (request.method in STATE_CHANGING or upgrade) and origin is not None and not allowed_origin:
            raise BadRequestOrigin(f"Origin {origin!r} is not this server's origin (nor in [auth] allowed_origins)")
        return origin

    def _authenticate(self, request: web.Request) -> tuple[Principal | None, str | None]:
        """(principal, why not) from a bearer token, the cookie, or local mode."""
        remote = self.client(request)
        external = not net.is_local_network(remote, self.local_networks)
        authz = request.headers.get("Authorization")
        if authz is not None:
            scheme, _, token = authz.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None, "the Authorization header must be 'Bearer <token>'"
            session = self.sessions.lookup(token.strip())
            if session is None or session.via != "bearer":
                return None, "the bearer token is unknown or has expired: log in again"
            return self._principal_for(session, "bearer", remote, external)
        token = request.cookies.get(COOKIE_TLS) or request.cookies.get(COOKIE)
        if token:
            session = self.sessions.lookup(token)
            if session is None or session.via != "cookie":
                return None, "your session has expired: log in again"
            return self._principal_for(session, "cookie", remote, external)
        if self.local_mode:
            if any(h in request.headers for h in net.FORWARDING_HEADERS):
                return None, ("local mode (no users) serves only this machine directly; a request through a "
                              "proxy counts as remote: add users (python -m server users add)")
            if net.is_loopback(request.remote):
                return Principal(LOCAL_USER, Role.ADMIN, "local", remote, external=False), None
            return None, ("local mode (no users): only this machine may connect; add users to allow others "
                          "(python -m server users add NAME --role admin)")
        return None, "log in first (the /login page, or POST /api/auth/login)"

    def _principal_for(self, session: Session, via: Literal["cookie", "bearer"], remote: str,
                       external: bool) -> tuple[Principal | None, str | None]:
        user = self.users.get(session.user)
        if user is None:  # removed while the file watcher had not yet revoked the session
            self.sessions.end(session, "user_removed")
            return None, "your user no longer exists"
        return Principal(user.name, user.role, via, remote, external, session), None

    def _authorize(self, principal: Principal, rule: Rule) -> None:
        """Step 7: role, fresh password, lease."""
        if rule.public or rule.estop:
            return
        role = principal.role
        if principal.session is not None and principal.via != "fleet":  # role changes take effect at once
            # (a hub user is no user of this robot: their role is the hub's, capped by [fleet] max_role)
            user = self.users.get(principal.user)
            role = user.role if user is not None else Role.VIEWER
        if rule.role is not None and not role.at_least(rule.role):
            raise Forbidden(f"this needs the {rule.role.value} role; {principal.user} is {role.value}")
        if principal.session is None:
            return  # local mode: no password to ask again, no lease (one machine, one operator)
        if rule.reauth and self.clock() - principal.session.reauth_at > self.cfg.reauth_s:
            raise AuthError(f"enter your password again to change users or settings "
                            f"(POST /api/auth/reauth; valid {self.cfg.reauth_s:g} s)", code="reauth_required",
                            status=401)
        if rule.lease:
            self.lease.check(principal.session.id)

    @staticmethod
    def _login_redirect(request: web.Request) -> None:
        raise web.HTTPSeeOther(location="/login?" + urlencode({"next": request.path_qs}))

    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        host, port = self._check_host(request)
        match = request.match_info
        if match.http_exception is not None:
            return await handler(request)  # the router's 404 / 405: nothing to protect
        resource = match.route.resource
        path = resource.canonical if resource is not None else request.path
        rule = self.permissions.rule(request.method, path)
        if rule is None:
            if (request.method, path) not in self._unlisted_warned:
                self._unlisted_warned.add((request.method, path))
                log.error("route %s %s is not in the permission table: refused to everyone", request.method, path)
            raise Forbidden(f"{request.method} {path} is not in the permission table (default deny)")
        origin = self._check_cross_site(request, host, port)
        state_changing = request.method in STATE_CHANGING
        if state_changing and not rule.estop:
            # an empty body is the same request whatever its Content-Type says (the Origin check covers it)
            if request.body_exists and request.content_type != "application/json" \
                    and not (rule.csv and request.content_type == "text/csv"):
                ctype = request.headers.get("Content-Type") or "no content type"
                allowed = "application/json or text/csv" if rule.csv else "application/json"
                raise UnsupportedMediaType(f"send the body as {allowed}, not {ctype}")
        principal, why = self._authenticate(request)
        if principal is None:
            if rule.public:
                return await handler(request)
            if rule.page and request.method in ("GET", "HEAD") and "text/html" in request.headers.get("Accept", ""):
                self._login_redirect(request)
            raise Unauthenticated(why or "log in first")
        request[PRINCIPAL_KEY] = principal
        if principal.via == "cookie" and not rule.public and not rule.estop:
            upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
            if (state_changing or upgrade) and origin is None:
                raise BadRequestOrigin("a request with the session cookie must carry an Origin header")
            if state_changing and not principal.session.check_csrf(request.headers.get(CSRF_HEADER)):
                raise AuthError(f"missing or wrong {CSRF_HEADER} header (GET /api/auth/me gives the token)",
                                code="csrf_failed", status=403)
        self._authorize(principal, rule)
        if not rule.stream or principal.session is None:
            return await handler(request)
        # a websocket or a stream lives as long as its session: registered here, ended by _session_ended
        streams = self._streams.setdefault(principal.session.id, {})
        streams[id(request)] = lambda: self._drop_transport(request)
        try:
            return await handler(request)
        finally:
            streams.pop(id(request), None)
            if not streams and self._streams.get(principal.session.id) is streams:
                del self._streams[principal.session.id]

    def _refusal(self, request: web.Request, err: AuthError) -> web.Response:
        headers = dict(err.headers)
        if err.status == 401:
            headers.setdefault("WWW-Authenticate", 'Bearer realm="teleop"')
        resp = web.json_response({"error": err.to_json()}, status=err.status, headers=headers)
        if err.status == 401 and (request.cookies.get(COOKIE) or request.cookies.get(COOKIE_TLS)) \
                and err.code == "unauthenticated":
            self.clear_cookie(request, resp)
        if err.code in ("bad_host", "bad_origin", "forbidden") or err.status == 415:
            self._log_refusal(request, err)
        return resp

    def _log_refusal(self, request: web.Request, err: AuthError) -> None:
        """Log a cross-site or permission refusal once a minute per (code, path, address): an
        attacking page may send thousands, and the log must stay readable."""
        key = (err.code, request.path[:200], request.remote)
        now = time.monotonic()
        if now - self._refusals_logged.get(key, -math.inf) < 60.0:
            return
        if len(self._refusals_logged) > 1000:
            self._refusals_logged.clear()
        self._refusals_logged[key] = now
        log.info("refused %s %s from %s: %s", request.method, request.path, request.remote, err.message)

    def middleware(self) -> Callable:
        @web.middleware
        async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                return await self._guard(request, handler)
            except AuthError as err:
                return self._refusal(request, err)

        return auth_middleware

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        apply_security_headers(response, self.https(request))

    # ------------------------------------------------------------------ cookies
    def cookie_name(self, request: web.Request) -> str:
        return COOKIE_TLS if self.https(request) else COOKIE

    def set_cookie(self, request: web.Request, response: web.StreamResponse, token: str) -> None:
        response.set_cookie(self.cookie_name(request), token, httponly=True, samesite="Strict",
                            secure=self.https(request), path="/")

    def clear_cookie(self, request: web.Request, response: web.StreamResponse) -> None:
        for name in (COOKIE, COOKIE_TLS):
            if name in request.cookies:
                response.del_cookie(name, path="/", secure=name == COOKIE_TLS, httponly=True, samesite="Strict")

    # ------------------------------------------------------------------ endings and background work
    def _session_ended(self, session: Session, reason: str) -> None:
        log.info("session %s of %s ended: %s", session.id, session.user, reason)
        self.lease.on_session_end(session.id)
        streams = self._streams.pop(session.id, None)
        if not streams:
            return
        try:
            asyncio.get_running_loop()  # no loop (shutdown): nothing to close
        except RuntimeError:
            return
        for end in list(streams.values()):
            result = end()
            if result is not None:
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _drop_transport(request: web.Request) -> None:
        if request.transport is not None:
            request.transport.close()

    def users_changed(self, changed: set[str]) -> None:
        """After a reload: end the sessions of users whose credentials changed or who left."""
        for name in changed:
            n = self.sessions.revoke_user(name, "credentials_changed")
            if n:
                log.info("%d session(s) of %s ended: password, second factor or account changed", n, name)
        holder = self.lease.holder
        session = self.sessions.by_id(holder.session) if holder is not None else None
        if holder is not None and (session is None or session.via != "fleet"):  # a hub user is in no users file
            user = self.users.get(holder.user)
            if user is None or not user.role.at_least(Role.OPERATOR):
                self.lease.on_session_end(holder.session)

    async def poll_users(self) -> None:
        """Pick up changes made by the CLI (one ``stat`` in a worker thread). A file that went bad, or
        was deleted or emptied, leaves the users as they were: said once in the log, for as long as it
        lasts on ``/healthz`` (``users_file``) and the dashboard (``users_file_problem``)."""
        if not await asyncio.to_thread(self.users.changed_on_disk):
            return
        was_local = self.local_mode
        before = self.users.problem
        try:
            changed = await asyncio.to_thread(self.users.reload)
        except ValueError:
            if self.users.problem != before:
                log.error("%s", self.users.problem)
                self._users_file_problem_changed()
            return
        if before is not None:
            log.warning("the users file %s can be used again (%d user(s))", self.users.path, len(self.users.names()))
            self._users_file_problem_changed()
        self.users_changed(changed)
        self._prepare_dummy_hash()
        if was_local != self.local_mode:
            log.warning("%s", self.startup_notice())
            self._users_file_problem_changed()  # local mode's implicit holder came or went: the runtime is told

    def users_file_check(self) -> tuple[bool, str]:
        """For ``/healthz``: is the users file what the server uses?"""
        problem = self.users.problem
        return problem is None, problem or f"{len(self.users.names())} user(s) from {self.users.path}"

    def _users_file_problem_changed(self) -> None:
        """Tell every dashboard now: the lease message carries ``users_file_problem`` (the holder is
        unchanged, so nothing stops)."""
        holder = self.lease.holder
        change = LeaseChange("users_file", holder, holder)
        for fn in list(self.lease.listeners):
            try:
                fn(change)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the poll
                log.exception("lease listener failed")

    async def housekeeping(self, period_s: float = 1.0) -> None:
        """Forever: end expired sessions, let unanswered lease requests win, poll the users file."""
        next_poll = 0.0
        while True:
            try:
                self.sessions.sweep()
                self.lease.expire()
                now = time.monotonic()
                if now >= next_poll:
                    next_poll = now + self.cfg.users_poll_s
                    await self.poll_users()
            except Exception:
                log.exception("auth housekeeping failed")
            await asyncio.sleep(period_s)

    async def background(self, app: web.Application):
        """cleanup_ctx: the dummy hash, the ``users_file`` check of ``/healthz``, then :meth:`housekeeping`
        (unless ``housekeeping_s`` is None)."""
        health = app.get(HEALTH)
        if health is not None:
            health.add_check("users_file", self.users_file_check)
        self._prepare_dummy_hash()
        task = None
        if self.housekeeping_s is not None:
            task = asyncio.create_task(self.housekeeping(self.housekeeping_s), name="auth-housekeeping")
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            await asyncio.gather(*([task] if task else []), *self._tasks, return_exceptions=True)
            self.hash_pool.shutdown(wait=False, cancel_futures=True)

    def _prepare_dummy_hash(self) -> None:
        """The first unknown-user login costs the same as the others: once users exist, the dummy hash is made in
        the hash pool ahead of any login (a login's hash queues behind it). Not awaited, and not made in local
        mode (no login to time): ~0.4 s of CPU off a start-up."""
        if self._dummy is None and self.users.configured:
            self._dummy = asyncio.get_running_loop().run_in_executor(self.hash_pool, self.users.dummy_hash)
            self._dummy.add_done_callback(_log_dummy_failure)

    def on_lease_change(self, fn: Callable[[LeaseChange], None]) -> None:
        """Call ``fn`` on every lease change (the gateway stops the robot when the driver changes)."""
        self.lease.listeners.append(fn)


def _log_dummy_failure(future: asyncio.Future) -> None:
    """A failed dummy hash is logged (the login that needs it makes it again), never left unretrieved."""
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.warning("the login's dummy password hash could not be made ahead: %s", exc)


AUTH_KEY = web.AppKey("auth", AuthService)
