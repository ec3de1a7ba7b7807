"""The gateway's connection to the robot runtime (docs/runtime-api.md).

One connection over the runtime's Unix socket, kept up by :meth:`RuntimeClient.run`: it
connects (retrying with backoff while the runtime starts or restarts), reads the hello
(the robot's description), subscribes to snapshots and events, and hands each snapshot's
bytes on untouched (the runtime serialised it once; the gateway forwards it). Frames are
handled in the socket protocol's ``data_received``, so a snapshot reaches the telemetry
fan-out in the same event-loop step that read it (no task in between). Requests
are matched to their responses by id; while the runtime is down every request fails at
once with 503 ``runtime_down`` and the state the gateway shows is ``fault``.

A lost link is not a dead runtime (issue 18: a request that crashed the runtime's request
handler dropped the link of a runtime that was still running the robot; the e-stop sent
1.5 ms later was answered "runtime down" and never latched, and every dashboard showed a
false "runtime down"). So:

* the moment the link drops, every request waiting on it fails (503 ``runtime_link_lost``),
  none is left behind in ``_pending``; a request that cannot be encoded fails before it is
  registered;
* the runtime counts as *down* only when its process is gone (``/proc/<pid>/stat``: no such
  process, or a zombie), it announced its shutdown, or the link stays lost for
  :data:`LINK_GRACE_S`; until then the gateway shows the last snapshot (with its age) and
  reconnects;
* :meth:`RuntimeClient.estop` retries an e-stop that met a lost link on the new connection
  until the runtime confirms the latch, for at most :data:`ESTOP_RETRY_S`, and says which
  (``confirmed``, ``retried``, ``runtime_down``, ``unconfirmed``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, Callable

import orjson

from server.runtime_api import protocol
from server.errors import ApiError, RuntimeDownError
from server.procutil import process_alive

log = logging.getLogger(__name__)

DOWN_MESSAGE = "robot runtime down: it is being restarted, and comes back idle"
LINK_MESSAGE = "the link to the robot runtime was lost (the runtime still runs): reconnecting; try again"
#: a link lost while the runtime process lives counts as the runtime down after this long
LINK_GRACE_S = 1.0
#: an e-stop that met a lost link is retried on the new link for this long at most
ESTOP_RETRY_S = 2.0
_ALIVE_POLL_S = 0.02


class LinkLostError(RuntimeDownError):
    """The link dropped (or is being re-established) while the runtime process lives."""

    code = "runtime_link_lost"


class RuntimeClient:
    #: its events are this robot's now (False: a recording's, replayed, which must not act on this server's lease)
    live = True

    def __init__(self, socket_path: str, *, request_timeout_s: float = 5.0,
                 on_snapshot: Callable[[bytes], None] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_link: Callable[[bool], None] | None = None) -> None:
        self.socket_path = socket_path
        self.request_timeout_s = request_timeout_s
        self.on_snapshot = on_snapshot or (lambda data: None)
        self.on_event = on_event or (lambda ev: None)
        self.on_link = on_link or (lambda up: None)
        #: the runtime API topics subscribed to on every link (``truth``: the simulator's true pose, for the
        #: sim camera; :meth:`truth`)
        self.topics = ["snapshot", "event"]
        #: the newest ``truth`` frame's data (the simulator's pose, ``sim_time_s``); ``{}`` before one
        self.latest_truth: dict[str, Any] = {}
        self.description: dict[str, Any] | None = None
        self.runtime_pid: int | None = None
        self.connected = False
        self.connects = 0
        self.down_since: float | None = time.monotonic()
        self.shutting_down = False  # set when the runtime announced its shutdown (not a crash)
        self.latest: bytes | None = None  # the newest snapshot, as the runtime serialised it
        self.latest_t: float | None = None  # when it arrived (time.monotonic())
        self.lost_since: float | None = None  # the link is lost since (None: up, or never was)
        self.link_losses = 0  # links lost while the runtime process lived
        self.estops_retried = 0  # e-stops confirmed only after a retry on a new link
        self._latest_parsed: tuple[bytes, dict[str, Any]] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._writer: asyncio.Transport | None = None
        self._connected_event = asyncio.Event()
        self._link_event = asyncio.Event()  # a link exists (hello done): requests can be written
        self._task: asyncio.Task | None = None
        self._grace_task: asyncio.Task | None = None
        self._stopping = False
        #: who holds control, told to the runtime on every new link and every change (:meth:`set_control`);
        #: unset: this client never claims control (its commands keep no robot alive)
        self.control: str | None = None
        self._claims_control = False

    # ------------------------------------------------------------------ control
    def set_control(self, principal: str | None) -> None:
        """``principal`` holds control from now on (None: nobody): only its requests (``principal=`` of
        :meth:`request`) keep the robot alive. Sent at once (a notify, ahead of every later request on the link)
        and again on every new link."""
        changed = principal != self.control or not self._claims_control
        self.control, self._claims_control = principal, True
        if changed and self.connected:
            self.notify("control", {"principal": principal})

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="runtime-client")

    async def stop(self) -> None:
        self._stopping = True
        for task in (self._task, self._grace_task):  # the grace task last: the link's end may have started it
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()

    @property
    def down(self) -> bool:
        """The runtime is down (dead, shut down, never reached, or the link lost past :data:`LINK_GRACE_S`), not
        merely between two links."""
        return not self.connected and self.down_since is not None

    def runtime_alive(self) -> bool:
        """Whether the runtime process of the last link still lives (and did not announce its shutdown)."""
        return not self.shutting_down and process_alive(self.runtime_pid)

    def snapshot_age_s(self) -> float | None:
        """Seconds since the newest snapshot arrived (None before the first)."""
        return None if self.latest_t is None else time.monotonic() - self.latest_t

    def pending(self) -> int:
        """Requests waiting for their reply."""
        return len(self._pending)

    async def wait_connected(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._connected_event.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def run(self) -> None:
        delay = 0.05
        loop = asyncio.get_running_loop()
        while True:
            try:
                transport, conn = await loop.create_unix_connection(_Connection, self.socket_path)
            except OSError:
                await asyncio.sleep(delay)
                # before the first connection the runtime is starting beside this gateway: look often
                delay = min(delay * 2, 1.0 if self.connects else 0.1)
                continue
            try:
                await self._session(transport, conn)
                delay = 0.05
            except (OSError, protocol.ProtocolError) as err:
                log.debug("runtime connection ended: %r", err)
                delay = 0.05 if self.connects else delay
            except Exception:  # noqa: BLE001 - a refused subscribe, a hello that never came: reconnect, never stop
                log.warning("runtime connection failed; reconnecting", exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            finally:
                self._lost(transport)

    async def _session(self, transport: asyncio.Transport, conn: "_Connection") -> None:
        header, _ = await asyncio.wait_for(conn.next_frame(), 10.0)
        if header.get("type") != "hello" or header.get("version") != protocol.VERSION:
            raise protocol.ProtocolError(f"not a teleop runtime of API version {protocol.VERSION}: {header}")
        transport.write(protocol.encode({"type": "hello", "version": protocol.VERSION, "client": "gateway"}))
        self._writer = transport
        self.description = header.get("robot")
        self.runtime_pid = header.get("pid")
        self.shutting_down = False
        conn.on_lost = self._fail_pending  # the moment the link drops, not when this task next runs
        conn.deliver_to(self._on_frame)  # from here every frame is handled as it arrives, in data_received
        self._link_event.set()
        try:
            await self.request("subscribe", {"topics": self.topics})
            if self._claims_control:  # a new link: the runtime learns again who holds control
                self.notify("control", {"principal": self.control})
            snap = await self.request("state")
            if snap:
                self._set_latest(orjson.dumps(snap, option=orjson.OPT_SERIALIZE_NUMPY))
            self.connected = True
            self.connects += 1
            if self.down_since is None and self.lost_since is not None:
                log.warning("the link to the robot runtime (pid %s) is back after %.3f s", self.runtime_pid,
                            time.monotonic() - self.lost_since)
            self.down_since = self.lost_since = None
            self._connected_event.set()
            log.info("connected to the robot runtime (pid %s)", self.runtime_pid)
            self.on_link(True)
            await conn.closed
        finally:
            conn.on_frame = None

    def _on_frame(self, header: dict[str, Any], payload: bytes) -> None:
        kind = header.get("type")
        if kind == "snapshot":
            self._set_latest(payload)
            self.on_snapshot(payload)
        elif kind == "event":
            data = header.get("data") or {}
            if data.get("trigger") == "shutdown":
                self.shutting_down = True
            self.on_event(data)
        elif kind == "truth":
            data = header.get("data")
            if isinstance(data, dict):
                self.latest_truth = data
        elif kind == "response":
            fut = self._pending.pop(header.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(header)
        elif kind == "error":
            log.error("runtime refused the connection: %s", header.get("error"))

    def _fail_pending(self, err: BaseException | None = None) -> None:
        """Fail every request waiting for a reply: the link they were written on is gone."""
        self._link_event.clear()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(LinkLostError(LINK_MESSAGE))
                fut.exception()  # retrieved: a request whose caller went away is not an error to log

    def _lost(self, transport: asyncio.Transport) -> None:
        transport.close()
        self._writer = None
        self._fail_pending()
        if not self.connected:
            return
        self.connected = False
        self._connected_event.clear()
        self.lost_since = time.monotonic()
        if self.shutting_down:
            log.info("the robot runtime shut down")
            self._declare_down()
        elif not process_alive(self.runtime_pid):
            self._declare_down()
        else:  # the process lives: a link lost, not a runtime; down only if it stays lost
            self.link_losses += 1
            log.warning("lost the link to the robot runtime (pid %s, still running): reconnecting", self.runtime_pid)
            if not self._stopping and (self._grace_task is None or self._grace_task.done()):
                self._grace_task = asyncio.get_running_loop().create_task(self._grace(), name="runtime-link-grace")

    async def _grace(self) -> None:
        """Declare the runtime down once its process is gone or the link stayed lost :data:`LINK_GRACE_S`."""
        deadline = time.monotonic() + LINK_GRACE_S
        while not self.connected:
            if not self.runtime_alive() or time.monotonic() >= deadline:
                self._declare_down()
                return
            await asyncio.sleep(_ALIVE_POLL_S)

    def _declare_down(self) -> None:
        if self.connected or self.down_since is not None:
            return
        self.down_since = self.lost_since if self.lost_since is not None else time.monotonic()
        if not self.shutting_down:
            log.error("lost the robot runtime (pid %s): %s", self.runtime_pid, DOWN_MESSAGE)
        self.on_link(False)

    # ------------------------------------------------------------------ snapshots
    def _set_latest(self, data: bytes) -> None:
        self.latest = data
        self.latest_t = time.monotonic()

    def latest_snapshot(self) -> dict[str, Any]:
        """The newest snapshot parsed (cached per snapshot; ``{}`` before the first)."""
        data = self.latest
        if data is None:
            return {}
        cached = self._latest_parsed
        if cached is not None and cached[0] is data:
            return cached[1]
        parsed = orjson.loads(data)
        self._latest_parsed = (data, parsed)
        return parsed

    # ------------------------------------------------------------------ requests
    def _unavailable(self) -> RuntimeDownError:
        return RuntimeDownError(DOWN_MESSAGE) if self.down or not self.runtime_alive() else LinkLostError(LINK_MESSAGE)

    async def request(self, method: str, params: dict[str, Any] | None = None,
                      timeout_s: float | None = None, principal: str | None = None) -> Any:
        """The method's result; raises the runtime's :class:`ApiError`, 503 ``runtime_down`` (the runtime is
        down), ``runtime_link_lost`` (the link dropped, the runtime lives), ``runtime_timeout``, or 413
        ``too_large`` (a request no frame holds). Nothing stays in ``_pending`` once it returns or raises."""
        writer = self._writer
        if writer is None or writer.is_closing():
            raise self._unavailable()
        req_id = next(self._ids)
        try:
            header = {"type": "request", "id": req_id, "method": method, "params": params or {}}
            if principal is not None:  # who it is for: only the holder of control keeps the robot alive
                header["principal"] = principal
            frame = protocol.encode(header)
        except (protocol.ProtocolError, TypeError) as err:  # before anything is registered or written
            raise ApiError(f"{method}: the request does not fit the runtime API ({err})", code="too_large",
                           status=413) from None
        fut = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        try:
            writer.write(frame)
            reply = await asyncio.wait_for(fut, timeout_s or self.request_timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(f"the robot runtime did not answer {method} within "
                           f"{timeout_s or self.request_timeout_s:g} s", code="runtime_timeout", status=503) from None
        except LinkLostError:
            raise self._unavailable() from None  # down by now, or still a lost link
        finally:
            self._pending.pop(req_id, None)
        if "error" in reply:
            raise ApiError.from_wire(reply["error"])
        return reply.get("result")

    def notify(self, method: str, params: dict[str, Any] | None = None, principal: str | None = None) -> bool:
        """A request that wants no answer (heartbeats); False when the runtime is down."""
        writer = self._writer
        if writer is None or writer.is_closing():
            return False
        header = {"type": "notify", "method": method, "params": params or {}}
        if principal is not None:
            header["principal"] = principal
        try:
            writer.write(protocol.encode(header))
        except (protocol.ProtocolError, TypeError):
            log.warning("%s: a notification that does not fit the runtime API was not sent", method)
            return False
        return True

    async def estop(self, retry_s: float = ESTOP_RETRY_S) -> dict[str, Any]:
        """Latch the e-stop: ``{"state", "latch", "attempts"}`` and a ``warning`` unless the runtime confirmed it.

        ``latch``: ``confirmed`` (answered at once), ``retried`` (the link dropped with the e-stop in flight, or
        was down between two links, and the runtime confirmed it on the next one), ``runtime_down`` (the
        runtime is down: it halted on its way down, or died with the driver's own watchdog cutting the outputs),
        ``unconfirmed`` (no confirmation: no link back within ``retry_s``, the runtime did not answer in time,
        or there is no robot, in replay; the runtime's own link-loss stop still applies)."""
        deadline = time.monotonic() + retry_s
        attempts = 0
        while True:
            attempts += 1
            try:
                result = await self.request("estop")
            except LinkLostError as err:  # the runtime lives: send it again on the next link
                if await self._wait_for_link(deadline):
                    continue
                if not self.runtime_alive():
                    return {"state": "fault", "latch": "runtime_down", "attempts": attempts, "warning": DOWN_MESSAGE}
                return {"state": "fault", "latch": "unconfirmed", "attempts": attempts,
                        "warning": f"e-stop not confirmed: {err.message} (for {retry_s:g} s); the robot stops by "
                                   "itself when its link times out"}
            except RuntimeDownError as err:
                return {"state": "fault", "latch": "runtime_down", "attempts": attempts, "warning": err.message}
            except ApiError as err:  # no answer in time; replay (no robot)
                return {"state": "fault", "latch": "unconfirmed", "attempts": attempts,
                        "warning": f"e-stop not confirmed: {err.message}"}
            if attempts > 1:
                self.estops_retried += 1
                log.warning("e-stop confirmed by the runtime after %d attempts (the link dropped in between)",
                            attempts)
            return {"state": result["state"], "latch": "confirmed" if attempts == 1 else "retried",
                    "attempts": attempts}

    async def _wait_for_link(self, deadline: float) -> bool:
        """True once a link can carry a request again; False when the runtime is gone or ``deadline`` passed."""
        while True:
            writer = self._writer
            if writer is not None and not writer.is_closing():
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self.runtime_alive():
                return False
            try:
                await asyncio.wait_for(self._link_event.wait(), min(left, _ALIVE_POLL_S))
            except asyncio.TimeoutError:
                pass
            await asyncio.sleep(0)  # the event may still be set for a link whose loss is being handled


class _Connection(asyncio.Protocol):
    """The runtime socket's frames, handed to ``on_frame`` in ``data_received`` (no task switch between a
    snapshot arriving and its fan-out); until ``on_frame`` is set (the hello), they wait in a queue."""

    def __init__(self) -> None:
        self.frames = protocol.FrameBuffer()
        self.on_frame: Callable[[dict[str, Any], bytes], None] | None = None
        self.on_lost: Callable[[BaseException], None] | None = None
        self._early: asyncio.Queue[tuple[dict[str, Any], bytes]] = asyncio.Queue()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.frames.feed(data)
        except protocol.ProtocolError as err:
            self._close(err)
            return
        for header, payload in frames:
            if self.on_frame is not None:
                self.on_frame(header, payload)
            else:
                self._early.put_nowait((header, payload))

    def deliver_to(self, on_frame: Callable[[dict[str, Any], bytes], None]) -> None:
        """Hand every frame to ``on_frame`` from now on, those that came with the hello first."""
        while not self._early.empty():
            on_frame(*self._early.get_nowait())
        self.on_frame = on_frame

    async def next_frame(self) -> tuple[dict[str, Any], bytes]:
        """The next frame before ``on_frame`` is set; raises when the connection ends first."""
        get = asyncio.ensure_future(self._early.get())
        done, _ = await asyncio.wait({get, self.closed}, return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        return self.closed.result()  # type: ignore[return-value]  # raises: closed only ever fails

    def connection_lost(self, exc: Exception | None) -> None:
        self._close(exc or ConnectionResetError("the runtime closed the connection"))

    def _close(self, err: BaseException) -> None:
        if not self.closed.done():
            self.closed.set_exception(err)
            self.closed.exception()  # retrieved: a connection that ends unawaited is not an error to log
        if self.transport is not None:
            self.transport.close()
        if self.on_lost is not None:
            on_lost, self.on_lost = self.on_lost, None
            on_lost(err)


__all__ = ["DOWN_MESSAGE", "ESTOP_RETRY_S", "LINK_GRACE_S", "LINK_MESSAGE", "LinkLostError", "RuntimeClient"]
