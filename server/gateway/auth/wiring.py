"""How the trust layer plugs into the gateway: :func:`setup_trust`, called once by ``create_app``.

The gateway's handlers know nothing of users or leases; everything goes through the
middleware and the gateway's :class:`~server.gateway.hooks.Hooks`:

- every HTTP request passes the middleware (:mod:`server.gateway.auth.service`), every
  telemetry-socket message ``hooks.authorize_ws`` (the e-stop is let through by the caller);
- a telemetry socket (``hooks.on_ws_open``) gets the lease state at once and is closed with
  4401 when its session ends, so the dashboard goes to the login page; the video socket and
  MJPEG streams of that session are dropped at the transport;
- the lease state reaches every dashboard as its own message, ``{"type": "lease", "data":
  <GET /api/lease without "you">}``, on every change: the runtime's snapshot bytes are
  forwarded untouched, never parsed and re-serialised to carry it;
- the runtime's ``link_loss`` event ends the lease (``hooks.on_event``): the holder is gone,
  and the runtime has already stopped the robot and latched it;
- the runtime is told who holds control on every lease change and every new link
  (:meth:`RuntimeClient.set_control`: the lease holder's user and session id; ``local`` in local mode,
  one machine, one implicit holder): only that principal's commands and heartbeats keep the robot alive
  (issue 19 §3);
- a change of driver while the robot runs stops it (a controlled stop through the runtime):
  the new holder starts from a robot at rest, never from the previous holder's setpoint.

The lease lives in this process, like the sessions: a gateway restart logs everybody out and
frees the lease, and the robot does not move again until someone logs in, takes the lease
and starts it (the runtime latched link loss while the gateway was away).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from server.errors import ApiError
from server.gateway.auth.config import AuthConfig
from server.gateway.auth.lease import LeaseChange
from server.gateway.auth.permissions import PermissionTable, default_permissions
from server.gateway.auth.service import AUTH_KEY, AuthService
from server.gateway.auth.setup import setup_auth

log = logging.getLogger(__name__)


def lease_message(svc: AuthService) -> dict[str, Any]:
    """The websocket message that carries the lease state (the same for every client)."""
    return {"type": "lease", "data": svc.lease_json()}


async def close_telemetry_client(client: Any, code: int, message: bytes) -> None:
    """Stop the client's writer first (no frame may interleave with the close frame), then close."""
    task, client.task = client.task, None
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await client.ws.close(code=code, message=message)


def setup_trust(app: web.Application, cfg: AuthConfig, *, bound_host: str, hooks: Any, hub: Any, runtime: Any,
                permissions: PermissionTable | None = None, commands: Any = ((), ()), **options: Any) -> AuthService:
    """Install the trust layer on the gateway ``app`` (after its routes) and tie it to the robot.

    ``hooks`` is the app's :class:`~server.gateway.hooks.Hooks`, ``hub`` its
    :class:`~server.gateway.telemetry.TelemetryHub`, ``runtime`` its
    :class:`~server.runtime_api.client.RuntimeClient`; ``bound_host`` the address or name the
    server listens on (the Host allow-list); ``commands`` the command registry's permission rows.
    ``options`` go to :func:`setup_auth` (tests: ``clock``,
    ``hasher``, ``housekeeping_s``).
    """
    table = permissions or default_permissions(commands)
    svc = setup_auth(app, cfg, bound_host=bound_host, permissions=table, **options)
    stops: set[asyncio.Task] = set()

    def on_ws_open(request: web.Request, client: Any) -> None:
        svc.track_ws(request, client.ws, close=lambda code, message: close_telemetry_client(client, code, message))
        client.send_control(lease_message(svc))

    def on_event(event: dict[str, Any]) -> None:
        # the robot's link loss ends the lease; a replayed recording's does not (it ended another session's lease,
        # long ago: here it freed the watcher's at random, as the playback reached it)
        if event.get("trigger") == "link_loss" and getattr(runtime, "live", True):
            svc.lease.on_link_loss()

    def tell_runtime() -> None:
        runtime.set_control(control_holder(svc))

    def on_lease_change(change: LeaseChange) -> None:
        tell_runtime()
        hub.broadcast(lease_message(svc))
        if change.holder_changed and runtime.latest_snapshot().get("state") == "running":
            log.warning("the control lease changed (%s: %s → %s) while the robot runs: controlled stop",
                        change.reason, change.before.user if change.before else "nobody",
                        change.after.user if change.after else "nobody")
            task = asyncio.get_running_loop().create_task(stop_robot(change.reason))
            stops.add(task)
            task.add_done_callback(stops.discard)

    async def stop_robot(reason: str) -> None:
        try:
            await runtime.request("stop")
        except ApiError as err:  # the runtime is down: nothing moves anyway
            log.warning("stop after the lease change (%s) failed: %s", reason, err.message)

    async def on_startup(app: web.Application) -> None:
        tell_runtime()  # before the runtime is reached: sent on its first link
        for method, path in table.missing(app):
            log.error("route %s %s has no rule in the permission table: it answers 403 to everyone", method, path)
        log.debug("%s", svc.startup_notice())

    hooks.authorize_ws = svc.authorize_ws
    hooks.on_ws_open.append(on_ws_open)
    hooks.on_event.append(on_event)
    svc.on_lease_change(on_lease_change)
    app.on_startup.append(on_startup)
    return svc


def control_holder(svc: AuthService) -> str | None:
    """Who holds control, as the runtime knows it (:func:`server.gateway.commands.principal_id` of the holder)."""
    holder = svc.lease.holder
    if svc.local_mode and holder is None:  # in local mode only a hub user (the fleet) ever holds the lease
        return "local"
    return None if holder is None else f"{holder.user}/{holder.session}"


def csrf_token(request: web.Request) -> str:
    """The CSRF token for the page's ``<meta name="csrf-token">`` ("" in local mode or without auth)."""
    svc = request.app.get(AUTH_KEY)
    return (svc.csrf_token(request) if svc is not None else None) or ""


__all__ = ["close_telemetry_client", "control_holder", "csrf_token", "lease_message", "setup_trust"]
