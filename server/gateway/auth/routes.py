"""HTTP routes of the trust layer: the login page, login/logout, re-auth, users, the lease.

=============================== ============== ==================================================
route                           needs          body → answer
=============================== ============== ==================================================
``GET /login``                  public         the login page
``POST /api/auth/login``        public         ``{"username", "password", "otp"?, "bearer"?}`` →
                                               ``{"user", "role", "session", "csrf_token" | "token"}``
``POST /api/auth/logout``       viewer         ends this session
``GET /api/auth/me``            viewer         who am I, CSRF token, local network or not, lease
``POST /api/auth/reauth``       viewer         ``{"password", "otp"?}`` → fresh for ``reauth_s``
``POST /api/auth/password``     viewer         ``{"current", "new", "otp"?}``: ends all the user's sessions
``GET /api/users``              admin          the users (never hashes or secrets)
``POST /api/users``             admin+reauth   ``{"name", "role", "password", "totp"?}`` → 201
``PUT /api/users/{name}``       admin+reauth   ``{"role"?, "password"?, "totp"?}``
``DELETE /api/users/{name}``    admin+reauth   removes the user, ends their sessions
``GET /api/lease``              viewer         the lease state
``POST /api/lease/take``        operator       ``{"force"?: bool}`` (force: admin only)
``POST /api/lease/request``     operator       ask the holder
``POST /api/lease/release``     operator       give up the lease or withdraw a request
``POST /api/lease/handover``    operator       ``{"accept"?: bool}``: the holder answers a request
=============================== ============== ==================================================

Passwords are checked in a worker thread (argon2 is ~0.1 s of CPU), at most two at a
time; beyond 32 waiting, logins get 503 ``busy`` rather than a growing queue.
"""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import Annotated, Any, Callable, TypeVar

import jinja2
import msgspec
from aiohttp import web

from server.config import REPO_ROOT
from server.errors import ApiError
from server.gateway.auth.errors import AuthError, Forbidden, RateLimited
from server.gateway.auth.permissions import ADMIN, ADMIN_REAUTH, OPERATOR, PAGE_PUBLIC, PUBLIC, VIEWER, Role
from server.gateway.auth.service import AUTH_KEY, AuthService, Principal
from server.gateway.auth.users import User, UserError
from server.gateway.http import read_body as read_json
from server.validation import convert

log = logging.getLogger(__name__)

MAX_WAITING_CHECKS = 32
NO_STORE = {"Cache-Control": "no-store"}
T = TypeVar("T")

Name = Annotated[str, msgspec.Meta(max_length=64)]
Password = Annotated[str, msgspec.Meta(max_length=1024)]
Otp = Annotated[str, msgspec.Meta(max_length=16)]


class LoginBody(msgspec.Struct, forbid_unknown_fields=True):
    username: Name
    password: Password
    otp: Otp | None = None
    bearer: bool = False      # true: answer a bearer token for a script instead of setting the cookie


class ReauthBody(msgspec.Struct, forbid_unknown_fields=True):
    password: Password
    otp: Otp | None = None


class PasswordBody(msgspec.Struct, forbid_unknown_fields=True):
    current: Password
    new: Password
    otp: Otp | None = None


class NewUserBody(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    role: Role
    password: Password
    totp: bool = False


class UserChangeBody(msgspec.Struct, forbid_unknown_fields=True):
    role: Role | None = None
    password: Password | None = None
    totp: bool | None = None


class TakeBody(msgspec.Struct, forbid_unknown_fields=True):
    force: bool = False


class HandoverBody(msgspec.Struct, forbid_unknown_fields=True):
    accept: bool = True


class EmptyBody(msgspec.Struct, forbid_unknown_fields=True):
    pass


async def read_body(request: web.Request, kind: type[T]) -> T:
    """The JSON body as ``kind`` (an empty body is ``{}``), through the gateway's one body reader."""
    return convert(await read_json(request), kind)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers=NO_STORE)


def user_error(err: UserError) -> ApiError:
    status = {"not_found": 404, "exists": 409, "last_admin": 409, "users_file": 409, "disk_full": 507,
              "write_failed": 500}.get(err.code, 422)
    return ApiError(str(err), code=err.code, status=status)


async def in_hash_slot(svc: AuthService, fn: Callable[..., T], *args: Any) -> T:
    """Run argon2 work on the service's own two threads, with a bounded queue."""
    if svc.hash_waiting >= MAX_WAITING_CHECKS:
        raise ApiError("too many password checks at once; try again in a moment", code="busy", status=503)
    svc.hash_waiting += 1
    try:
        return await asyncio.get_running_loop().run_in_executor(svc.hash_pool, lambda: fn(*args))
    finally:
        svc.hash_waiting -= 1


# ---------------------------------------------------------------------- credentials
def rate_limited(addr: str, wait_s: float) -> RateLimited:
    seconds = math.ceil(wait_s)
    return RateLimited(f"too many failed logins from {addr}, or one is being checked: try again in {seconds} s",
                       headers={"Retry-After": str(seconds)})


def check_rate(svc: AuthService, addr: str) -> None:
    wait = svc.limiter.retry_after_s(addr)
    if wait > 0:
        raise rate_limited(addr, wait)


def failed(addr: str, name: str, message: str) -> AuthError:
    log.warning("failed login for %r from %s: %s", name[:64], addr, message)
    return AuthError(message, code="invalid_credentials", status=401)


async def check_credentials(svc: AuthService, addr: str, name: str, password: str, otp: str | None) -> User:
    """Password (constant time for unknown names), then the second factor. The attempt is counted
    against the address's limits before the password is checked, as a failure unless it proves
    right, and an address has one check at a time (:meth:`LoginLimiter.begin`)."""
    wait = svc.limiter.begin(addr)
    if wait > 0:
        raise rate_limited(addr, wait)
    counted = True  # a check that is cancelled half-way (the client went away) still counts
    try:
        try:
            user = await in_hash_slot(svc, svc.users.verify_password, name, password)
        except ApiError:  # too many checks waiting: none was made, nothing to count
            counted = False
            raise
        if user is None:
            raise failed(addr, name, "wrong user name or password")
        counted = False  # the password was right
        if user.totp_secret is None:
            if svc.cfg.totp_required:
                raise Forbidden(f"this server requires a second factor and {user.name} has none: an admin must "
                                f"run 'python -m server users passwd {user.name} --totp'")
            return user
        if not otp:
            raise AuthError("enter the 6-digit code of your authenticator app", code="otp_required", status=401)
        if not svc.users.verify_otp(user, otp):
            counted = True
            raise failed(addr, name, "wrong or already used one-time code")
        return user
    finally:
        svc.limiter.end(addr, failed=counted)


# ---------------------------------------------------------------------- handlers
async def login_page(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    env: jinja2.Environment = request.app[JINJA_KEY]
    principal = svc.principal(request)
    html = env.get_template("login.html").render(
        local_mode=svc.local_mode, user=principal.user if principal and principal.session else None)
    return web.Response(text=html, content_type="text/html", headers=NO_STORE)


async def login(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    addr = svc.client(request)
    check_rate(svc, addr)  # before reading the body: a limited client costs nothing
    body = await read_body(request, LoginBody)
    user = await check_credentials(svc, addr, body.username, body.password, body.otp)
    previous = svc.principal(request)
    if previous is not None and previous.session is not None and previous.via == "cookie" and not body.bearer:
        svc.sessions.end(previous.session, "logged_in_again")
    via = "bearer" if body.bearer else "cookie"
    token, session = svc.sessions.create(user.name, via, addr)
    log.info("%s logged in from %s (%s, session %s)", user.name, addr, via, session.id)
    payload = {"user": user.name, "role": user.role.value, "session": session.id,
               "idle_s": svc.cfg.session_idle_s, "max_s": svc.cfg.session_max_s}
    if body.bearer:
        payload["token"] = token
    else:
        payload["csrf_token"] = session.csrf
    resp = json_response(payload)
    if not body.bearer:
        svc.set_cookie(request, resp, token)
    return resp


async def logout(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    principal = svc.principal(request)
    if principal is not None and principal.session is not None:
        svc.sessions.end(principal.session, "logout")
    resp = json_response({"ok": True})
    svc.clear_cookie(request, resp)
    return resp


async def me(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    principal = svc.principal(request)
    assert principal is not None  # the rule is viewer: the middleware has refused anonymous callers
    out = {**principal.to_json(), "local_mode": svc.local_mode, "csrf_token": svc.csrf_token(request),
           "reauth_valid_s": None, "lease": svc.lease_json(request), "users_file_problem": svc.users.problem}
    user = svc.users.get(principal.user)
    if user is not None:
        out["role"] = user.role.value
    if principal.session is not None:
        left = svc.cfg.reauth_s - (svc.clock() - principal.session.reauth_at)
        out["reauth_valid_s"] = round(max(0.0, left), 3)
    return json_response(out)


async def reauth(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    principal = svc.principal(request)
    body = await read_body(request, ReauthBody)
    if principal is None or principal.session is None:
        return json_response({"ok": True, "reauth_valid_s": None})  # local mode: nothing to renew
    await check_credentials(svc, svc.client(request), principal.user, body.password, body.otp)
    principal.session.reauth_at = svc.clock()
    return json_response({"ok": True, "reauth_valid_s": svc.cfg.reauth_s})


async def change_own_password(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    principal = svc.principal(request)
    body = await read_body(request, PasswordBody)
    if principal is None or principal.session is None:
        raise ApiError("local mode has no passwords: add users with 'python -m server users add'",
                       code="local_mode", status=409)
    await check_credentials(svc, svc.client(request), principal.user, body.current, body.otp)
    try:
        await in_hash_slot(svc, lambda: svc.users.update(principal.user, password=body.new))
    except UserError as err:
        raise user_error(err) from None
    svc.users_changed({principal.user})
    resp = json_response({"ok": True, "relogin": True})
    svc.clear_cookie(request, resp)
    return resp


async def list_users(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    return json_response({"users": [u.public() for u in svc.users.users()], "local_mode": svc.local_mode})


async def add_user(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    body = await read_body(request, NewUserBody)
    try:
        user = await in_hash_slot(svc, svc.users.add, body.name, body.role, body.password, body.totp)
    except UserError as err:
        raise user_error(err) from None
    log.info("user %s (%s) added by %s", user.name, user.role.value, _who(request))
    out = {"user": user.public()}
    uri = svc.users.provisioning_uri(user)
    if uri is not None:
        out["totp_uri"] = uri  # shown once: the secret is not readable later
    return json_response(out, status=201)


async def change_user(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    name = request.match_info["name"]
    body = await read_body(request, UserChangeBody)
    try:
        user, credentials = await in_hash_slot(
            svc, lambda: svc.users.update(name, role=body.role, password=body.password, totp=body.totp))
    except UserError as err:
        raise user_error(err) from None
    log.info("user %s changed by %s", user.name, _who(request))
    out: dict[str, Any] = {"user": user.public()}
    if body.totp:
        out["totp_uri"] = svc.users.provisioning_uri(user)
    svc.users_changed({user.name} if credentials else set())
    resp = json_response(out)
    if credentials and _is_self(request, user.name):
        svc.clear_cookie(request, resp)
    return resp


async def remove_user(request: web.Request) -> web.Response:
    svc = request.app[AUTH_KEY]
    name = request.match_info["name"]
    try:
        await asyncio.to_thread(svc.users.remove, name)
    except UserError as err:
        raise user_error(err) from None
    log.info("user %s removed by %s", name, _who(request))
    svc.users_changed({name.lower()})
    resp = json_response({"ok": True, "local_mode": svc.local_mode})
    if _is_self(request, name.lower()):
        svc.clear_cookie(request, resp)
    return resp


def _who(request: web.Request) -> str:
    p = request.app[AUTH_KEY].principal(request)
    return f"{p.user} ({p.via}, {p.remote})" if p else "?"


def _is_self(request: web.Request, name: str) -> bool:
    p = request.app[AUTH_KEY].principal(request)
    return p is not None and p.session is not None and p.user == name


def _lease_party(request: web.Request) -> tuple[AuthService, Principal, str]:
    svc = request.app[AUTH_KEY]
    principal = svc.principal(request)
    if principal is None or principal.session is None:
        raise ApiError("local mode has no control lease: every client on this machine may drive "
                       "(add users to turn the lease on)", code="local_mode", status=409)
    return svc, principal, principal.session.id


async def get_lease(request: web.Request) -> web.Response:
    return json_response(request.app[AUTH_KEY].lease_json(request))


async def take_lease(request: web.Request) -> web.Response:
    body = await read_body(request, TakeBody)
    svc, principal, sid = _lease_party(request)
    if body.force:
        user = svc.users.get(principal.user)
        if user is None or user.role is not Role.ADMIN:
            raise Forbidden("only an admin may take the lease by force")
    svc.lease.take(sid, principal.user, force=body.force)
    return json_response(svc.lease_json(request))


async def request_lease(request: web.Request) -> web.Response:
    await read_body(request, EmptyBody)
    svc, principal, sid = _lease_party(request)
    svc.lease.request(sid, principal.user)
    return json_response(svc.lease_json(request))


async def release_lease(request: web.Request) -> web.Response:
    await read_body(request, EmptyBody)
    svc, _, sid = _lease_party(request)
    svc.lease.release(sid)
    return json_response(svc.lease_json(request))


async def handover_lease(request: web.Request) -> web.Response:
    body = await read_body(request, HandoverBody)
    svc, _, sid = _lease_party(request)
    svc.lease.handover(sid, accept=body.accept)
    return json_response(svc.lease_json(request))


# ---------------------------------------------------------------------- registration
JINJA_KEY = web.AppKey("auth_jinja", jinja2.Environment)

ROUTES = (
    ("GET", "/login", login_page, PAGE_PUBLIC),
    ("POST", "/api/auth/login", login, PUBLIC),
    ("POST", "/api/auth/logout", logout, VIEWER),
    ("GET", "/api/auth/me", me, VIEWER),
    ("POST", "/api/auth/reauth", reauth, VIEWER),
    ("POST", "/api/auth/password", change_own_password, VIEWER),
    ("GET", "/api/users", list_users, ADMIN),
    ("POST", "/api/users", add_user, ADMIN_REAUTH),
    ("PUT", "/api/users/{name}", change_user, ADMIN_REAUTH),
    ("DELETE", "/api/users/{name}", remove_user, ADMIN_REAUTH),
    ("GET", "/api/lease", get_lease, VIEWER),
    ("POST", "/api/lease/take", take_lease, OPERATOR),
    ("POST", "/api/lease/request", request_lease, OPERATOR),
    ("POST", "/api/lease/release", release_lease, OPERATOR),
    ("POST", "/api/lease/handover", handover_lease, OPERATOR),
)


def add_routes(app: web.Application, svc: AuthService, web_dir: Path | None = None) -> None:
    web_dir = web_dir or REPO_ROOT / "web"
    app[JINJA_KEY] = jinja2.Environment(loader=jinja2.FileSystemLoader(str(web_dir / "templates")), autoescape=True)
    for method, path, handler, rule in ROUTES:
        app.router.add_route(method, path, handler)
        svc.permissions.route(method, path, rule)
