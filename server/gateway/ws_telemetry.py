"""``/ws/telemetry``: the dashboard's socket — snapshots out (the hub's fan-out, :mod:`server.gateway.telemetry`),
commands in. Each frame is scanned for an e-stop on its raw bytes first (latched whatever else the frame is:
binary, invalid UTF-8, oversized, malformed; issue 18), charged against the sender's per-address budget
(before parsing: garbage costs the same as commands), then parsed and its envelope read; a command goes
through the one command path (:meth:`server.gateway.commands.Dispatcher.dispatch`), ``ping`` is answered here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from server.errors import ApiError, MalformedError, ValidationError
from server.gateway import tcpinfo
from server.gateway.admission import ADMISSION
from server.gateway.commands import DISPATCHER, Charge, principal_of
from server.gateway.estop import looks_like_estop
from server.gateway.hooks import HOOKS, Hooks
from server.gateway.keys import BUCKETS, HUB, PROFILE
from server.gateway.link import CommandStream
from server.gateway.ratelimit import budget_key
from server.gateway.registry import ENVELOPE, WEBSOCKET, Transport
from server.gateway.state import robot_description, state_text
from server.gateway.subscription import Subscription, parse_subscribe
from server.gateway.telemetry import TelemetryClient, dumps
from server.validation import MAX_BODY_BYTES, number, parse_object, reject_unknown

log = logging.getLogger(__name__)


#: the largest message ``/ws/telemetry`` reads whole, bytes: over the 64 KiB a command may take, so that an e-stop
#: padded up to here is still seen and latched before the socket closes (1009); beyond it aiohttp closes the socket
#: at the frame's header, before any byte of it is buffered (docs/safety.md). At most this much per socket
#: (``telemetry.max_clients`` × 256 KiB in all).
MAX_WS_MESSAGE_BYTES = 256 * 1024
#: a message longer than this closes the socket (1009), after the e-stop scan
WS_CLOSE_BYTES = 4 * MAX_BODY_BYTES
#: a client closed for flooding: how long its queued error may take to go (its frames still scanned for e-stops
#: meanwhile), and the pause in its frames after which, the queue gone, it closes at once
FLOOD_CLOSE_S = 1.0
FLOOD_QUIET_S = 0.05
#: linux/tcp.h (the socket module names it only from Python 3.12 on some builds)
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)


async def telemetry_ws(request: web.Request) -> web.StreamResponse:
    app = request.app
    hub = app[HUB]
    app[ADMISSION].admit(request, "telemetry")  # 503 busy beyond the telemetry slots (server.gateway.admission)
    tcfg = app[PROFILE].telemetry
    # text frames arrive as bytes (decode_text=False): one with invalid UTF-8 is scanned for an e-stop before
    # it is refused, which aiohttp's own decoding (close 1007 first) would not allow
    ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=MAX_WS_MESSAGE_BYTES, decode_text=False)
    limit_send_buffer(request, tcfg.send_buffer_bytes)
    await ws.prepare(request)
    client = TelemetryClient(ws, request.remote or "?", request.transport, max_age_s=tcfg.max_age_s,
                             source_rate_hz=tcfg.rate_hz)
    set_notsent_lowat(request, tcfg.notsent_lowat_bytes)
    stream = client.stream = CommandStream(totals=hub.commands_dropped)
    client.send_control(f'{{"type":"hello","robot":{dumps(robot_description(app))},'
                        f'"state":{state_text(app).decode()}}}')
    hub.clients.add(client)
    writer = client.task = asyncio.create_task(client.writer(), name=f"ws-writer-{client.peer}")
    syncer = asyncio.create_task(drive_sync(client), name=f"ws-sync-{client.peer}")
    Hooks.call(app[HOOKS].on_ws_open, request, client)
    dispatch = app[DISPATCHER]
    budget = budget_key(principal_of(request), request.remote)  # reconnecting buys no fresh burst
    bucket = app[BUCKETS].get(budget)
    client.bucket = bucket
    last_refusal_reply = -math.inf
    try:
        async for msg in ws:
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                data: bytes = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                # an e-stop is an e-stop however it comes (issue 18): scanned before the rate limit and the parser
                estop = looks_like_estop(data)
                charge = None if estop else dispatch.charge_frame(budget)
                if not estop and charge is None:
                    if bucket.flooding:
                        log.warning("telemetry client %s keeps flooding (%d refused): closing it", client.peer,
                                    bucket.refused)
                        await close_for_flooding(app, ws, client, request, stream)
                        break
                    now = time.monotonic()
                    if now - last_refusal_reply >= 0.1:  # one reply per 100 ms, carrying the count
                        last_refusal_reply = now
                        client.send_control({"type": "error", "id": None, "error": {
                            "code": "rate_limited", "refused": bucket.refused,
                            "message": f"over {tcfg.command_rate_hz:g} messages/s (burst "
                                       f"{tcfg.command_burst}): message refused; keep flooding and the "
                                       "socket closes (1008)"}})
                else:
                    reply, close = await handle_ws_frame(app, data, msg.type == WSMsgType.BINARY, estop, request,
                                                         charge, stream, client)
                    if reply is not None:
                        client.send_control(reply)
                    if close is not None:
                        await close_after_reply(client, *close)
                        break
            elif msg.type == WSMsgType.ERROR:
                break
            await asyncio.sleep(0)  # a flooding reader yields to every other task after each message
    finally:
        hub.clients.discard(client)
        writer.cancel()
        syncer.cancel()
    return ws


async def close_for_flooding(app: web.Application, ws: web.WebSocketResponse, client: TelemetryClient,
                             request: web.Request, stream: CommandStream) -> None:
    """Close a client that keeps flooding (1008). The rate_limited error already queued goes first (a loaded
    server's writer had not sent it when the close frame went), for at most :data:`FLOOD_CLOSE_S`: a flooder may
    not read at all. Until then its frames are still read and scanned: an e-stop among them latches (the e-stop
    is never refused), anything else is dropped unparsed. The window ends early once the queue has gone and no
    frame came for :data:`FLOOD_QUIET_S`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FLOOD_CLOSE_S
    while (remaining := deadline - loop.time()) > 0:
        try:
            msg = await ws.receive(timeout=min(remaining, FLOOD_QUIET_S))
        except asyncio.TimeoutError:
            if client.drained.is_set():
                break
            continue
        if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
            break  # the client closed, or the connection failed: nothing more to read or to send
        data: bytes = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
        if looks_like_estop(data):
            reply, _close = await handle_ws_frame(app, data, msg.type == WSMsgType.BINARY, True, request, None,
                                                  stream, client)
            if reply is not None:
                client.send_control(reply)
        await asyncio.sleep(0)  # frames already buffered come without a yield: a flooder must not hold the loop
    await client.close_going_away(WSCloseCode.POLICY_VIOLATION, b"rate limit exceeded")


async def drive_sync(client: TelemetryClient) -> None:
    """The server's side of the clock-sync exchange (:mod:`server.gateway.link`): a ``sync`` when one is due, as a
    priority message (it never waits behind a snapshot, or the round trip it measures would be the queue's). Each
    carries what this end's kernel measures of the socket (:func:`tcp_report`), the page's loss estimate: TCP
    hides its retransmissions from both applications."""
    clock = client.stream.clock
    sock = client.transport.get_extra_info("socket") if client.transport is not None else None
    meter = tcpinfo.RetransMeter()
    while not client.closed:
        if clock.due():
            msg = clock.ping()
            client.tcp = tcp_report(sock, meter)
            if client.tcp is not None:
                msg["tcp"] = client.tcp
            client.send_control(msg)
        await asyncio.sleep(0.05)


def tcp_report(sock: Any, meter: tcpinfo.RetransMeter) -> dict[str, Any] | None:
    """``{"rtt_ms", "rttvar_ms", "retrans_pct", "retrans"}``: the kernel's smoothed round trip and its variation,
    the share of the bytes sent over the last few syncs that were retransmissions (None until two readings,
    or while nothing was sent) and the segments retransmitted since the socket opened. None: no TCP socket."""
    info = tcpinfo.read(sock)
    if info is None:
        return None
    share = meter.update(info)
    return {"rtt_ms": round(info.rtt_s * 1e3, 1), "rttvar_ms": round(info.rttvar_s * 1e3, 1),
            "retrans_pct": None if share is None else round(100.0 * share, 2), "retrans": info.total_retrans}


def set_notsent_lowat(request: web.Request, nbytes: int) -> None:
    """``TCP_NOTSENT_LOWAT``: the socket is writable only while less than ``nbytes`` wait unsent in the kernel, so a
    slow link's backlog stays in the writer's buffer, where :class:`~server.gateway.telemetry.TelemetryClient` sees
    it and holds the next snapshot back (issue 20: 53–65 KB queued in the kernel on a 2 Mbit/s link, ~0.25 s of
    age added per second)."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None and nbytes and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, nbytes)
        except OSError:
            log.debug("could not set TCP_NOTSENT_LOWAT", exc_info=True)


async def close_after_reply(client: TelemetryClient, code: int, message: bytes, wait_s: float = 1.0) -> None:
    """Close the socket once its queued replies (the e-stop's ack) went out, or after ``wait_s``."""
    try:
        await asyncio.wait_for(client.drained.wait(), wait_s)
    except asyncio.TimeoutError:
        pass
    task, client.task = client.task, None
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await client.ws.close(code=code, message=message)


def limit_send_buffer(request: web.Request, nbytes: int) -> None:
    """Cap the kernel send buffer so a slow client's backlog shows up as drops within a
    fraction of a second instead of hiding megabytes of stale snapshots in the socket
    (notes/performance.md §3: kernel buffers held seconds of video for a slow reader)."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, nbytes)
        except OSError:
            log.debug("could not set SO_SNDBUF", exc_info=True)


async def handle_ws_frame(app: web.Application, data: bytes, binary: bool, estop: bool,
                          request: web.Request | None = None, charge: Charge | None = None,
                          stream: CommandStream | None = None, client: TelemetryClient | None = None
                          ) -> tuple[dict[str, Any] | None, tuple[int, bytes] | None]:
    """One data frame of ``/ws/telemetry`` → (the reply, ``(code, reason)`` to close with, or None).

    Frames the gateway does not take — binary, invalid UTF-8, over :data:`WS_CLOSE_BYTES` — are refused, but
    one that asks for an e-stop latches it first (issue 18)."""
    if binary:
        if estop:
            return await _ws_estop(app, data, request, frame_warning="a binary frame: e-stop latched; binary "
                                                                      "messages are not accepted"), None
        return {"type": "error", "id": None,
                "error": {"code": "malformed", "message": "binary messages are not accepted"}}, None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        close = (WSCloseCode.INVALID_TEXT, b"invalid UTF-8 text message")
        if estop:
            return await _ws_estop(app, data, request, frame_warning="invalid UTF-8: e-stop latched; the socket "
                                                                      "closes (1007)"), close
        return None, close
    if len(data) > WS_CLOSE_BYTES:
        close = (WSCloseCode.MESSAGE_TOO_BIG, b"message too big")
        if estop:
            return await _ws_estop(app, data, request, frame_warning=f"message of {len(data)} bytes: e-stop "
                                                                      "latched; the socket closes (1009)"), close
        return None, close
    return await handle_ws_message(app, text, request, estop, charge=charge, stream=stream, client=client), None


async def _ws_estop(app: web.Application, raw: bytes | str, request: web.Request | None = None,
                    frame_warning: str | None = None) -> dict[str, Any]:
    """Latch first (retried over a lost link), then read what else the message says: its id, its reason."""
    d = app[DISPATCHER]
    outcome, warnings = await d.latch_estop()
    reply: dict[str, Any] = {"type": "ack", "id": None, "command": "estop", "state": outcome["state"],
                             "latch": outcome["latch"]}
    body: dict[str, Any] = {}
    if frame_warning is not None:
        warnings.append(frame_warning)
    else:
        try:
            body = parse_object(raw, max_bytes=WS_CLOSE_BYTES)
        except ApiError:
            warnings.append("message malformed: e-stop latched, the rest ignored")
        msg_id = body.get("id")
        if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool):
            reply["id"] = msg_id
        if body and body.get("type") != "estop":
            warnings.append(f"the message asks for an e-stop but its type is {body.get('type')!r}: e-stop latched, "
                            "nothing else done")
        elif body:
            await d.note_reason(outcome, raw, warnings)
    if warnings:
        reply["warning"] = "; ".join(warnings)
    if request is not None:
        d.record_estop(body, WEBSOCKET, request, principal_of(request), reply)
    return reply


def subscribe(app: web.Application, client: TelemetryClient, body: dict[str, Any]) -> Subscription:
    """Check a ``subscribe`` message against this robot's channels and fields and the telemetry rate, then apply
    it (a refused one raises and changes nothing)."""
    sub = check_subscription(app, body)
    client.subscribe(sub)
    return sub


def check_subscription(app: web.Application, body: dict[str, Any]) -> Subscription:
    """A ``subscribe`` message checked against this robot's channels and fields and the telemetry rate (the
    socket's and the telemetry data channel's, :mod:`server.gateway.webrtc.telemetry`); raises if refused."""
    hub = app[HUB]
    desc = robot_description(app) or {}
    channels = {c.get("name") for c in desc.get("channels") or () if isinstance(c, dict)}
    fields: set[str] = set()
    latest = hub.latest
    if latest is not None:
        snap = latest.parsed
        fields = set(snap)
        if isinstance(snap.get("values"), dict):
            channels |= set(snap["values"])
    return parse_subscribe(body, channels=channels, fields=fields, max_rate_hz=app[PROFILE].telemetry.rate_hz)


def read_envelope(body: dict[str, Any]) -> tuple[str, Any]:
    """The message's ``type`` and ``id`` (:class:`~server.gateway.registry.Envelope`), or the refusal."""
    msg_id = body.get("id")
    if "id" in body and (not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool)):
        raise ValidationError("id must be a string or an integer", code="wrong_type")
    kind = body.get("type")
    if not isinstance(kind, str):
        raise ValidationError("type is required and must be a string", code="missing_field")
    return kind, msg_id


async def handle_ws_message(app: web.Application, text: str, request: web.Request | None = None,
                            estop: bool | None = None, transport: Transport = WEBSOCKET, *,
                            charge: Charge | None = None, stream: CommandStream | None = None,
                            client: TelemetryClient | None = None) -> dict[str, Any] | None:
    """One client message → the reply to send (None: nothing). A message that asks for an e-stop
    (:func:`server.gateway.estop.looks_like_estop`: a ``"type": "estop"`` anywhere in it) stops the robot,
    whatever else it carries or however malformed it is, and is never executed as anything else. Every other
    command goes through :meth:`~server.gateway.commands.Dispatcher.dispatch`; ``charge``: the budget
    :func:`telemetry_ws` spent at the frame (before parsing); without one the dispatcher charges it."""
    if estop if estop is not None else looks_like_estop(text):
        return await _ws_estop(app, text, request)
    msg_id = None
    try:
        if len(text) > MAX_BODY_BYTES:
            raise MalformedError(f"message of {len(text)} bytes is over the {MAX_BODY_BYTES}-byte limit",
                                 code="too_large", status=413)
        body = parse_object(text)
        raw_id = body.get("id")
        msg_id = raw_id if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None
        kind, msg_id = read_envelope(body)
        d = app[DISPATCHER]
        principal = principal_of(request) if request is not None else None
        if kind == "ping":  # the transport's own, no command
            authorize = app[HOOKS].authorize_ws
            if authorize is not None and request is not None:
                authorize(request, kind)
            reject_unknown(body, {*ENVELOPE, "t"})
            t = number(body, "t", required=False)
            return {"type": "pong", "id": msg_id, "t": t, "server_t": time.time(), "server_mono": time.monotonic()}
        if kind == "sync" and stream is not None:  # the clock-sync exchange's reply (server.gateway.link)
            authorize = app[HOOKS].authorize_ws
            if authorize is not None and request is not None:
                authorize(request, kind)
            reject_unknown(body, {*ENVELOPE, "t1", "t2", "t3"})
            stream.clock.answer(body)
            return None
        if kind == "subscribe" and client is not None:  # this socket's channels, rate and encoding (issue 20 §5)
            authorize = app[HOOKS].authorize_ws
            if authorize is not None and request is not None:
                authorize(request, kind)
            sub = subscribe(app, client, body)
            return {"type": "ack", "id": msg_id, "command": "subscribe", "subscription": sub.to_json()}
        entry = d.resolve(kind)  # before authorisation: a type nobody handles is no permission question
        result = await d.dispatch(principal, entry, body, transport, request=request, charge=charge, stream=stream)
        if result is None:
            return None  # a heartbeat: one-way
        ack: dict[str, Any] = {"type": "ack", "id": msg_id, "command": kind, "state": result.get("state")}
        if result.get("dropped"):
            ack["dropped"] = result["dropped"]  # stale or reordered: not applied (counted; no error storm)
        if entry.reply == "result":
            ack["result"] = result
        return ack
    except ApiError as err:
        return {"type": "error", "id": msg_id, "error": err.to_json()}


__all__ = ["MAX_WS_MESSAGE_BYTES", "WS_CLOSE_BYTES", "handle_ws_frame", "handle_ws_message", "telemetry_ws"]
