"""The server side of the runtime API (docs/runtime-api.md): connections, requests answered by a method
table, snapshots and events published to subscribers, and who holds control.

It knows no robot: :class:`ApiServer` takes its methods (name → params struct, function) and a subclass
(:class:`server.runtime.service.RuntimeService`) gives the robot's. What lives here is what every method
shares and what a method must not be able to break: one frame at a time per connection, an answer to
every request whatever the method raises (issue 18: an ``OverflowError`` in one method closed the link,
and every e-stop in flight with it), the e-stop latched before its parameters are read, a snapshot
published before the reply of a request that changed the state (so no reply is contradicted by an older
snapshot), and a subscriber that does not read losing snapshots (latest wins), never the loop's time.

**Control** (issue 19 §3). The link-loss watchdog must be fed by the operator who drives, not by any
client of the socket: a ``control`` request names the principal who holds control (the gateway sends it on
every change of its lease and on every new link; ``python -m server.console`` sends it for itself), and
only a request from that connection carrying that principal (the header's ``principal``) counts for
liveness (:attr:`ApiServer.live` while its method runs). Nobody holds control until someone asks; a new
``control`` from any connection takes control from the holder (the gateway's lease decided who may; the
runtime trusts its 0600 socket's clients to say who they act for, not to keep the robot alive for someone
else); when that connection closes, the claim before it holds control again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Callable

import msgspec

from server.errors import ApiError, NotFoundError, TracebackLimiter, ValidationError
from server.runtime_api import protocol
from server.runtime_api.params import DropLinkParams
from server.validation import convert

log = logging.getLogger(__name__)

#: a subscriber whose socket holds this much unsent data gets no more snapshots until it drains
MAX_BACKLOG_BYTES = 256 * 1024
#: the topics a connection may subscribe to
TOPICS = ("event", "snapshot", "truth")


class ControlParams(msgspec.Struct, forbid_unknown_fields=True):
    """``control``: ``principal`` holds control from now on (None: nobody)."""

    principal: str | None


def _prepare_socket_path(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()  # a stale socket of a runtime that died


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class Connection:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.topics: set[str] = set()
        self.dropped = 0
        self.peer = f"fd {writer.get_extra_info('socket').fileno()}" if writer.get_extra_info("socket") else "?"

    def send(self, frame: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame)

    def offer(self, frame: bytes) -> None:
        """A snapshot: dropped (counted) while the socket has a backlog."""
        transport = self.writer.transport
        if transport.is_closing():
            return
        if transport.get_write_buffer_size() > MAX_BACKLOG_BYTES:
            self.dropped += 1
            return
        self.writer.write(frame)


Method = tuple[type, Callable[[Any], Any]]


class ApiServer:
    """Serves ``methods`` on ``socket_path``; see the module docstring. A subclass gives :meth:`describe`,
    :meth:`estop` (never refused), :meth:`snapshot_frame`, :meth:`error_of` (its own exceptions as API errors)
    and the methods; ``no_publish`` names the methods after which no snapshot needs to go out first."""

    no_publish: frozenset[str] = frozenset()

    def __init__(self, socket_path: str | Path, methods: dict[str, Method], *, debug: bool = False) -> None:
        self.socket_path = str(socket_path)
        self.connections: set[Connection] = set()
        self._aio: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._publish_pending = False
        self.published = 0
        self._internal = TracebackLimiter(log)
        # debug_drop_link: armed by this connection, for requests of this method (None: any)
        self._drop_next_request_of: tuple[Connection | None, str | None] = (None, None)
        self._current: Connection | None = None
        #: every connection's claim of control (the principal it acts for; None: nobody), newest last: the newest
        #: claim holds control, and when its connection closes the one before holds it again (a console that
        #: took control and quit gives it back to the gateway)
        self.claims: dict[Connection, str | None] = {}
        #: whether the request being handled counts for liveness (its sender holds control)
        self.live = False
        self.methods: dict[str, Method] = {**methods, "control": (ControlParams, self._control)}
        if debug:
            self.methods["debug_drop_link"] = (DropLinkParams, self._debug_drop_link)

    # ------------------------------------------------------------------ what a subclass gives
    def describe(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def estop(self, params: Any) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def snapshot_frame(self) -> bytes | None:
        """The frame of a snapshot not yet sent, or None (nothing new)."""
        return None

    def error_of(self, exc: Exception) -> ApiError | None:
        """A subclass's own exception as the API error to answer with (None: not one of its own)."""
        return None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._aio = asyncio.get_running_loop()
        await asyncio.to_thread(_prepare_socket_path, Path(self.socket_path))
        old = os.umask(0o177)  # the socket is the operator's own: 0600
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path)
        finally:
            os.umask(old)

    async def stop(self) -> None:
        """Push what is left (the shutdown snapshot and events), then close every connection."""
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0)  # let the events the halt scheduled go out first…
        self._publish()  # …then the last snapshot
        for conn in list(self.connections):
            if conn.writer.transport.get_write_buffer_size():
                try:
                    await asyncio.wait_for(conn.writer.drain(), 1.0)
                except (OSError, asyncio.TimeoutError):
                    pass
        for conn in list(self.connections):
            try:
                conn.writer.close()
                await asyncio.wait_for(conn.writer.wait_closed(), 1.0)
            except (OSError, asyncio.TimeoutError):
                pass
        self.connections.clear()
        await asyncio.to_thread(_remove, Path(self.socket_path))

    # ------------------------------------------------------------------ connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(writer)
        self.connections.add(conn)
        conn.send(protocol.encode({"type": "hello", "protocol": protocol.PROTOCOL, "version": protocol.VERSION,
                                   "pid": os.getpid(), "robot": self.describe(), "topics": list(TOPICS)}))
        log.info("runtime API client connected (%d connected)", len(self.connections))
        try:
            while True:
                try:
                    header, _ = await protocol.read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                except protocol.HeaderError as err:  # the stream is still in step: say so and go on
                    conn.send(protocol.encode({"type": "error", "error": {"code": "malformed", "message": str(err)}}))
                    continue
                except protocol.ProtocolError as err:  # a bad length: the stream is lost
                    conn.send(protocol.encode({"type": "error", "error": {"code": "malformed", "message": str(err)}}))
                    break
                kind = header.get("type")
                if kind == "hello":
                    if header.get("version") != protocol.VERSION:
                        conn.send(protocol.encode({"type": "error", "error": {
                            "code": "version", "message": f"runtime API version {protocol.VERSION} only, "
                                                          f"not {header.get('version')!r}"}}))
                        break
                    continue
                armer, only = self._drop_next_request_of
                if armer is not None and armer is not conn and only in (None, header.get("method")):
                    self._drop_next_request_of = (None, None)  # debug_drop_link: this request is lost in flight
                    log.warning("debug_drop_link: dropping a client's connection with its %r request unhandled",
                                header.get("method"))
                    writer.transport.abort()
                    break
                self._current = conn
                self._answer(conn, header)
                await asyncio.sleep(0)  # a busy client yields to the others
        finally:
            self.connections.discard(conn)
            self.claims.pop(conn, None)  # its claim is gone with its link: the claim before it holds control again
            writer.close()
            log.info("runtime API client disconnected (%d connected)", len(self.connections))

    def _answer(self, conn: Connection, header: dict[str, Any]) -> None:
        """Handle one request or notify and write its reply. Nothing a request does closes the connection:
        :meth:`_handle` answers every exception, and a reply that cannot be encoded is answered with an
        error of its own."""
        reply = self._handle(conn, header)
        if header.get("method") not in self.no_publish:
            try:
                self._publish()  # the new state reaches subscribers before the reply does
            except Exception:  # noqa: BLE001 - a snapshot that fails to go out must not end the connection
                self._internal.log("publishing the snapshot after %r failed", header.get("method"))
        if header.get("type") != "request":
            return
        try:
            frame = protocol.encode(reply)
        except (protocol.ProtocolError, TypeError, ValueError) as err:  # too big, or not serialisable
            self._internal.log("the reply to %r could not be encoded", header.get("method"))
            err_ = ApiError(f"the reply to {header.get('method')!r} could not be sent: {err}", code="internal",
                            status=500)
            frame = protocol.encode({"type": "response", "id": reply.get("id"), "error": err_.to_wire()})
        conn.send(frame)

    @property
    def holder(self) -> tuple[Connection, str | None] | None:
        """The newest claim of control: its connection and principal (None: nobody claimed it)."""
        return next(reversed(self.claims.items()), None) if self.claims else None

    def holds(self, conn: Any, principal: Any) -> bool:
        """Whether ``principal`` on ``conn`` holds control (its commands and heartbeats count for liveness)."""
        holder = self.holder
        return holder is not None and holder[0] is conn and isinstance(principal, str) and principal == holder[1]

    def _handle(self, conn: Connection, header: dict[str, Any]) -> dict[str, Any]:
        req_id = header.get("id")
        if isinstance(req_id, bool) or not (req_id is None or isinstance(req_id, str) and len(req_id) <= 256
                                            or isinstance(req_id, int) and -2 ** 63 <= req_id < 2 ** 63):
            req_id = None  # echoed back: it must encode
        method = header.get("method")
        params = header.get("params") or {}
        self.live = self.holds(conn, header.get("principal"))
        try:
            if method == "estop":  # never refused: latch first, look at the parameters after
                return {"type": "response", "id": req_id, "result": self.estop(params)}
            if not isinstance(params, dict):
                raise ValidationError("params must be an object", code="wrong_type")
            entry = self.methods.get(method) if isinstance(method, str) else None
            if entry is None:
                raise NotFoundError(f"unknown method {method!r}; known: {', '.join(sorted(self.methods))}",
                                    code="unknown_method")
            ptype, fn = entry
            p = convert(params, ptype)
            if method == "subscribe":
                unknown = sorted(set(p.topics) - set(TOPICS))
                if unknown:
                    raise ValidationError(f"unknown topic(s): {', '.join(unknown)}; known: {', '.join(TOPICS)}")
                conn.topics = set(p.topics)
                result: Any = {"ok": True, "topics": sorted(conn.topics)}
            else:
                result = fn(p)
            return {"type": "response", "id": req_id, "result": result}
        except ApiError as e:
            err = e
        except Exception as e:  # noqa: BLE001 - every exception is answered (see the module docstring)
            err = self._answer_error(method, e)
        finally:
            self.live = False
        return {"type": "response", "id": req_id, "error": err.to_wire()}

    def _answer_error(self, method: Any, e: Exception) -> ApiError:
        own = self.error_of(e)
        if own is not None:
            return own
        if isinstance(e, (ValueError, TypeError, KeyError, NotImplementedError)):
            return ValidationError(f"refused: {e}", code="invalid")
        if isinstance(e, (OverflowError, ZeroDivisionError, FloatingPointError)):
            # a number the edge checks let through: the input's fault, but a check is missing (logged)
            self._internal.log("%s: a number out of range reached the runtime", method)
            return ValidationError(f"refused: a number is out of range for {method} ({type(e).__name__}: {e})",
                                   code="out_of_limits")
        # RecursionError, MemoryError, AssertionError, a bug: answered
        self._internal.log("%s failed", method)
        return ApiError(f"{method} failed in the runtime ({type(e).__name__}); the robot runtime logged it",
                        code="internal", status=500)

    # ------------------------------------------------------------------ built-in methods
    def _control(self, p: ControlParams) -> dict[str, Any]:
        conn = self._current
        holder = self.holder
        before = holder[1] if holder is not None else None
        if conn is not None:
            self.claims.pop(conn, None)
            self.claims[conn] = p.principal  # the newest claim
        if before != p.principal:
            log.info("control: %s → %s", before or "nobody", p.principal or "nobody")
        return {"ok": True, "holder": p.principal}

    def _debug_drop_link(self, p: DropLinkParams) -> dict[str, Any]:
        """Tests of the gateway's e-stop retry: see :class:`~server.runtime_api.params.DropLinkParams`."""
        me = self._current
        if p.when == "next_request":
            self._drop_next_request_of = (me, p.method)
            return {"ok": True, "armed": True}
        others = [c for c in self.connections if c is not me]
        for c in others:
            c.writer.transport.abort()
        return {"ok": True, "dropped": len(others)}

    # ------------------------------------------------------------------ publishing (control thread → here)
    def publish_threadsafe(self) -> None:
        if self._publish_pending or self._aio is None:
            return
        self._publish_pending = True
        try:
            self._aio.call_soon_threadsafe(self._publish)
        except RuntimeError:  # event loop closed during shutdown
            self._publish_pending = False

    def _publish(self) -> None:
        self._publish_pending = False
        if not any("snapshot" in c.topics or "truth" in c.topics for c in self.connections):
            return  # nobody watching: not even serialised (idle CPU)
        frames = self.snapshot_frames()
        if frames is None:
            return
        self.published += 1
        for topic, frame in frames:
            for c in self.connections:
                if topic in c.topics:
                    c.offer(frame)

    def snapshot_frames(self) -> list[tuple[str, bytes]] | None:
        """The frames of a snapshot not yet sent, by topic, or None (nothing new)."""
        frame = self.snapshot_frame()
        return None if frame is None else [("snapshot", frame)]

    def event_threadsafe(self, data: dict[str, Any]) -> None:
        if self._aio is None:
            return
        try:
            self._aio.call_soon_threadsafe(self._broadcast_event, data)
        except RuntimeError:
            pass

    def _broadcast_event(self, data: dict[str, Any]) -> None:
        frame = protocol.encode({"type": "event", "data": data})
        for c in list(self.connections):
            if "event" in c.topics:
                c.send(frame)


__all__ = ["ApiServer", "Connection", "ControlParams", "MAX_BACKLOG_BYTES", "TOPICS"]
