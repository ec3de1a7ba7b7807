"""``serve_app()``: how a gateway app is put on the network — the live gateway (``python -m server.gateway``)
and replay (``python -m server replay``) alike (issue 19 §5: replay had its own copy, without TLS, and both
read aiohttp's private ``site._server`` for the bound address).

One way: the bind check (no users → loopback only, docs/security.md), TLS from ``[auth]`` when configured,
the connection guard (caps and request deadlines, :mod:`server.gateway.connections`), a listening socket
handed over (``fd``, from the launcher) or bound here, the address actually bound (``port = 0``) from the
runner's public ``addresses``, SIGINT/SIGTERM to stop, and the guard and the app cleaned up in that order.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from typing import Any, Callable

from aiohttp import web

from server.gateway.auth import AUTH_KEY, check_bind
from server.gateway.auth.tls import ssl_context
from server.gateway.connections import GUARD, ConnectionGuard

#: ``announce(url)`` once the app accepts connections (the launcher and the tests read it from stdout)
Announce = Callable[[str], None]


def url_of(address: Any, tls: bool) -> str:
    """``http(s)://host:port`` of a bound socket address (IPv6 in brackets).

    >>> url_of(("::1", 8080, 0, 0), False), url_of(("127.0.0.1", 8443), True)
    ('http://[::1]:8080', 'https://127.0.0.1:8443')
    """
    host, port = address[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


async def serve_app(app: web.Application, profile: Any, *, host: str, port: int | None = None,
                    fd: int | None = None, announce: Announce, stop: asyncio.Event | None = None) -> None:
    """Serve ``app`` until SIGINT/SIGTERM (or ``stop``): on the listening socket ``fd``, else on ``host:port``
    (default ``server.port``; 0: any free port). Raises :class:`~server.gateway.auth.BindRefused`,
    :class:`~server.gateway.auth.tls.TlsError`, ``OSError`` (cannot listen)."""
    scfg = profile.server
    check_bind(host, app[AUTH_KEY].users.configured)
    tls = ssl_context(profile.auth, [host])
    guard = ConnectionGuard.from_config(scfg)
    app[GUARD] = guard
    if fd is None:  # before the start-up's wait for the runtime: a port in use is said at once, not 30 s later
        check_can_listen(host, scfg.port if port is None else port)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=scfg.request_timeout_s)
    await runner.setup()  # the app's start-up: connects to the runtime (the live gateway waits up to 30 s)
    guard.install(runner.server)
    guard.start()
    stop = stop or asyncio.Event()
    aio = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        aio.add_signal_handler(sig, stop.set)
    try:
        if fd is not None:
            site: web.BaseSite = web.SockSite(runner, socket.socket(fileno=fd), ssl_context=tls)
        else:
            site = web.TCPSite(runner, host, scfg.port if port is None else port, ssl_context=tls)
        await site.start()
        announce(url_of(runner.addresses[0], tls is not None))
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            aio.remove_signal_handler(sig)
        await guard.stop()
        await runner.cleanup()


def check_can_listen(host: str, port: int) -> None:
    """Raise ``OSError`` now if ``host:port`` cannot be bound (in use, no such address), as aiohttp would bind it
    (``SO_REUSEADDR``: a port in TIME_WAIT is free). A check, not a reservation: the site binds it again."""
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE):
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
            except OSError as err:  # worded as asyncio's create_server words it
                raise OSError(err.errno, f"error while attempting to bind on address {address[:2]!r}: "
                                         f"{(err.strerror or str(err)).lower()}") from None


def run_served(what: str, serve: Callable[[], Any]) -> int:
    """Run ``serve()`` (a coroutine function: the gateway's or the hub's) to the end, and the exit code its start-up
    errors map to: 2 for a set-up that cannot be used (the users file, TLS files, a bind beyond loopback with no
    user, a start-up refusal), 3 when the address cannot be listened on, 0 after a clean shutdown. The message
    goes to stderr."""
    import sys

    from server.errors import ApiError
    from server.gateway.auth import BindRefused, UsersFileError
    from server.gateway.auth.tls import TlsError

    try:
        asyncio.run(serve())
    except (BindRefused, UsersFileError, TlsError) as err:
        print(f"teleop: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"teleop: {what} cannot listen: {err}", file=sys.stderr)
        return 3
    except ApiError as err:  # start-up refusals are reported, never raised as tracebacks
        print(f"teleop: {err.message}", file=sys.stderr)
        return 2
    return 0


__all__ = ["check_can_listen", "run_served", "serve_app", "url_of"]
