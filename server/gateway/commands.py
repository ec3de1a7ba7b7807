"""The command registry and the one command path every transport takes (docs/architecture.md, "The command
path"; issue 19).

:data:`REGISTRY` holds one :class:`~server.gateway.registry.Command` per operator command — the core ones
here (start, stop, reset, heartbeat, e-stop, speed), the arms' (:mod:`server.gateway.arms`), the automatic
motions' (:mod:`server.gateway.navigation`), missions' and experiments' (:mod:`server.gateway.missions`) and vision's (:mod:`server.gateway.vision.routes`). From it:
the HTTP routes (:func:`add_routes`), the websocket's dispatch (:mod:`server.gateway.ws_telemetry`), the
permission table's command rows (:meth:`Registry.permission_rows`), replay's refusals
(:meth:`Registry.robot_routes`), ``GET /api/robot`` → ``commands`` (:meth:`Registry.listed`) and the
command table of docs/api.md (:meth:`Registry.to_markdown`, checked by a test).

:meth:`Dispatcher.dispatch` runs a command the same way whatever brought it:

1. **validation**: the command is known (else 422 ``unknown_command``, before anything: a type nobody
   handles is no permission question), offered by this robot (409 ``unavailable``), its body valid for
   its struct and the robot's limits; a failure is held, not answered yet —
2. **permission and lease**: the sender's role, fresh password and the control lease, by the command's
   rule (an unauthorised sender learns nothing of its body's faults: the refusal is the permission's, as
   over HTTP, where the trust middleware checks the same rule before the body is read) —
3. **rate limit**: the sender's per-address message budget, for a transport that has one —
4. **record** and 5. **the runtime call**: the call and its outcome are recorded together
   (``Hooks.on_command``): a refusal by validation or by the runtime is recorded as refused.

The e-stop has its own place: every transport latches it before anything else (HTTP before the body is
read, a message transport on the raw frame's scan, :mod:`server.gateway.estop`) with
:meth:`Dispatcher.latch_estop`; it is never refused, never rate-limited, and recorded after the latch.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator

import msgspec
from aiohttp import web

from server.errors import ApiError, ConflictError, MalformedError, RuntimeDownError, ValidationError
from server.gateway import arms, missions, navigation
from server.gateway.auth import AUTH_KEY
from server.gateway.auth.errors import Forbidden
from server.gateway.auth.permissions import ESTOP, LEASE, Rule
from server.gateway.estop import estop_reason
from server.gateway.hooks import HOOKS, Hooks
from server.gateway.http import read_body, read_raw_body
from server.gateway.keys import BUCKETS, PROFILE, RUNTIME
from server.gateway.link import CommandStream, check_stamps
from server.gateway.ratelimit import budget_key
from server.gateway.registry import (ENVELOPE, HTTP, TRANSPORTS, Command, Context, RawBody, Transport)
from server.gateway.vision import routes as vision_routes
from server.runtime_api.client import DOWN_MESSAGE, RuntimeClient
from server.runtime_api.params import Empty, EstopParams, Hold, Speed
from server.validation import convert, reject_unknown

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- the core commands
async def parse_bare(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """start, stop, reset, heartbeat take no fields."""
    reject_unknown(body, ())
    return {}


def plain(method: str):
    async def call(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        return await ctx.request(method)
    return call


async def heartbeat(ctx: Context, params: dict[str, Any]) -> dict[str, Any] | None:
    """Over a message transport one-way (at 10–50 Hz an answer each is noise; a refusal still comes back)."""
    if ctx.transport.message:
        if not ctx.runtime.notify("heartbeat", ctx.stamps or None, principal=ctx.principal):
            raise RuntimeDownError(DOWN_MESSAGE)
        return None
    return await ctx.request("heartbeat", ctx.stamps or None)


def declared(desc: dict[str, Any]) -> tuple[str, ...]:
    """The commands the robot's controller declares (``GET /api/robot`` → ``commands``; a recording made before
    controllers declared them: the rover's)."""
    if "commands" in desc:
        return tuple(desc["commands"])
    return ("speed",) if desc.get("profile", "rover") in ("rover", "") else ()


async def parse_speed(body: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """A rover's setpoint within its limits; to an arm or a platform (which declare no ``speed``) zero is "stand
    still", a hold (what the dashboard sends when it reconnects), and anything else is refused."""
    desc = arms.description(ctx)
    speed = convert(body, Speed)
    if "speed" not in declared(desc):
        if speed.linear != 0.0 or speed.angular != 0.0:
            raise REGISTRY.unavailable("speed", desc)
        return {"setpoint": msgspec.to_builtins(Hold())}
    speed.check(desc["limits"])
    params: dict[str, Any] = {"setpoint": {"linear": speed.linear, "angular": speed.angular}}
    if speed.ttl_s is not None:
        params["ttl_s"] = speed.ttl_s
    return params


async def parse_estop(body: dict[str, Any], ctx: Context) -> dict[str, Any]:  # pragma: no cover - never called
    raise AssertionError("the e-stop is latched by Dispatcher.estop, never parsed first")


#: the e-stop: in the registry (its route, its websocket type, its rule, the docs) but dispatched apart
ESTOP_COMMAND = Command("estop", "/api/estop", ESTOP, parse_estop, plain("estop"), body=EstopParams, moves=False,
                        estop=True, doc="latched e-stop; never refused")

CORE: tuple[Command, ...] = (
    Command("start", "/api/start", LEASE, parse_bare, plain("start"), body=Empty, doc="idle → running"),
    Command("stop", "/api/stop", LEASE, parse_bare, plain("stop"), body=Empty, moves=False, doc="controlled stop"),
    Command("reset", "/api/reset", LEASE, parse_bare, plain("reset"), body=Empty, moves=False,
            doc="estop/fault → idle once the cause is gone"),
    # a non-holder's heartbeat must not keep the link alive: the lease here, the holder in the runtime
    Command("heartbeat", "/api/heartbeat", LEASE, parse_bare, heartbeat, body=Empty, moves=False, record="none",
            doc="keeps the link alive"),
    ESTOP_COMMAND,
    Command("speed", "/api/speed", LEASE, parse_speed, arms.setpoint, body=Speed, empty_ok=False,
            doc="a rover's setpoint (zero: a hold for an arm or a platform)"),
)


# ---------------------------------------------------------------------- the registry
class Registry:
    """The commands by name and by route; see the module docstring."""

    def __init__(self, commands: Iterable[Command]) -> None:
        self.commands: dict[str, Command] = {}
        paths: set[str] = set()
        for c in commands:
            if c.name in self.commands or c.path in paths:
                raise ValueError(f"command {c.name} ({c.path}): its name or route is taken")
            self.commands[c.name] = c
            paths.add(c.path)

    def __iter__(self) -> Iterator[Command]:
        return iter(self.commands.values())

    def __contains__(self, name: object) -> bool:
        return name in self.commands

    def get(self, name: str) -> Command | None:
        return self.commands.get(name)

    def known(self, desc: dict[str, Any] | None) -> tuple[str, ...]:
        """What a robot takes, for the messages that list it: everyone's, then its controller's."""
        if desc is None:
            return tuple(self.commands)
        return tuple(c.name for c in CORE if c.name != "speed") + declared(desc)

    def listed(self, desc: dict[str, Any]) -> list[str]:
        """``GET /api/robot`` → ``commands``: the controller's commands this gateway can dispatch."""
        return [n for n in declared(desc) if n in self.commands]

    def unknown(self, name: str, desc: dict[str, Any] | None) -> ValidationError:
        return ValidationError(f"unknown command {name!r}; known: {', '.join(self.known(desc))}",
                               code="unknown_command")

    def unavailable(self, name: str, desc: dict[str, Any]) -> ConflictError:
        return ConflictError(f"{name} is not a command of this robot (a {desc.get('profile', 'rover')}); it takes: "
                             f"{', '.join(self.known(desc))}", code="unavailable")

    def robot_routes(self) -> tuple[str, ...]:
        """Every command's route, up to its first ``{}`` (replay refuses them by prefix: no robot is attached)."""
        return tuple(c.path.split("{")[0] for c in self)

    def permission_rows(self) -> tuple[list[tuple[str, str, Rule]], list[tuple[str, str, Rule]]]:
        """The permission table's rows for the commands: HTTP routes, and the message types of every message
        transport's socket (``/ws/telemetry``)."""
        return ([("POST", c.path, c.rule) for c in self], [("/ws/telemetry", c.name, c.rule) for c in self])

    def to_markdown(self) -> str:
        """The command table of docs/api.md."""
        lines = ["| command (websocket `type`) | HTTP route | needs | moves | robots | body fields | what it does |",
                 "|---|---|---|---|---|---|---|"]
        for c in self:
            fields = ", ".join(f"`{f.encode_name}`" for f in msgspec.structs.fields(c.body)) if c.body else ""
            if c.upload:
                fields = "JSON or CSV (HTTP: up to 16 MiB), below"
            offered = "its controller's" if c.offered == "declared" else "all"
            lines.append(f"| `{c.name}` | `POST {c.path}` | {c.rule.label} | {'yes' if c.moves else 'no'} | "
                         f"{offered} | {fields or 'none'} | {c.doc} |")
        return "\n".join(lines)


REGISTRY = Registry((*CORE, *arms.COMMANDS, *navigation.COMMANDS, *missions.COMMANDS, *vision_routes.COMMANDS))


# ---------------------------------------------------------------------- dispatch
def principal_id(principal: Any) -> str | None:
    """How the runtime knows who sent a request (the holder of control, :mod:`server.runtime_api.service`): the
    user and the session's public id; ``local`` in local mode (one machine, one implicit holder)."""
    if principal is None:
        return None
    session = getattr(principal, "session", None)
    return "local" if session is None else f"{principal.user}/{session.id}"


class Dispatcher:
    """Runs commands for one app; see the module docstring for the steps."""

    def __init__(self, app: web.Application, registry: Registry = REGISTRY) -> None:
        self.app = app
        self.registry = registry

    @property
    def runtime(self) -> RuntimeClient:
        return self.app[RUNTIME]

    def resolve(self, name: Any) -> Command:
        entry = self.registry.get(name) if isinstance(name, str) else None
        if entry is None:
            raise self.registry.unknown(str(name), self.runtime.description)
        return entry

    async def dispatch(self, principal: Any, command: str | Command, body: Any, transport: Transport | str, *,
                       request: Any = None, charge: "Charge | None" = None,
                       stream: CommandStream | None = None) -> dict[str, Any] | None:
        """Run ``command`` for ``principal`` (:class:`server.gateway.auth.Principal`) with ``body`` (a dict, a
        :class:`RawBody`, or the :class:`ApiError` the transport met reading it) that came by ``transport`` (or
        its name: ``"datachannel"``). ``request``: the request that authenticated the sender (the recording
        names the principal from it); ``charge``: the budget the transport spent for this message's frame already
        (:meth:`charge_frame`; used once: anything else is charged here); ``stream``: the socket's
        :class:`~server.gateway.link.CommandStream` (its clock offset turns the envelope's ``sent_t`` into the
        runtime's clock; without one, ``seq``/``sent_t`` are checked and arrival-time rules apply). Returns the
        runtime's result (None for a one-way heartbeat); raises the refusal."""
        transport = TRANSPORTS[transport] if isinstance(transport, str) else transport
        entry = command if isinstance(command, Command) else self.resolve(command)
        if entry.estop:
            return await self.estop(principal, body, transport, request=request)
        ctx = Context(self.runtime, self.runtime.description, transport, principal_id(principal), self.app)
        params: Any = None
        invalid: ApiError | None = None
        try:  # 1. validation (held: permission speaks first)
            if isinstance(body, ApiError):
                raise body
            if transport.message and isinstance(body, dict):
                seq, sent_t = check_stamps(body)
                if stream is not None:
                    ctx.stamps.update(stream.params(seq, sent_t))
                body = {k: v for k, v in body.items() if k not in ENVELOPE}
            self.check_offered(entry, ctx.description)
            params = await entry.parse(body, ctx)
        except ApiError as err:
            invalid = err
        self.authorize(principal, entry)  # 2. permission and lease
        if transport.limited:  # 3. rate limit
            if isinstance(charge, Charge) and not charge.used:
                charge.used = True
            else:
                self.charge(principal)
        try:  # 4. record, 5. the runtime call
            if invalid is not None:
                raise invalid
            result = await entry.call(ctx, params)
        except ApiError as err:
            self.record(entry, body, params, transport, request, principal, error=err)
            raise
        if stream is not None:
            stream.note(result)
        self.record(entry, body, params, transport, request, principal, result)
        return result

    def check_offered(self, entry: Command, desc: dict[str, Any] | None) -> None:
        if entry.offered != "declared":
            return
        if desc is None:
            raise RuntimeDownError(DOWN_MESSAGE)
        if entry.name not in declared(desc):
            raise self.registry.unavailable(entry.name, desc)

    def authorize(self, principal: Any, entry: Command) -> None:
        auth = self.app.get(AUTH_KEY)
        if auth is None:  # no trust layer: nobody may (default deny)
            raise Forbidden(f"{entry.name}: no permission table")
        auth.authorize_rule(principal, entry.rule)

    def charge_frame(self, budget: str) -> "Charge | None":
        """Spend one message of a budget (:func:`~server.gateway.ratelimit.budget_key`) for a frame before it is
        parsed (None: refused; the bucket says whether the sender floods). The :class:`Charge` pays for that
        frame's command in :meth:`dispatch`."""
        bucket = self.app[BUCKETS].get(budget or "?")
        return Charge(bucket) if bucket.take() else None

    def charge(self, principal: Any) -> None:
        """The sender's budget (its address and login session, :func:`~server.gateway.ratelimit.budget_key`),
        shared by every message transport (a data channel beside a websocket buys no second budget)."""
        tcfg = self.app[PROFILE].telemetry
        bucket = self.app[BUCKETS].get(budget_key(principal, getattr(principal, "remote", None)))
        if not bucket.take():
            raise ApiError(f"over {tcfg.command_rate_hz:g} messages/s (burst {tcfg.command_burst}): message refused",
                           code="rate_limited", status=429, details={"refused": bucket.refused})

    def record(self, entry: Command, body: Any, params: Any, transport: Transport, request: Any, principal: Any,
               result: dict[str, Any] | None = None, error: ApiError | None = None) -> None:
        hooks = self.app[HOOKS].on_command
        if not hooks or entry.record == "none":
            return
        if entry.record == "params" and params is not None:
            shown: Any = params
        elif entry.record == "summary":
            shown = entry.summary(params) if params is not None and entry.summary else None
        else:
            shown = body if isinstance(body, dict) else None
        Hooks.call(hooks, {"command": entry.name, "body": shown, "accepted": error is None, "source": transport.name,
                           "state": (result or {}).get("state"), "error": error.to_json() if error else None,
                           "request": request, "principal": principal_id(principal)})

    # ------------------------------------------------------------------ the e-stop
    async def latch_estop(self) -> tuple[dict[str, Any], list[str]]:
        """Latch the e-stop (retried over a lost link): the outcome and its warnings so far."""
        outcome = await self.runtime.estop()
        return outcome, [outcome["warning"]] if "warning" in outcome else []

    async def note_reason(self, outcome: dict[str, Any], raw: bytes | str, warnings: list[str]) -> str:
        """The reason an e-stop's body gives, added to the latched e-stop (when the runtime confirmed it); what
        had to be replaced or ignored is appended to ``warnings``. Never raises: the e-stop happened already."""
        reason, warning = estop_reason(raw)
        if reason and outcome["latch"] in ("confirmed", "retried"):
            try:
                await self.runtime.request("estop_reason", {"reason": reason})
            except ApiError:
                pass
        if warning:
            warnings.append(warning)
        return reason

    def record_estop(self, body: dict[str, Any], transport: Transport, request: Any, principal: Any,
                     reply: dict[str, Any]) -> None:
        self.record(ESTOP_COMMAND, body, None, transport, request, principal, reply)

    async def estop(self, principal: Any, body: Any, transport: Transport, *, request: Any = None) -> dict[str, Any]:
        """An e-stop that arrived parsed (``dispatch(..., "estop", body, ...)``): latched, then its reason."""
        outcome, warnings = await self.latch_estop()
        reply: dict[str, Any] = {"ok": True, "state": outcome["state"], "latch": outcome["latch"]}
        body = {k: v for k, v in body.items() if k not in ENVELOPE} if isinstance(body, dict) else {}
        reason = await self.note_reason(outcome, msgspec.json.encode(body), warnings) if body else ""
        if warnings:
            reply["warning"] = "; ".join(warnings)
        self.record_estop({"reason": reason} if reason else {}, transport, request, principal, reply)
        return reply


class Charge:
    """A message's budget, spent at its frame (:meth:`Dispatcher.charge_frame`); pays for one dispatch."""

    __slots__ = ("bucket", "used")

    def __init__(self, bucket: Any) -> None:
        self.bucket = bucket
        self.used = False


DISPATCHER = web.AppKey("dispatcher", Dispatcher)


def dispatcher(app: web.Application) -> Dispatcher:
    """The app's dispatcher (what a new transport calls: ``dispatcher(app).dispatch(principal, name, body,
    "datachannel")``)."""
    return app[DISPATCHER]


# ---------------------------------------------------------------------- HTTP
def principal_of(request: web.Request) -> Any:
    auth = request.app.get(AUTH_KEY)
    return auth.principal(request) if auth is not None else None


async def read_upload(request: web.Request) -> RawBody:
    """The whole body (up to :data:`arms.MAX_TRAJECTORY_BYTES`) and whether it is CSV. A body this big arrives in
    many chunks: read until the end, within ``server.body_timeout_s``."""
    limit = arms.MAX_TRAJECTORY_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise MalformedError(f"body of {request.content_length} bytes is over the {limit}-byte limit",
                             code="too_large", status=413)
    body = await read_raw_body(request, limit)
    if len(body) > limit:
        raise MalformedError(f"body is over the {limit}-byte limit", code="too_large", status=413)
    return RawBody(body, request.content_type in ("text/csv", "text/plain"))


def http_handler(entry: Command):
    """``POST entry.path``: the body read (an error reading it is the body: it is recorded and answered after the
    permission check, like any invalid body), then :meth:`Dispatcher.dispatch`."""
    async def handle(request: web.Request) -> web.StreamResponse:
        body: Any
        if entry.upload and request.app[RUNTIME].description is None:
            raise RuntimeDownError(DOWN_MESSAGE)  # before 16 MiB are read for nothing
        try:
            body = await (read_upload(request) if entry.upload else read_body(request, allow_empty=entry.empty_ok))
        except ApiError as err:
            body = err
        if entry.http_body is not None and not isinstance(body, ApiError):
            body = entry.http_body(dict(request.match_info), body)
        result = await request.app[DISPATCHER].dispatch(principal_of(request), entry, body, HTTP, request=request)
        assert result is not None
        if entry.http_reply is not None:
            return entry.http_reply(request, result)
        if entry.reply == "result":
            return web.json_response(result)
        return web.json_response({"ok": True, "state": result["state"]})

    handle.__name__ = f"post_{entry.name}"
    return handle


async def post_estop(request: web.Request) -> web.Response:
    """The e-stop is never refused: it latches before the body is even read, whatever the body, its
    content type or its size; a reason that is not a string of at most 200 characters is replaced and
    the answer says so. An e-stop that met a lost link is sent again on the new one until the runtime
    confirms it; ``latch`` says how it went (:meth:`RuntimeClient.estop`)."""
    d = request.app[DISPATCHER]
    outcome, warnings = await d.latch_estop()
    reply: dict[str, Any] = {"ok": True, "state": outcome["state"], "latch": outcome["latch"]}
    try:
        raw = await read_raw_body(request)
    except Exception as err:  # noqa: BLE001 - nothing about the body may refuse the stop
        raw, warnings = b"", [*warnings, f"body ignored: {err}"]
    reason = await d.note_reason(outcome, raw, warnings)
    if warnings:
        reply["warning"] = "; ".join(warnings)
    d.record_estop({"reason": reason} if reason else {}, HTTP, request, principal_of(request), reply)
    return web.json_response(reply)


def add_routes(app: web.Application, registry: Registry = REGISTRY) -> Dispatcher:
    """Every command's HTTP route, and the app's dispatcher."""
    d = app[DISPATCHER] = Dispatcher(app, registry)
    for entry in registry:
        app.router.add_post(entry.path, post_estop if entry.estop else http_handler(entry))
    return d


__all__ = ["CORE", "Charge", "DISPATCHER", "ESTOP_COMMAND", "Dispatcher", "REGISTRY", "Registry", "add_routes", "dispatcher",
           "principal_id"]
