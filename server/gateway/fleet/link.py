"""One Zenoh session that keeps itself connected, shared by the robot's fleet link and the hub.

Measured here (zenoh 1.10, a router run by the Python package on loopback): a client's ``zenoh.open`` fails
after ``connect/timeout_ms`` when no router answers, so the first connection is retried here, forever, once a
second; once open, the session reconnects by itself after a router restart (0.25 s after the router was back in
the probe). Zenoh re-declares a session's declarations on that reconnect, but a *replaced* router (a new one at
the same address, or a fail-over to the next endpoint) has been reported to leave clients with stale
declarations (docs/fleet.md cites the reports): so the link watches the router's id every ``check_s`` and calls
``on_router`` for every new one, and the owner undeclares and declares everything afresh there.

Zenoh calls its callbacks on its own threads; the owners hand work to the event loop with
``loop.call_soon_threadsafe``. ``zenoh.open`` and ``close`` block: they run in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Callable

import zenoh

log = logging.getLogger(__name__)

#: how long one attempt to reach a router waits (then the next attempt, a second later): a TLS handshake over a
#: 300 ms link takes ~1 s, and the test box at a load of 36 took longer than 1 s (the first value) on loopback
OPEN_TIMEOUT_MS = 5000
RETRY_S = 1.0


def zenoh_config(mode: str, *, connect: list[str] = (), listen: list[str] = (), ca_file: str = "",
                 cert_file: str = "", key_file: str = "", extra: dict[str, Any] | None = None) -> zenoh.Config:
    """A Zenoh config for ``mode`` (client, router); no multicast scouting (a fleet names its routers), TLS files
    when given (``cert_file``/``key_file``: mutual TLS, on the connecting or the listening side by ``mode``)."""
    cfg = zenoh.Config()
    cfg.insert_json5("mode", json.dumps(mode))
    cfg.insert_json5("scouting/multicast/enabled", "false")
    if connect:
        cfg.insert_json5("connect/endpoints", json.dumps(list(connect)))
        cfg.insert_json5("connect/timeout_ms", str(OPEN_TIMEOUT_MS))
        cfg.insert_json5("connect/retry", json.dumps({"period_init_ms": 250, "period_max_ms": 1000,
                                                      "period_increase_factor": 2}))
    if listen:
        cfg.insert_json5("listen/endpoints", json.dumps(list(listen)))
    if ca_file:
        cfg.insert_json5("transport/link/tls/root_ca_certificate", json.dumps(ca_file))
    if cert_file and key_file:
        side = "listen" if mode == "router" else "connect"
        cfg.insert_json5("transport/link/tls/enable_mtls", "true")
        cfg.insert_json5(f"transport/link/tls/{side}_certificate", json.dumps(cert_file))
        cfg.insert_json5(f"transport/link/tls/{side}_private_key", json.dumps(key_file))
    for key, value in (extra or {}).items():
        cfg.insert_json5(key, json.dumps(value))
    return cfg


class ZenohLink:
    """A client session to the routers in ``config``; ``on_router(session)`` runs in the event loop on the first
    connection and on every new router (declare everything there, undeclaring what the last call declared)."""

    def __init__(self, config_factory: Callable[[], zenoh.Config], on_router: Callable[[zenoh.Session], None], *,
                 name: str, check_s: float = 0.25) -> None:
        self.config_factory = config_factory
        self.on_router = on_router
        self.name = name
        self.check_s = check_s
        self.session: zenoh.Session | None = None
        self.router: str | None = None
        self.connects = 0
        self.declared = 0
        self.last_error: str | None = None
        self.since_t: float | None = None
        self.closing = False

    @property
    def connected(self) -> bool:
        return self.router is not None

    def status(self) -> dict[str, Any]:
        return {"connected": self.connected, "router": self.router, "connects": self.connects,
                "declared": self.declared, "since_t": self.since_t, "last_error": self.last_error}

    async def _open(self) -> zenoh.Session:
        warned = False
        while True:
            try:
                return await asyncio.to_thread(zenoh.open, self.config_factory())
            except Exception as err:  # noqa: BLE001 - zenoh raises its own ZError for every failure
                self.last_error = str(err).split(" at /", 1)[0]
                if not warned:
                    log.warning("%s: no router reachable yet (%s); retrying every %g s", self.name, self.last_error,
                                RETRY_S)
                    warned = True
            await asyncio.sleep(RETRY_S)

    def _router_now(self) -> str | None:
        session = self.session
        if session is None:
            return None
        zids = [str(z) for z in session.info.routers_zid()]
        return zids[0] if zids else None

    async def run(self) -> None:
        """Connect, then watch the router (until cancelled)."""
        self.session = await self._open()
        while True:
            router = self._router_now()
            if router != self.router:
                if router is None:
                    log.warning("%s: lost router %s; zenoh reconnects by itself", self.name, self.router)
                else:
                    log.info("%s: connected to router %s (declaring)", self.name, router)
                    self.connects += 1
                    self.since_t = time.time()
                    try:
                        self.on_router(self.session)
                        self.declared += 1
                    except Exception as err:  # noqa: BLE001 - the next router change tries again
                        self.last_error = f"declaring failed: {err}"
                        log.exception("%s: declaring on router %s failed", self.name, router)
                        router = None
                self.router = router
            await asyncio.sleep(self.check_s)

    async def close(self) -> None:
        session, self.session = self.session, None
        self.router = None
        if session is not None:
            await asyncio.to_thread(session.close)


def undeclare_all(things: list[Any]) -> None:
    """Undeclare every declaration in ``things`` (a stale one's error is no matter) and empty the list."""
    for thing in things:
        try:
            thing.undeclare()
        except Exception:  # noqa: BLE001 - a declaration that died with its router
            pass
    things.clear()


__all__ = ["ZenohLink", "undeclare_all", "zenoh_config"]
