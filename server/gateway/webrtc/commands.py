"""The one adapter from a data-channel message to the gateway's command path.

Every data-channel message goes where a ``/ws/telemetry`` message goes: the telemetry socket's rate
limit (the same per-address bucket, so a second transport buys no second budget), then
``server.gateway.ws_telemetry.handle_ws_message`` (the DATACHANNEL transport) with the **signalling socket's**
upgrade request, so who may send what (role, lease, the e-stop for everyone), the recording of
commands and the replies are exactly the websocket's (docs/security.md; the signalling socket's
messages have the telemetry socket's rules, :func:`mirror_permissions`). A transport adds framing,
never a check of its own (docs/architecture.md).

The envelope (issue 20 §2) is the websocket's: the dashboard sends ``seq`` (integer, increasing per
channel) and ``sent_t`` (its clock, s) with every speed and heartbeat, and each channel is a
:class:`~server.gateway.link.CommandStream` of its own (the runtime keeps the last ``seq`` applied per
stream) on one :class:`~server.gateway.link.LinkClock` for the peer: the peer drives the same NTP-style
exchange as the telemetry socket (``{"type": "sync", "t1"}`` out on ``control``, the browser's
``{"type": "sync", "t1", "t2", "t3"}`` back), measured on the data channel's own path (UDP, not the
socket's TCP). So the runtime drops a data-channel command that is too old (``safety.max_command_age_s``;
a browser's SCTP send queue can hold one back under congestion) or not newer than the last applied, and
counts it (an ack with ``dropped`` comes back, as on the socket); until the clock is synced, arrival-time
rules apply. The adapter itself only counts what it sees (``arrived_out_of_order``: a ``seq`` not above the
last one of its channel, whatever the runtime then does; the drops are the runtime's, per stream in ``streams``).

Channels (the browser opens both, web/static/js/video/datachannels.js): ``control`` is unordered
with no retransmission (speed and heartbeats: the latest wins, a lost one is replaced 50 ms later,
nothing waits behind a loss: aiortc's SCTP has a 1 s minimum RTO, so a reliable ordered channel can
stall ≥ 1 s on one lost packet); ``estop`` is reliable and ordered, and the dashboard sends the
e-stop on it **and** on the websocket and over HTTP at once (the runtime latches the first). On
``control`` only errors and drops are answered (an ack per speed is noise); on ``estop`` every reply goes back.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from server.gateway.commands import Charge, principal_of
from server.gateway.estop import looks_like_estop
from server.gateway.keys import BUCKETS, HUB
from server.gateway.link import CommandStream, LinkClock
from server.gateway.ratelimit import budget_key
from server.gateway.registry import DATACHANNEL
from server.gateway.ws_telemetry import handle_ws_message

log = logging.getLogger(__name__)

CONTROL, ESTOP = "control", "estop"


@dataclass(frozen=True)
class Envelope:
    """What the transport adds to a command: its sequence number and send time (client clock, s)."""

    seq: int | None
    sent_t: float | None
    received_t: float  # time.monotonic() at arrival
    channel: str


@dataclass
class CommandChannel:
    """One peer connection's command path (its data channels share it)."""

    app: web.Application
    request: web.Request  # the signalling socket's upgrade request: who opened it, from where
    envelope: Envelope | None = None
    counters: dict[str, int] = field(default_factory=lambda: {
        "received": 0, "forwarded": 0, "errors": 0, "rate_limited": 0, "arrived_out_of_order": 0, "estops": 0})
    _last_seq: dict[str, int] = field(default_factory=dict)
    clock: LinkClock = field(default_factory=lambda: LinkClock(lossy=True))  # the peer's, synced over ``control``
    streams: dict[str, CommandStream] = field(default_factory=dict)

    budget: str = ""  # whose message budget this peer spends (its signalling socket's session, at its address)

    def __post_init__(self) -> None:
        self.budget = budget_key(principal_of(self.request), self.request.remote)
        totals = self.app[HUB].commands_dropped if HUB in self.app else None  # /metrics' counts
        for channel in (CONTROL, ESTOP):
            self.streams[channel] = CommandStream(self.clock, totals=totals)

    def sync_due(self) -> str | None:
        """The clock-sync message to send on ``control`` now, if one is due."""
        return orjson.dumps(self.clock.ping()).decode() if self.clock.due() else None

    async def handle(self, text: str | bytes, channel: str) -> str | None:
        """One message → the reply to send back on the channel (None: nothing)."""
        self.counters["received"] += 1
        if isinstance(text, bytes):
            return self._error(None, "malformed", "binary messages are not accepted")
        estop = looks_like_estop(text)
        if estop:
            self.counters["estops"] += 1
        bucket = self.app[BUCKETS].get(self.budget)
        if not bucket.take() and not estop:
            self.counters["rate_limited"] += 1
            return self._error(None, "rate_limited", "over the command rate: message refused") \
                if channel == ESTOP or bucket.refused % 50 == 1 else None
        error = self._note_envelope(text, channel, estop)
        if error is not None:
            return error
        reply = await self.forward(text, estop, Charge(bucket), self.streams.get(channel))
        if reply is None:
            return None
        if reply.get("type") == "error":
            self.counters["errors"] += 1
        elif channel == CONTROL and not reply.get("dropped"):
            return None  # acks of speeds are noise on the fast channel; errors and drops still come back
        return orjson.dumps(reply).decode()

    async def forward(self, text: str, estop: bool, charge: Charge,
                      stream: CommandStream | None = None) -> dict[str, Any] | None:
        """The command path: the websocket's message handler with the data channel as its transport, so that
        :meth:`~server.gateway.commands.Dispatcher.dispatch` runs validation, permission and lease, rate limit
        (``charge``: this frame's budget, spent above), freshness (``stream``: ``seq``/``sent_t`` on the
        runtime's clock), record and the runtime call as for every transport."""
        self.counters["forwarded"] += 1
        return await handle_ws_message(self.app, text, self.request, estop, DATACHANNEL, charge=charge,
                                       stream=stream)

    # ---------------------------------------------------------------- the envelope
    def _note_envelope(self, text: str, channel: str, estop: bool) -> str | None:
        """Note the message's ``seq``/``sent_t`` (:attr:`envelope`, the ``arrived_out_of_order`` count); the command path
        checks and applies them. A wrong type is answered here with the field named (nothing applied), except
        on an e-stop, which is never refused; unparsable text goes on as it is (the command path answers it,
        and latches it if it is an e-stop)."""
        now = time.monotonic()
        if "seq" not in text and "sent_t" not in text:
            self.envelope = Envelope(None, None, now, channel)
            return None
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(body, dict):
            return None
        seq, sent_t = body.get("seq"), body.get("sent_t")
        msg_id = body.get("id") if isinstance(body.get("id"), (str, int)) else None
        bad = None
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**53):
            bad = "seq must be an integer in [0, 2**53)"
        elif sent_t is not None and (isinstance(sent_t, bool) or not isinstance(sent_t, (int, float))
                                     or not math.isfinite(sent_t)):
            bad = "sent_t must be a finite number (the sender's clock, s)"
        if bad is not None:
            self.envelope = Envelope(None, None, now, channel)
            return None if estop else self._error(msg_id, "wrong_type", bad)
        if seq is not None:
            last = self._last_seq.get(channel)
            if last is not None and seq <= last:
                self.counters["arrived_out_of_order"] += 1
            self._last_seq[channel] = max(seq, last if last is not None else seq)
        self.envelope = Envelope(seq, None if sent_t is None else float(sent_t), now, channel)
        return None

    def _error(self, msg_id: Any, code: str, message: str) -> str:
        self.counters["errors"] += 1
        return orjson.dumps({"type": "error", "id": msg_id, "error": {"code": code, "message": message}}).decode()

    def to_json(self) -> dict[str, Any]:
        env = self.envelope
        return {**self.counters, "last_seq": dict(self._last_seq),
                "last": None if env is None else {"seq": env.seq, "sent_t": env.sent_t, "channel": env.channel},
                "clock": self.clock.to_json(),
                "streams": {name: stream.to_json(self.app[HUB].runtime_drops() if HUB in self.app else None)
                            for name, stream in self.streams.items()}}


def mirror_permissions(table: Any, path: str, source: str = "/ws/telemetry") -> None:
    """Give the signalling socket's messages the telemetry socket's rules (its data channels carry
    those messages, authorised against this socket's request)."""
    for sock, kind, rule in table.ws_messages():
        if sock == source:
            table.ws(path, kind, rule)
