"""``python -m server.gateway``: the web gateway process (HTTP API, websockets, dashboard, video).

``python -m server`` starts it with the listening socket already bound (``--fd``), the host
it was bound for (``--host``: the Host allow-list and the bind check need the name) and the
runtime's socket (``--socket``); run alone it binds ``--host``/``--port`` itself. Prints
``teleop gateway serving on http(s)://HOST:PORT`` once it accepts connections. Exit 2 when
the ``[auth]`` set-up cannot be used (users file, TLS files) or when the host is beyond
loopback and no user exists (docs/security.md).
SIGINT/SIGTERM: the last snapshot goes out, websockets close with 1001, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys

from aiohttp import web

from server.config import DEFAULT_CONFIG, GATEWAY_TABLES, ConfigError, load_config, parse_overrides
from server.procutil import die_with_parent

log = logging.getLogger("teleop.gateway")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m server.gateway", description=__doc__.split("\n\n")[1])
    p.add_argument("--config", default=str(DEFAULT_CONFIG))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--socket", required=True, help="the runtime API's Unix socket")
    p.add_argument("--fd", type=int, help="an already listening TCP socket to serve on (from python -m server)")
    p.add_argument("--host", help="the address or name to serve (with --fd: the one the socket was bound for)")
    p.add_argument("--port", type=int)
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="overrides [observability] log_level")
    return p.parse_args(argv)


async def serve(profile, args: argparse.Namespace) -> None:
    from server.gateway.app import GUARD, create_app
    from server.gateway.auth import AUTH_KEY, check_bind
    from server.gateway.auth.tls import ssl_context
    from server.gateway.connections import ConnectionGuard
    from server.gateway.runtime_client import RuntimeClient

    scfg = profile.server
    host = args.host or scfg.host
    runtime = RuntimeClient(args.socket)
    app = create_app(profile, runtime, bound_host=host)
    check_bind(host, app[AUTH_KEY].users.configured)
    tls = ssl_context(profile.auth, [host])
    guard = ConnectionGuard(scfg.max_connections, scfg.request_timeout_s)
    app[GUARD] = guard
    runner = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=scfg.request_timeout_s)
    await runner.setup()  # connects to the runtime (waits for it up to 30 s)
    guard.install(runner.server)
    guard.start()
    stop = asyncio.Event()
    aio = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        aio.add_signal_handler(sig, stop.set)
    try:
        if args.fd is not None:
            sock = socket.socket(fileno=args.fd)
            site: web.BaseSite = web.SockSite(runner, sock, ssl_context=tls)
        else:
            site = web.TCPSite(runner, host, scfg.port if args.port is None else args.port, ssl_context=tls)
        await site.start()
        bound, port = site._server.sockets[0].getsockname()[:2]
        shown = f"[{bound}]" if ":" in bound else bound
        print(f"teleop gateway serving on {'https' if tls else 'http'}://{shown}:{port}", flush=True)
        await stop.wait()
        log.info("gateway shutting down")
    finally:
        await guard.stop()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    die_with_parent()
    try:
        profile = load_config(args.config, overrides=parse_overrides(args.set), tables=GATEWAY_TABLES)
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    from server.gateway.auth import BindRefused, UsersFileError
    from server.gateway.auth.tls import TlsError
    from server.gateway.observability import setup_logging

    obs = profile.observability  # text or JSON lines (docs/observability.md)
    setup_logging(obs.log_format, args.log_level or obs.log_level)
    try:
        asyncio.run(serve(profile, args))
    except (BindRefused, UsersFileError, TlsError) as err:
        print(f"teleop: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"teleop: gateway cannot listen: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
