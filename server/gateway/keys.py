"""The gateway's application keys, in one module every feature imports (issue 19: ``arms.py`` imported
``RUNTIME`` back from ``app.py``, which imported ``arms``; navigation was handed a key, vision a client).

A feature's ``setup_x(app)`` reads what it needs from the app with these keys, and nothing else: the app
factory (:func:`server.gateway.app.create_app`) fills them before any feature is set up. A feature's own
state keeps its own key in its own module (``VISION_KEY``, ``VIDEO_KEY``, ``AUTH_KEY``)."""

from __future__ import annotations

import jinja2
from aiohttp import web

from server.config import Profile
from server.gateway.hooks import HOOKS
from server.gateway.ratelimit import BucketRegistry
from server.gateway.telemetry import TelemetryHub
from server.runtime_api.client import RuntimeClient

PROFILE = web.AppKey("profile", Profile)
RUNTIME = web.AppKey("runtime", RuntimeClient)
HUB = web.AppKey("telemetry_hub", TelemetryHub)
JINJA = web.AppKey("jinja", jinja2.Environment)
#: per-address message budgets shared by every message transport (a second transport buys no second budget)
BUCKETS = web.AppKey("command_buckets", BucketRegistry)

__all__ = ["BUCKETS", "HOOKS", "HUB", "JINJA", "PROFILE", "RUNTIME"]
