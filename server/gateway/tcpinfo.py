"""What the kernel measures of one TCP connection (``TCP_INFO``): round trip, delivery rate, retransmissions.

Why: over a websocket, TCP hides loss from both ends' applications — a lost segment is retransmitted and
shows only as a late message. The sending kernel knows: how many of the bytes it sent were retransmissions
(``tcpi_bytes_retrans`` of ``tcpi_bytes_sent``), its smoothed round trip and its variation, and the rate
at which the peer acknowledged data. The JPEG pacing steps video down from the delivery rate
(:mod:`server.gateway.video.jpeg_pacing`); the link panel shows the telemetry socket's retransmissions as
its loss estimate (issue 20 §4), sent with each clock-sync ping (:func:`server.gateway.ws_telemetry.drive_sync`).

Linux's ``struct tcp_info`` (include/uapi/linux/tcp.h), the fields read here, at their offsets:
``tcpi_rtt`` / ``tcpi_rttvar`` (u32 µs) at 68 / 72, ``tcpi_total_retrans`` (u32 segments) at 100,
``tcpi_min_rtt`` (u32 µs) at 148, ``tcpi_data_segs_out`` (u32) at 156, ``tcpi_delivery_rate`` (u64 bytes/s)
at 160, ``tcpi_bytes_sent`` / ``tcpi_bytes_retrans`` (u64, Linux 4.19+) at 200 / 208.

>>> import socket
>>> server = socket.create_server(("127.0.0.1", 0))
>>> client = socket.create_connection(server.getsockname())
>>> info = read(client)
>>> info is not None and info.rtt_s >= 0.0 and info.bytes_retrans == 0
True
>>> client.close(); server.close()
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

#: bytes of ``struct tcp_info`` asked for (up to ``tcpi_snd_wnd``; a kernel gives what it has)
INFO_BYTES = 232


@dataclass(frozen=True)
class TcpInfo:
    """One reading (times in s, rates in bytes/s); ``bytes_sent``/``bytes_retrans`` are None on a kernel
    older than 4.19, where :class:`RetransMeter` counts data segments instead."""

    rtt_s: float
    rttvar_s: float
    min_rtt_s: float
    total_retrans: int
    data_segs_out: int
    delivery_rate_bytes_s: float
    bytes_sent: int | None
    bytes_retrans: int | None


def read(sock: Any) -> TcpInfo | None:
    """``sock``'s ``TCP_INFO`` (None: not a TCP socket, closed, or not Linux)."""
    if sock is None or getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, INFO_BYTES)
    except (OSError, AttributeError, ValueError):  # ValueError: a closed socket's descriptor
        return None
    if len(info) < 168:
        return None
    rtt_us, rttvar_us = struct.unpack_from("II", info, 68)
    total_retrans = struct.unpack_from("I", info, 100)[0]
    min_rtt_us = struct.unpack_from("I", info, 148)[0]
    data_segs_out = struct.unpack_from("I", info, 156)[0]
    delivery = struct.unpack_from("Q", info, 160)[0]
    sent = retrans = None
    if len(info) >= 216:
        sent, retrans = struct.unpack_from("QQ", info, 200)
    return TcpInfo(rtt_us / 1e6, rttvar_us / 1e6, min_rtt_us / 1e6, total_retrans, data_segs_out, float(delivery),
                   sent, retrans)


class RetransMeter:
    """The share of a connection's recent sends that were retransmissions, from successive readings.

    :meth:`update` takes a reading and returns the share (0–1) since the reading ``window`` updates ago
    (None until there are two, or while nothing was sent): bytes where the kernel counts them, else data
    segments. A rate over the last few seconds rather than since the connection opened, so the figure
    follows the link as it changes.

    >>> m = RetransMeter(window=2)
    >>> def r(sent, retrans): return TcpInfo(0.1, 0.01, 0.05, 0, 0, 0.0, sent, retrans)
    >>> m.update(r(1000, 0)) is None, m.update(r(3000, 100)), m.update(r(5000, 100))
    (True, 0.05, 0.025)
    """

    def __init__(self, window: int = 5) -> None:
        self.window = max(1, int(window))
        self._readings: list[TcpInfo] = []

    def update(self, info: TcpInfo) -> float | None:
        self._readings.append(info)
        if len(self._readings) > self.window + 1:
            del self._readings[0]
        first = self._readings[0]
        if first is info:
            return None
        if info.bytes_sent is not None and first.bytes_sent is not None:
            sent = info.bytes_sent - first.bytes_sent
            retrans = (info.bytes_retrans or 0) - (first.bytes_retrans or 0)
        else:
            sent = info.data_segs_out - first.data_segs_out
            retrans = info.total_retrans - first.total_retrans
        if sent <= 0:
            return None
        return max(0.0, min(1.0, retrans / sent))


__all__ = ["INFO_BYTES", "RetransMeter", "TcpInfo", "read"]
