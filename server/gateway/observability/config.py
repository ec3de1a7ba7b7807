"""The ``[observability]`` config table as a typed struct (msgspec).

>>> cfg = load_observability_config({"log_format": "json"})
>>> cfg.log_format, cfg.foxglove_live, cfg.foxglove_host
('json', False, '127.0.0.1')
>>> load_observability_config({"log_format": "xml"})
Traceback (most recent call last):
...
ValueError: [observability] Expected `str` matching regex '^(text|json)$' - at `$.log_format`
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec


class ObservabilityConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Logs, metrics, health checks and the optional Foxglove live view."""

    #: ``text`` (human) or ``json`` (one JSON object per line, for log shippers)
    log_format: Annotated[str, msgspec.Meta(pattern="^(text|json)$")] = "text"
    log_level: Annotated[str, msgspec.Meta(pattern="^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$")] = "INFO"
    #: serve ``GET /metrics`` (Prometheus text format)
    metrics: bool = True
    #: ``/healthz`` fails when the newest snapshot is older than this
    healthz_stale_s: Annotated[float, msgspec.Meta(gt=0.0, le=60.0)] = 2.0
    #: ``/healthz`` fails when the loop runs slower than this fraction of its rate …
    healthz_min_rate_ratio: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.9
    #: … measured over this window
    healthz_rate_window_s: Annotated[float, msgspec.Meta(ge=0.5, le=600.0)] = 5.0
    #: serve the Foxglove WebSocket protocol (live view) on its own port
    foxglove_live: bool = False
    #: loopback only: foxglove-sdk cannot authenticate; remote users go through the gateway's ``/foxglove`` relay
    foxglove_host: str = "127.0.0.1"
    foxglove_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8765
    #: publish camera frames to the live view (base64 JSON: costly at full rate)
    foxglove_video: bool = False


def load_observability_config(table: dict[str, Any] | None) -> ObservabilityConfig:
    """Validate an ``[observability]`` table; errors are ``ValueError`` naming the key."""
    try:
        return msgspec.convert(table or {}, ObservabilityConfig)
    except msgspec.ValidationError as err:
        raise ValueError(f"[observability] {err}") from None
