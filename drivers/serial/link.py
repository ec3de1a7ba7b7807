"""One serial port: a reader thread, a writer thread, a stop lane and per-port counters.

Why threads and not asyncio: pyserial-asyncio needs ``fileno()``, which the URL
handlers (``loop://``, ``socket://``, ``spy://``) lack; one reader thread per
port works with every handler, with ptys and on Windows (hardware-protocols
§3.5, option 3). The control loop runs in its own thread anyway.

Model:

* ``send(data, replies=n)`` queues bytes for the writer thread and returns at
  once (writes never block the caller). ``n`` replies are expected for them;
  they are absorbed when they come (an error reply is handed to ``on_reply``).
* ``request(data, match)`` queues bytes and blocks *its caller* until the
  matching reply, a timeout (``DriverTimeoutError``) or link loss
  (``DriverLinkError``). Requests from different threads are serialised.
* ``send_stop(data)`` is the stop lane: the queued, not yet written commands
  are dropped (they could restart motion after the halt; queued requests stay,
  a query moves nothing) and the stop bytes go out next, even while a request waits for its answer and even on a
  half-duplex line waiting for a reply.
* Replies are matched to *expectations* registered by the writer thread in
  wire order. With ``ordered=True`` (FAULHABER ASCII: replies carry no node or
  command) a reply completes the oldest expectation; otherwise the first
  expectation whose ``match`` accepts it (MC V3.0 frames carry node and
  object). Messages no expectation takes go to ``on_message`` (Firmata's
  analog reports, FAULHABER's ``p``). ``half_duplex=True`` makes the writer
  wait for each answer before it writes the next command (several FAULHABER
  nodes on one line: two answering at once would collide).
* The writer thread expires overdue expectations (``timeouts`` counter). On an
  ordered link the expired one stays one more period as a *ghost* that absorbs
  a late answer (``late_replies``), and a half-duplex writer keeps quiet
  meanwhile: otherwise a slow answer would be taken for the next request's and
  every later answer would be off by one.
* Any read or write error (port unplugged, pty master closed) marks the link
  lost: every waiting request fails with :class:`DriverLinkError` at once and
  later calls raise it too. The link does not reopen itself; the driver's
  ``reconnect`` opens a new one.
"""

from __future__ import annotations

import collections
import errno
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import serial

from drivers.errors import DriverError, DriverLinkError, DriverOpenError, DriverTimeoutError
from drivers.serial.codec import Decoder, Invalid

logger = logging.getLogger(__name__)

#: how long the reader blocks in one read; bounds how fast ``close`` returns on handlers without cancel_read
_READ_POLL_S = 0.05


@dataclass
class LinkCounters:
    """Per-port counters, exposed by the drivers' ``health()``."""

    bytes_in: int = 0
    bytes_out: int = 0
    frames_in: int = 0
    invalid_frames: int = 0
    crc_errors: int = 0
    retries: int = 0
    timeouts: int = 0
    unmatched: int = 0
    dropped_commands: int = 0
    coalesced: int = 0
    late_replies: int = 0  # answers that came after their request had timed out (absorbed)
    stops_sent: int = 0
    rtt_ms: float = 0.0  # last request's round-trip time
    rtt_ms_max: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Expectation:
    """One reply the link waits for; completed by the reader, expired by the writer."""

    __slots__ = ("match", "done", "reply", "error", "deadline", "sent_t", "on_reply", "timeout_s", "ghost")

    def __init__(self, match: Callable[[object], bool] | None, timeout_s: float,
                 on_reply: Callable[[object | None, BaseException | None], None] | None = None) -> None:
        self.match = match
        self.timeout_s = timeout_s
        self.done = threading.Event()
        self.reply: object | None = None
        self.error: BaseException | None = None
        self.deadline = float("inf")
        self.sent_t = 0.0
        self.on_reply = on_reply
        self.ghost = False  # timed out, kept one more period to absorb a late answer (ordered links)

    def finish(self, reply: object | None, error: BaseException | None) -> None:
        self.reply, self.error = reply, error
        self.done.set()
        if self.on_reply is not None:
            try:
                self.on_reply(reply, error)
            except Exception:  # noqa: BLE001 - a driver callback must not kill the link's threads
                logger.exception("reply callback failed")


class _Item:
    __slots__ = ("data", "expectations", "key", "droppable")

    def __init__(self, data: bytes, expectations: list[_Expectation], key: object = None,
                 droppable: bool = True) -> None:
        self.data = data
        self.expectations = expectations
        self.key = key
        self.droppable = droppable  # commands are dropped by a stop; requests (queries) are not


def open_port(url: str, **kwargs: Any) -> serial.SerialBase:
    """``serial.serial_for_url`` with errors the operator can act on (missing, busy, refused).

    >>> open_port("nosuchscheme://x")
    Traceback (most recent call last):
    ...
    drivers.errors.DriverOpenError: cannot open serial port 'nosuchscheme://x': invalid URL, protocol 'nosuchscheme' not known
    """
    try:
        return serial.serial_for_url(url, **kwargs)
    except serial.SerialException as err:
        cause = err.__cause__ or err.__context__
        code = getattr(err, "errno", None) or getattr(cause, "errno", None)
        text = str(err)
        if code == errno.ENOENT or "No such file" in text:
            why = "no such port (is the board plugged in?)"
        elif code == errno.EBUSY or "exclusively lock" in text or "busy" in text.lower():
            why = "port busy (another program has it open)"
        elif code == errno.EACCES or "Permission denied" in text:
            why = "permission denied (add the user to the dialout group)"
        else:
            why = text
        raise DriverOpenError(f"cannot open serial port {url!r}: {why}") from err
    except (OSError, ValueError) as err:
        raise DriverOpenError(f"cannot open serial port {url!r}: {err}") from err


class SerialLink:
    """A port opened by URL, with a reader thread, a writer thread and a stop lane.

    ``decoder`` is a sans-IO :class:`~drivers.serial.codec.Decoder`;
    ``on_message(msg, t_host)`` receives every decoded message no request took,
    in the reader thread, with the host time (``time.monotonic()``) the bytes
    arrived.
    """

    #: queued, unwritten items beyond which ``send`` refuses (a line that cannot keep up is a fault, not a
    #: growing backlog of stale commands)
    max_queue = 256

    def __init__(
        self,
        url: str,
        decoder: Decoder,
        *,
        baudrate: int = 115200,
        on_message: Callable[[object, float], None] | None = None,
        ordered: bool = False,
        half_duplex: bool = False,
        reply_timeout_s: float = 0.2,
        xonxoff: bool = False,
        write_timeout_s: float = 1.0,
        name: str = "serial",
        counters: LinkCounters | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self.decoder = decoder
        self.baudrate = baudrate
        self.on_message = on_message
        self.ordered = ordered
        self.half_duplex = half_duplex
        self.reply_timeout_s = reply_timeout_s
        self.xonxoff = xonxoff
        self.write_timeout_s = write_timeout_s
        # a driver passes its own to keep one set per port across reconnects (each makes a new link)
        self.counters = counters if counters is not None else LinkCounters()
        self.consecutive_timeouts = 0
        self._port: serial.SerialBase | None = None
        self._cond = threading.Condition()
        self._queue: collections.deque[_Item] = collections.deque()
        self._stop_lane: collections.deque[_Item] = collections.deque()
        self._pending: list[_Expectation] = []  # in wire order
        self._request_lock = threading.Lock()
        self._running = False
        self._lost: DriverLinkError | None = None
        self._reader: threading.Thread | None = None
        self._writer: threading.Thread | None = None
        #: called once (reader or writer thread) when the link is lost
        self.on_lost: Callable[[DriverLinkError], None] | None = None
        #: host time of the last byte written (tests and benches read it)
        self.last_write_t = 0.0

    # lifecycle -----------------------------------------------------------
    def open(self) -> None:
        """Open the port and start the threads; :class:`DriverOpenError` when it cannot."""
        kwargs: dict[str, Any] = {"baudrate": self.baudrate, "timeout": _READ_POLL_S,
                                  "write_timeout": self.write_timeout_s, "xonxoff": self.xonxoff}
        if "://" not in self.url:
            kwargs["exclusive"] = True  # a second program on the same board is refused, not interleaved
        port = open_port(self.url, **kwargs)
        if "://" not in self.url:
            # bytes that were on the line before this open belong to an earlier session (a garbage burst, a
            # reply to a request the last link made): a fresh link starts from a quiet line
            try:
                port.reset_input_buffer()
            except (OSError, serial.SerialException):
                pass
        self._port = port
        self._lost = None
        self._running = True
        self.consecutive_timeouts = 0
        self._reader = threading.Thread(target=self._read_loop, name=f"{self.name}-reader", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"{self.name}-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    def close(self, drain_timeout_s: float = 0.5) -> None:
        """Write what is queued and wait for the answers to what was sent (bounded by ``drain_timeout_s``), stop
        the threads, close the port. An answer left on the line would be read by the next open as the answer to
        its own first request (a loaded contract run: a position read's reply came after the close, and the
        reopened driver's first configuration command got it)."""
        if self._port is None:
            return
        deadline = time.monotonic() + drain_timeout_s
        with self._cond:
            while ((self._queue or self._stop_lane or any(e.sent_t for e in self._pending)) and self._lost is None
                   and time.monotonic() < deadline):
                self._cond.wait(0.01)
            self._running = False
            self._cond.notify_all()
        port = self._port
        cancel = getattr(port, "cancel_read", None)
        if cancel is not None:
            try:
                cancel()
            except Exception:  # noqa: BLE001 - best effort: the read times out anyway
                pass
        for t in (self._writer, self._reader):
            if t is not None and t is not threading.current_thread():
                t.join(2.0)
        try:
            port.close()
        except Exception:  # noqa: BLE001 - closing a lost port can fail; it is gone either way
            pass
        self._port = None
        self._fail_all(DriverLinkError(f"{self.name}: link closed"))

    @property
    def is_open(self) -> bool:
        return self._port is not None and self._running and self._lost is None

    @property
    def lost(self) -> DriverLinkError | None:
        """The error that ended the link, or ``None`` while it is up."""
        return self._lost

    def check(self) -> None:
        """Raise the link's error if it was lost (or never opened)."""
        if self._lost is not None:
            raise self._lost
        if self._port is None:
            raise DriverLinkError(f"{self.name}: link not open")

    # sending ---------------------------------------------------------------
    def send(self, data: bytes, replies: int = 0,
             on_reply: Callable[[object | None, BaseException | None], None] | None = None,
             match: Callable[[object], bool] | None = None, key: object = None, droppable: bool = True) -> None:
        """Queue ``data``; never blocks. ``replies`` answers are expected (and absorbed).

        A stop drops queued ``droppable`` items (motion commands); configuration
        (pin modes, reporting, sampling interval) is sent with ``droppable=False``.

        With a ``key``, a queued, not yet written item with the same key is replaced
        (a setpoint stream on a slow line keeps only the latest value: at 9600 baud one
        FAULHABER ``V`` command and its ``OK`` take 12.5 ms, longer than a 100 Hz tick).
        """
        self.check()
        exps = [_Expectation(match, self.reply_timeout_s, on_reply) for _ in range(replies)]
        with self._cond:
            if len(self._queue) >= self.max_queue and key is None:
                self.counters.dropped_commands += 1
                raise DriverTimeoutError(f"{self.name}: {len(self._queue)} commands queued: the line does not keep "
                                         "up (baud rate too low for the command rate?)")
            if key is not None:
                for i, item in enumerate(self._queue):
                    if item.key == key:
                        self._queue[i] = _Item(bytes(data), exps, key, droppable)
                        self.counters.coalesced += 1
                        self._cond.notify_all()
                        return
            self._queue.append(_Item(bytes(data), exps, key, droppable))
            self._cond.notify_all()

    def send_stop(self, data: bytes, replies: int = 0) -> None:
        """The stop lane: drop queued commands, write ``data`` before anything else. Never raises."""
        exps = [_Expectation(None, self.reply_timeout_s) for _ in range(replies)]
        with self._cond:
            keep = collections.deque(item for item in self._queue if not item.droppable)
            for item in self._queue:
                if item.droppable:
                    for e in item.expectations:
                        e.finish(None, None)  # nobody waits on a command's answer: absorbed
            self.counters.dropped_commands += len(self._queue) - len(keep)
            self._queue = keep
            self._stop_lane.append(_Item(bytes(data), exps))
            self.counters.stops_sent += 1
            self._cond.notify_all()

    def request(self, data: bytes, match: Callable[[object], bool] | None = None,
                timeout_s: float | None = None, retries: int = 0) -> object:
        """Write ``data`` and wait for its reply; retried ``retries`` times on a timeout.

        Raises :class:`DriverTimeoutError` (no reply in ``timeout_s``),
        :class:`DriverLinkError` (port lost).
        """
        timeout_s = self.reply_timeout_s if timeout_s is None else timeout_s
        with self._request_lock:
            for attempt in range(retries + 1):
                self.check()
                exp = _Expectation(match, timeout_s)
                with self._cond:
                    self._queue.append(_Item(bytes(data), [exp], droppable=False))
                    self._cond.notify_all()
                # the writer expires it at its deadline; the margin covers a writer busy elsewhere
                if not exp.done.wait(timeout_s + self.write_timeout_s + 1.0):
                    self._expire(exp)
                if exp.error is None:
                    return exp.reply
                if isinstance(exp.error, DriverTimeoutError) and attempt < retries:
                    self.counters.retries += 1
                    continue
                raise exp.error
        raise AssertionError("unreachable")  # pragma: no cover

    # threads -----------------------------------------------------------------
    def _write_loop(self) -> None:
        port = self._port
        assert port is not None
        while True:
            with self._cond:
                while True:
                    if not self._running or self._lost is not None:
                        return
                    self._expire_overdue()
                    if self._stop_lane:
                        item = self._stop_lane.popleft()
                        break
                    busy = self.half_duplex and any(e.sent_t for e in self._pending)
                    if self._queue and not busy:
                        item = self._queue.popleft()
                        break
                    self._cond.wait(self._next_wait_s())
                now = time.monotonic()
                for e in item.expectations:
                    e.sent_t = now
                    e.deadline = now + e.timeout_s
                    self._pending.append(e)
            self.counters.bytes_out += len(item.data)  # before the write: the answer may beat the next line
            try:
                port.write(item.data)
                port.flush()
            except Exception as err:  # noqa: BLE001 - any write failure is a lost port
                self._mark_lost(err)
                return
            self.last_write_t = time.monotonic()
            with self._cond:
                self._cond.notify_all()

    def _next_wait_s(self) -> float:
        deadlines = [e.deadline for e in self._pending if e.sent_t]
        if not deadlines:
            return 0.5
        return max(0.0, min(deadlines) - time.monotonic()) + 1e-4

    def _expire_overdue(self) -> None:
        now = time.monotonic()
        for e in [e for e in self._pending if e.sent_t and e.deadline <= now]:
            if e.ghost:
                self._pending.remove(e)  # no late answer came: the line is quiet again
                continue
            if self.ordered:
                # a slow device answers late; that answer must not be taken for the next request's
                # (ASCII replies carry no node or command): keep a ghost in its place for one more period
                e.ghost = True
                e.deadline = now + e.timeout_s
            else:
                self._pending.remove(e)
            self._timed_out(e)

    def _expire(self, exp: _Expectation) -> None:
        with self._cond:
            if exp.done.is_set():
                return
            if exp in self._pending:
                self._pending.remove(exp)
            self._timed_out(exp)
            self._cond.notify_all()

    def _timed_out(self, e: _Expectation) -> None:
        self.counters.timeouts += 1
        self.consecutive_timeouts += 1
        e.finish(None, DriverTimeoutError(f"{self.name}: no answer within {e.timeout_s * 1e3:.0f} ms"))

    def _read_loop(self) -> None:
        port = self._port
        assert port is not None
        while self._running:
            try:
                data = port.read(max(1, min(4096, port.in_waiting or 1)))
            except Exception as err:  # noqa: BLE001 - EIO on a closed pty, SerialException on unplug
                if self._running:
                    self._mark_lost(err)
                return
            if not data:
                continue
            t = time.monotonic()
            self.counters.bytes_in += len(data)
            for msg in self.decoder.feed(data):
                self._dispatch(msg, t)

    def _dispatch(self, msg: object, t: float) -> None:
        if isinstance(msg, Invalid):
            if msg.crc:
                self.counters.crc_errors += 1
            else:
                self.counters.invalid_frames += 1
            logger.debug("%s: %s %r", self.name, msg.reason, msg.data[:32])
            return
        self.counters.frames_in += 1
        taken: _Expectation | None = None
        with self._cond:
            candidates = [e for e in self._pending if e.sent_t]
            if self.ordered:
                candidates = candidates[:1]
            for e in candidates:
                if e.match is None or e.match(msg):
                    taken = e
                    break
            if taken is not None and taken.ghost:
                self._pending.remove(taken)
                self.counters.late_replies += 1
                self._cond.notify_all()
                return
            if taken is not None:
                self._pending.remove(taken)
                self.consecutive_timeouts = 0
                rtt = (t - taken.sent_t) * 1e3
                self.counters.rtt_ms = rtt
                self.counters.rtt_ms_max = max(self.counters.rtt_ms_max, rtt)
                self._cond.notify_all()
        if taken is not None:
            taken.finish(msg, None)
            return
        if self.on_message is not None:
            try:
                self.on_message(msg, t)
            except Exception:  # noqa: BLE001 - the reader must outlive a driver bug
                logger.exception("%s: message handler failed", self.name)
        else:
            self.counters.unmatched += 1

    def _mark_lost(self, err: BaseException) -> None:
        with self._cond:
            if self._lost is not None:
                return
            self._lost = DriverLinkError(f"{self.name}: port {self.url!r} lost: {err}")
            self._lost.__cause__ = err
            self._cond.notify_all()
        logger.warning("%s: link lost: %s", self.name, err)
        self._fail_all(self._lost)
        if self.on_lost is not None:
            try:
                self.on_lost(self._lost)
            except Exception:  # noqa: BLE001
                logger.exception("%s: on_lost handler failed", self.name)

    def _fail_all(self, error: DriverError) -> None:
        with self._cond:
            pending = list(self._pending)
            self._pending.clear()
            for item in list(self._queue) + list(self._stop_lane):
                pending.extend(item.expectations)
            self._queue.clear()
            self._stop_lane.clear()
            self._cond.notify_all()
        for e in pending:
            if not e.done.is_set():
                e.finish(None, error)
