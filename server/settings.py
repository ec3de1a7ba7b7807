"""Config tables both processes read: ``[telemetry]``, ``[server]``, ``[debug]``.

(The runtime publishes snapshots at ``telemetry.rate_hz`` and keeps ``event_log_size``
events; the gateway fans out to ``max_clients``. Both find the state directory and the
runtime socket through ``[server]``.) :class:`SlotLimits` is the shape of every stream's
limits (telemetry sockets here, video viewers and overlays in ``[video]``), read by
:mod:`server.gateway.admission`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from server.config import Table


def between(lo: float, hi: float, *, open_lo: bool = False) -> type:
    """A float in [lo, hi] (or (lo, hi] with ``open_lo``) for a table field."""
    return Annotated[float, Meta(gt=lo, le=hi) if open_lo else Meta(ge=lo, le=hi)]


def ibetween(lo: int, hi: int) -> type:
    return Annotated[int, Meta(ge=lo, le=hi)]


class SlotLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How many streams of one kind (telemetry sockets, video viewers, overlays) may be open, and to whom.

    ``total`` in all; at most ``per_session`` for one login session and ``per_address`` for one client
    address among streams of the same tier (viewers, operators); ``lease`` of them are kept for the lease
    holder and ``operators`` more for operators (viewers get ``total - lease - operators``).

    >>> SlotLimits(total=20, per_session=4, per_address=8, lease=2, operators=4).check("max_viewers")
    >>> SlotLimits(total=3, per_session=4, per_address=8, lease=2, operators=4).check("max_viewers")
    Traceback (most recent call last):
    ...
    ValueError: reserved_for_lease (2) + reserved_for_operators (4) must leave viewers at least one of max_viewers = 3
    """

    total: int
    per_session: int
    per_address: int
    lease: int
    operators: int

    def check(self, total_key: str) -> None:
        """Raise ``ValueError`` unless the reserves leave viewers at least one slot (``total_key``: the key of ``total``)."""
        if self.lease + self.operators >= self.total:
            raise ValueError(f"reserved_for_lease ({self.lease}) + reserved_for_operators ({self.operators}) must "
                             f"leave viewers at least one of {total_key} = {self.total}")


class TelemetryConfig(Table):
    rate_hz: between(0.1, 1000.0) = 50.0
    max_clients: ibetween(1, 10000) = 100
    event_log_size: ibetween(10, 100000) = 500
    send_buffer_bytes: ibetween(4096, 16 * 1024 * 1024) = 32768
    # issue 20: a snapshot older than this is never sent (0: bounded by buffer size only, as before); the next
    # snapshot waits while the socket has a backlog, and the kernel keeps at most notsent_lowat_bytes unsent (0: off)
    max_age_s: between(0.0, 60.0) = 0.5
    notsent_lowat_bytes: ibetween(0, 16 * 1024 * 1024) = 16384
    # per websocket client address: commands a second and the burst saved up (the e-stop is exempt)
    command_rate_hz: between(1.0, 100000.0) = 100.0
    command_burst: ibetween(1, 1000000) = 200
    # who gets the max_clients sockets (server.gateway.admission): per login session, per address and tier,
    # and slots kept for the lease holder and for operators (viewers get max_clients - both)
    max_per_session: ibetween(1, 10000) = 8
    max_per_address: ibetween(1, 10000) = 32
    reserved_for_lease: ibetween(0, 10000) = 2
    reserved_for_operators: ibetween(0, 10000) = 10
    # the dashboard's link verdict (issue 20 §4): a round trip or telemetry age above link_degraded_ms is
    # "degraded", above link_bad_ms "bad" (operators' performance degrades from 200-300 ms: docs/networks.md)
    link_degraded_ms: between(1.0, 60000.0) = 150.0
    link_bad_ms: between(1.0, 60000.0) = 400.0

    def __post_init__(self) -> None:
        self.slots().check("max_clients")
        if self.link_bad_ms <= self.link_degraded_ms:
            raise ValueError(f"link_bad_ms ({self.link_bad_ms:g}) must be above link_degraded_ms "
                             f"({self.link_degraded_ms:g})")

    def slots(self) -> SlotLimits:
        return SlotLimits(total=self.max_clients, per_session=self.max_per_session, per_address=self.max_per_address,
                          lease=self.reserved_for_lease, operators=self.reserved_for_operators)


class ServerConfig(Table):
    host: str = "127.0.0.1"
    port: ibetween(0, 65535) = 8080
    state_dir: str = "state"
    # open connections (server.gateway.connections): at most max_connections, of which reserved_connections are
    # kept for connections that presented a valid session or token. A new one beyond either evicts a connection
    # that has shown least (no headers yet, never authenticated, idle), taken first from addresses, /24 (IPv4)
    # or /64 (IPv6) networks and login sessions beyond their share; refused (503 busy) only when none may go
    max_connections: ibetween(1, 100000) = 256
    max_connections_per_address: ibetween(1, 100000) = 64
    max_connections_per_network: ibetween(1, 100000) = 128
    max_connections_per_session: ibetween(1, 100000) = 32
    reserved_connections: ibetween(0, 100000) = 32
    connection_log_s: between(0.1, 3600.0) = 10.0  # refusals and evictions are logged as one count this often
    request_timeout_s: between(0.1, 3600.0) = 15.0  # no complete request this long: closed
    body_timeout_s: between(0.1, 3600.0) = 5.0  # a request body must arrive within this…
    # …plus one second per this many bytes received: a slow link that keeps this rate up is served
    body_min_rate_bytes_s: between(1000.0, 1e9) = 50_000.0
    # a websocket/MJPEG client whose writer cannot make progress (it does not read or ack) this long is closed
    writer_stall_s: between(0.1, 3600.0) = 10.0
    # the runtime API socket; "" = a fresh private directory per run (see docs/runtime-api.md)
    runtime_socket: str = ""

    def __post_init__(self) -> None:
        if self.reserved_connections >= self.max_connections:
            raise ValueError(f"reserved_connections ({self.reserved_connections}) must be below max_connections "
                             f"({self.max_connections})")


class DebugConfig(Table):
    routes: bool = False
