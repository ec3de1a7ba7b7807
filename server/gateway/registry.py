"""The command registry's types: one :class:`Command` per operator command, the :class:`Envelope` a message
transport wraps a body in, and :class:`Transport`, what a way in declares (docs/architecture.md, "The
command path").

Issue 19: a command was listed in six places (``commands.COMMANDS``, ``arms.COMMON_COMMANDS``, ``app.py``'s
``run_command``, ``PROFILE_COMMANDS``, the permission table, ``replay.ROBOT_ROUTES``) and recorded by hand
at nine sites; each new transport or command touched eight to ten files. Here a command is one entry; the
HTTP routes, the websocket's dispatch, the permission table's command rows, replay's refusals, ``GET
/api/robot`` → ``commands`` and the command table of docs/api.md are built from the entries
(:data:`server.gateway.commands.REGISTRY`), and every transport runs them through one
:func:`~server.gateway.commands.Dispatcher.dispatch`.

This module holds only the types, so that the modules that give a command its parser and its runtime
call (``arms``, ``navigation``, ``vision/routes``) can declare their entries without importing the
dispatcher.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal

import msgspec

from server.gateway.auth.permissions import Rule
from server.runtime_api.client import RuntimeClient
from server.validation import fields_of


class Envelope(msgspec.Struct):
    """The fields a message transport (the websocket, a data channel) carries beside a command's body:
    ``{"type": "speed", "id": 7, "linear": 0.2, ...}``. A field added here is taken, and checked against the
    body's own, by every message transport. ``seq`` (strictly increasing per socket) and ``sent_t`` (the sender's
    clock, seconds) stamp motion commands and heartbeats (issue 20 §2, :mod:`server.gateway.link`): a command
    too old or out of order is dropped by the runtime, never applied late."""

    type: str
    id: str | int | None = None
    seq: int | None = None
    sent_t: float | None = None


#: the envelope's field names (never a body field; an HTTP body has none of them)
ENVELOPE: tuple[str, ...] = fields_of(Envelope)


@dataclass(frozen=True)
class RawBody:
    """A body the transport did not decode (an HTTP upload up to 16 MiB, JSON or CSV): the command's parser
    decodes it, off the event loop."""

    data: bytes
    csv: bool


@dataclass(frozen=True)
class Context:
    """What a command's parser and runtime call get: the runtime client and its description (None while the
    runtime is down), and the transport it came by."""

    runtime: RuntimeClient
    description: dict[str, Any] | None
    transport: "Transport"
    #: who sent it, as the runtime knows the holder of control (:func:`server.gateway.commands.principal_id`)
    principal: str | None = None
    #: the gateway app (a feature's own state, by its key)
    app: Any = None
    #: a stamped command's ``seq``/``sent_t``/``stream``/``rtt_s`` for the runtime (:mod:`server.gateway.link`;
    #: ``{}``: arrival-time rules); the setpoint and heartbeat calls pass them on
    stamps: dict[str, Any] = field(default_factory=dict)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """A runtime request on the sender's behalf (its principal rides in the header: only the holder of
        control keeps the robot alive, :mod:`server.runtime_api.service`)."""
        return await self.runtime.request(method, params, principal=self.principal)


Parser = Callable[[Any, Context], Awaitable[Any]]
Caller = Callable[[Context, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Command:
    """One operator command, on every transport.

    * ``name``: the websocket ``type`` (and a data channel's), the name it is recorded under;
    * ``path``: its HTTP route (``POST``);
    * ``body``: the msgspec struct of its body (None: no fields), for the docs;
    * ``rule``: who may send it (role, lease, fresh password; :mod:`server.gateway.auth.permissions`);
    * ``moves``: whether it can move the robot (replay refuses every command; the docs say which move);
    * ``offered``: ``"always"`` (every robot; the runtime refuses what its robot cannot do) or
      ``"declared"`` (only a robot whose ``GET /api/robot`` → ``commands`` names it: another robot's is
      409 ``unavailable``);
    * ``parse(body, ctx)``: validation at the edge (a dict, or a :class:`RawBody`) → the runtime call's
      parameters; ``call(ctx, params)``: the runtime call → its result;
    * ``record``: how it is recorded: ``"body"`` (as sent), ``"params"`` (as validated), ``"summary"``
      (:attr:`summary` of the params: a 16 MiB trajectory is recorded as its size), ``"none"`` (heartbeats:
      10–50 a second of nothing);
    * ``reply``: what an HTTP answer and a websocket ``ack`` carry: ``"state"`` (``{"ok", "state"}``) or
      ``"result"`` (the runtime's whole result; the ``ack`` has it under ``result``);
    * ``http_body(match, body)``: the command's body from its HTTP route's match (``{name}`` in ``path``) and the
      request's body (``POST /api/experiments/{name}``: the URL names the experiment);
    * ``empty_ok``: an empty HTTP body is ``{}``; ``upload``: the HTTP body is read raw up to 16 MiB
      (JSON or CSV) and parsed in a worker thread.
    """

    name: str
    path: str
    rule: Rule
    parse: Parser
    call: Caller
    body: type | None = None
    moves: bool = True
    offered: Literal["always", "declared"] = "always"
    record: Literal["body", "params", "summary", "none"] = "body"
    summary: Callable[[Any], dict[str, Any]] | None = None
    reply: Literal["state", "result"] = "state"
    empty_ok: bool = True
    upload: bool = False
    http_reply: Callable[[Any, dict[str, Any]], Any] | None = None
    http_body: Callable[[dict[str, str], Any], Any] | None = None
    doc: str = ""
    estop: bool = False


@dataclass(frozen=True)
class Transport:
    """A way commands arrive, as :meth:`~server.gateway.commands.Dispatcher.dispatch` sees it.

    * ``name``: what the runtime is told (``source``) and the recording shows;
    * ``message``: a message stream (an envelope around each body, replies as ``ack``/``error``, heartbeats
      one-way) rather than request/response (HTTP);
    * ``limited``: its commands spend the sender's per-address message budget (``telemetry.command_rate_hz``)
      in the dispatcher's rate-limit step, unless the transport spent it already for the frame (the
      websocket does, before parsing: a flood of garbage costs the same as one of commands);
      HTTP is bounded by the connection guard and the request deadlines instead.
    """

    name: str
    message: bool
    limited: bool

    @property
    def envelope(self) -> tuple[str, ...]:
        return ENVELOPE if self.message else ()


HTTP = Transport("http", message=False, limited=False)
WEBSOCKET = Transport("websocket", message=True, limited=True)
#: the WebRTC data channel (server/gateway/webrtc/): messages like the websocket's, charged in the dispatcher
DATACHANNEL = Transport("datachannel", message=True, limited=True)
#: the fleet: a hub user's signed Zenoh query (server/gateway/fleet/robot.py), charged in the dispatcher per hub user
FLEET = Transport("fleet", message=True, limited=True)
#: the transports by name: ``dispatch(..., transport="datachannel")``; a new one is one line here
TRANSPORTS: dict[str, Transport] = {t.name: t for t in (HTTP, WEBSOCKET, DATACHANNEL, FLEET)}


__all__ = ["Command", "Context", "DATACHANNEL", "ENVELOPE", "Envelope", "FLEET", "HTTP", "RawBody", "TRANSPORTS", "Transport",
           "WEBSOCKET"]
