"""Where gateway features (auth, recording, metrics) plug in without editing the core handlers."""

from __future__ import annotations

import logging
from typing import Any, Callable

from aiohttp import web


log = logging.getLogger(__name__)


class Hooks:
    """Where gateway features plug in without editing the core handlers (each a list of callables,
    called on the event loop; a hook that raises is logged and skipped, never breaks the caller):

    * ``on_snapshot(data: bytes)`` — every snapshot, as the runtime serialised it (recorder, metrics);
    * ``on_event(event: dict)`` — every event from the runtime (and the gateway's own ``runtime_down``);
    * ``on_command(record: dict)`` — every command a client sent, accepted or refused, whatever transport
      brought it: ``{"command", "body", "accepted", "state", "error", "source", "request", "principal"}``
      (heartbeats excluded; called by the one command path, :meth:`server.gateway.commands.Dispatcher.dispatch`,
      never by a handler);
    * ``on_settings(kind: str, settings: dict, request)`` — a settings change that was applied;
    * ``on_ws_open(request, client)`` — a telemetry websocket client joined, after its ``hello``
      (``client.send_control(msg)`` sends it a feature's state; the auth layer ends it with its session);
    * ``authorize_ws(request, msg_type)`` — one callable or None: raise an ``ApiError`` to refuse a
      websocket message (the e-stop is always let through by the caller).
    """

    def __init__(self) -> None:
        self.on_snapshot: list[Callable[[bytes], None]] = []
        self.on_event: list[Callable[[dict[str, Any]], None]] = []
        self.on_command: list[Callable[[dict[str, Any]], None]] = []
        self.on_settings: list[Callable[[str, dict[str, Any], Any], None]] = []
        self.on_ws_open: list[Callable[[web.Request, Any], None]] = []
        self.authorize_ws: Callable[[web.Request, str], Any] | None = None

    @staticmethod
    def call(hooks: list[Callable[..., None]], *args: Any) -> None:
        for hook in hooks:
            try:
                hook(*args)
            except Exception:  # a feature's bug must not break telemetry or a command
                log.exception("gateway hook %r failed", hook)


HOOKS = web.AppKey("hooks", Hooks)
