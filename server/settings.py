"""Config tables both processes read: ``[telemetry]``, ``[server]``, ``[debug]``.

(The runtime publishes snapshots at ``telemetry.rate_hz`` and keeps ``event_log_size``
events; the gateway fans out to ``max_clients``. Both find the state directory and the
runtime socket through ``[server]``.)
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from server.config import Table


def between(lo: float, hi: float, *, open_lo: bool = False) -> type:
    """A float in [lo, hi] (or (lo, hi] with ``open_lo``) for a table field."""
    return Annotated[float, Meta(gt=lo, le=hi) if open_lo else Meta(ge=lo, le=hi)]


def ibetween(lo: int, hi: int) -> type:
    return Annotated[int, Meta(ge=lo, le=hi)]


class TelemetryConfig(Table):
    rate_hz: between(0.1, 1000.0) = 50.0
    max_clients: ibetween(1, 10000) = 100
    event_log_size: ibetween(10, 100000) = 500
    send_buffer_bytes: ibetween(4096, 16 * 1024 * 1024) = 32768
    # per websocket client address: commands a second and the burst saved up (the e-stop is exempt)
    command_rate_hz: between(1.0, 100000.0) = 100.0
    command_burst: ibetween(1, 1000000) = 200


class ServerConfig(Table):
    host: str = "127.0.0.1"
    port: ibetween(0, 65535) = 8080
    state_dir: str = "state"
    max_connections: ibetween(1, 100000) = 256  # beyond this, new connections are closed at once
    request_timeout_s: between(0.1, 3600.0) = 15.0  # no complete request this long: closed
    body_timeout_s: between(0.1, 3600.0) = 5.0  # a request body must arrive within this
    # a websocket/MJPEG client whose writer cannot make progress (it does not read or ack) this long is closed
    writer_stall_s: between(0.1, 3600.0) = 10.0
    # the runtime API socket; "" = a fresh private directory per run (see docs/runtime-api.md)
    runtime_socket: str = ""


class DebugConfig(Table):
    routes: bool = False
