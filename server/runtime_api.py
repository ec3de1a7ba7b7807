"""The runtime API's parameter structs (docs/runtime-api.md), shared by the runtime, which converts
every request's ``params`` with them, and the gateway, which validates bodies with the same ones
at its edge: one definition, two checks."""

from __future__ import annotations

from typing import Any

import msgspec

class Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


class EventsParams(msgspec.Struct, forbid_unknown_fields=True):
    limit: int = 100


class EstopParams(msgspec.Struct):
    reason: str = ""


class SetpointParams(msgspec.Struct, forbid_unknown_fields=True):
    setpoint: dict[str, Any]
    ttl_s: float | None = None
    source: str = "http"


class AcquisitionParams(msgspec.Struct, forbid_unknown_fields=True):
    rate_hz: float
    channels: list[str]


class HeadingParams(msgspec.Struct, forbid_unknown_fields=True):
    heading_deg: float


class MagParams(msgspec.Struct, forbid_unknown_fields=True):
    revolutions: float | None = None
    rate_rad_s: float | None = None


class UwbParams(msgspec.Struct, forbid_unknown_fields=True):
    pairs: list[list[float]]
    degree: int = 2


class SubscribeParams(msgspec.Struct, forbid_unknown_fields=True):
    topics: list[str]


class DebugParams(msgspec.Struct, forbid_unknown_fields=True):
    command: dict[str, Any]


class PingParams(msgspec.Struct, forbid_unknown_fields=True):
    t: float | None = None
