"""Traffic across a :class:`~linkemu.Link` for measuring it and for loading it: UDP probes (one-way
delay, loss, order), a paced UDP flood (the rate the link carries) and a bulk TCP flow (a
competing download, as a phone's other traffic).

Every namespace of a link shares this machine's clocks, so a probe stamped by the sender and
read by the receiver gives the one-way delay directly, without clock sync. The receive time is
the kernel's (``SO_TIMESTAMPNS``: when the packet reached the socket), not the time a reading
thread got to run: on this 2-core VM at load 10 a normal-priority thread woke up to 40 ms late,
which user-space stamps added to every delay. Sockets are made in the sending and receiving
namespaces (:meth:`Link.socket_in`) and driven from threads of this process; a probe's payload
is its sequence number and send time (``CLOCK_REALTIME``, the clock of kernel stamps).

>>> p = Probes(sent=3, received=[(0, 1.0, 1.05), (2, 1.2, 1.26)])
>>> p.lost_seqs, [round(d, 3) for d in p.delays_s], p.in_order
([1], [0.05, 0.06], True)
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from linkemu.link import OPERATOR_IP, ROBOT_IP, Link

_PROBE = struct.Struct("!Id")  # sequence, send time (CLOCK_REALTIME s)
_TIMESPEC = struct.Struct("@qq")
SO_TIMESTAMPNS = 35  # linux/asm-generic/socket.h (SO_TIMESTAMPNS_OLD); the control message has the same number
UDP_IP_HEADER_BYTES = 28
DIRECTIONS = {"uplink": ("robot", "operator", OPERATOR_IP), "downlink": ("operator", "robot", ROBOT_IP)}


def _ends(link: Link, direction: str) -> tuple[str, str, str]:
    try:
        source, sink, sink_ip = DIRECTIONS[direction]
    except KeyError:
        raise ValueError(f"direction is 'uplink' or 'downlink', not {direction!r}") from None
    return source, sink, sink_ip


@dataclass
class Probes:
    """What a probe run saw: ``sent`` probes; ``received`` as (seq, sent_t, received_t) in arrival order."""

    sent: int
    received: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def delays_s(self) -> list[float]:
        return [r - s for _, s, r in self.received]

    @property
    def lost_seqs(self) -> list[int]:
        got = {seq for seq, _, _ in self.received}
        return [seq for seq in range(self.sent) if seq not in got]

    @property
    def loss(self) -> float:
        return len(self.lost_seqs) / self.sent if self.sent else 0.0

    @property
    def in_order(self) -> bool:
        seqs = [seq for seq, _, _ in self.received]
        return all(a < b for a, b in zip(seqs, seqs[1:]))

    def loss_runs(self) -> list[int]:
        """Lengths of the runs of consecutive lost probes."""
        runs, current = [], 0
        lost = set(self.lost_seqs)
        for seq in range(self.sent):
            if seq in lost:
                current += 1
            elif current:
                runs.append(current)
                current = 0
        if current:
            runs.append(current)
        return runs


def kernel_stamped(sock: socket.socket) -> socket.socket:
    """Ask the kernel to stamp each datagram's arrival (read them with :func:`receive_stamped`)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return sock


def receive_stamped(sock: socket.socket) -> tuple[bytes, float]:
    """One datagram and the kernel's arrival time (``CLOCK_REALTIME`` s, as ``time.time()``)."""
    data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(_TIMESPEC.size))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack(payload[:_TIMESPEC.size])
            return data, sec + nsec * 1e-9
    return data, time.time()


def probe(link: Link, direction: str, count: int, interval_s: float, size_bytes: int = 100,
          port: int = 40001, drain_s: float | None = None,
          on_sent: Callable[[int], None] | None = None) -> Probes:
    """Send ``count`` UDP probes ``interval_s`` apart across ``direction`` ("uplink": robot →
    operator); then wait until all have arrived, or for ``drain_s`` at most (default: twice the
    direction's delay, jitter and queue, plus 1 s) for the last of them. ``on_sent(seq)`` runs in
    the sending thread after each probe is sent (a test changes the link at a given probe)."""
    source, sink, sink_ip = _ends(link, direction)
    d = link.profile.direction(direction)
    drain_s = 2 * (d.delay_s + d.jitter_s + d.queue_s) + 1.0 if drain_s is None else drain_s
    rx = kernel_stamped(link.socket_in(sink, socket.AF_INET, socket.SOCK_DGRAM))
    tx = link.socket_in(source, socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.bind((sink_ip, port))
    result = Probes(sent=count)
    sending_done = threading.Event()

    def receive() -> None:
        rx.settimeout(0.05)
        stop_at = None
        while True:
            if sending_done.is_set() and stop_at is None:
                stop_at = time.monotonic() + drain_s
            if stop_at is not None and (time.monotonic() > stop_at or len(result.received) >= count):
                return
            try:
                data, arrived_t = receive_stamped(rx)
            except TimeoutError:
                continue
            seq, sent_t = _PROBE.unpack_from(data)
            result.received.append((seq, sent_t, arrived_t))

    reader = threading.Thread(target=receive, name="linkemu-probe-rx", daemon=True)
    reader.start()
    pad = b"\0" * max(0, size_bytes - _PROBE.size)
    try:
        next_t = time.monotonic()
        for seq in range(count):
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            tx.sendto(_PROBE.pack(seq, time.time()) + pad, (sink_ip, port))
            if on_sent is not None:
                on_sent(seq)
            # the next one at least ``interval_s`` after this one, never a catch-up burst: a sender that woke late
            # on a loaded machine sent several back to back, and the delay line, which keeps order, released the
            # burst at its latest draw (a 4g median of 77 ms for 60 ± 20 in a fresh-clone run)
            next_t = max(next_t, time.monotonic()) + interval_s
    finally:
        sending_done.set()
        reader.join()
        tx.close()
        rx.close()
    return result


def udp_rate_bit_s(link: Link, direction: str, offered_bit_s: float, seconds: float = 3.0,
                   size_bytes: int = 1200, port: int = 40002, warmup_s: float = 0.5,
                   until: threading.Event | None = None) -> float:
    """The IP rate (bit/s) at which ``direction`` delivers a UDP flood offered at ``offered_bit_s``,
    measured at the receiver after ``warmup_s`` (the tbf bucket's burst and the queue filling). The flood
    lasts ``seconds``, or until ``until`` is set if that comes first."""
    source, sink, sink_ip = _ends(link, direction)
    rx = kernel_stamped(link.socket_in(sink, socket.AF_INET, socket.SOCK_DGRAM))
    tx = link.socket_in(source, socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.bind((sink_ip, port))
    arrivals: list[float] = []
    done = threading.Event()

    def receive() -> None:
        rx.settimeout(0.05)
        quiet_since = None
        while True:
            try:
                arrivals.append(receive_stamped(rx)[1])
                quiet_since = None
            except TimeoutError:
                if done.is_set():
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 0.5:
                        return

    reader = threading.Thread(target=receive, name="linkemu-rate-rx", daemon=True)
    reader.start()
    payload = b"\0" * (size_bytes - UDP_IP_HEADER_BYTES)
    packets_per_s = offered_bit_s / 8 / size_bytes
    try:
        start = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - start) < seconds and not (until is not None and until.is_set()):
            while sent < elapsed * packets_per_s:  # paced by the clock: a late wake sends what is owed
                with contextlib.suppress(BlockingIOError, OSError):
                    tx.sendto(payload, (sink_ip, port))
                sent += 1
            time.sleep(0.001)
    finally:
        done.set()
        reader.join()
        tx.close()
        rx.close()
    window = [t for t in arrivals if t >= arrivals[0] + warmup_s] if arrivals else []
    if len(window) < 2:
        return 0.0
    return (len(window) - 1) * size_bytes * 8 / (window[-1] - window[0])


class BulkFlow:
    """A TCP flow sending as fast as the link lets it, across ``direction``, until :meth:`stop`
    (or the end of a ``with`` block); ``received_bytes`` counts what arrived."""

    def __init__(self, link: Link, direction: str, port: int = 40003) -> None:
        source, sink, self._sink_ip = _ends(link, direction)
        self._port = port
        self._listener = link.socket_in(sink)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((self._sink_ip, port))
        self._listener.listen(1)
        self._client = link.socket_in(source)
        self._stop = threading.Event()
        self.received_bytes = 0
        self.started_t = 0.0
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "BulkFlow":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "BulkFlow":
        self._client.settimeout(10)
        self._client.connect((self._sink_ip, self._port))
        conn, _ = self._listener.accept()
        conn.settimeout(0.2)
        self._client.settimeout(0.2)
        self.started_t = time.monotonic()
        self._threads = [threading.Thread(target=self._send, daemon=True, name="linkemu-bulk-tx"),
                         threading.Thread(target=self._receive, args=(conn,), daemon=True, name="linkemu-bulk-rx")]
        for t in self._threads:
            t.start()
        return self

    def _send(self) -> None:
        chunk = b"\0" * 65536
        while not self._stop.is_set():
            try:
                self._client.send(chunk)
            except TimeoutError:
                continue
            except OSError:
                return

    def _receive(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(1 << 20)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                self.received_bytes += len(data)

    def goodput_bit_s(self) -> float:
        elapsed = time.monotonic() - self.started_t
        return self.received_bytes * 8 / elapsed if elapsed > 0 else 0.0

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        for s in (self._client, self._listener):
            s.close()


@contextlib.contextmanager
def bulk(link: Link, direction: str, port: int = 40003) -> Iterator[BulkFlow]:
    """A competing bulk TCP download (``downlink``) or upload (``uplink``) for a ``with`` block."""
    with BulkFlow(link, direction, port) as flow:
        yield flow
