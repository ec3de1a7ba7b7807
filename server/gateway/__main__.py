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
import logging
import sys

from server.config import DEFAULT_CONFIG, GATEWAY_TABLES, ConfigError, load_config, parse_overrides
from server.procutil import die_with_parent, say_line

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
    from server.gateway.app import create_app
    from server.gateway.serve import serve_app
    from server.runtime_api.client import RuntimeClient

    host = args.host or profile.server.host
    app = create_app(profile, RuntimeClient(args.socket), bound_host=host)
    await serve_app(app, profile, host=host, port=args.port, fd=args.fd,
                    announce=lambda url: say_line(f"teleop gateway serving on {url}"))
    log.info("gateway shutting down")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    die_with_parent()
    try:
        profile = load_config(args.config, overrides=parse_overrides(args.set), tables=GATEWAY_TABLES)
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    from server.gateway.observability import setup_logging
    from server.gateway.serve import run_served

    obs = profile.observability  # text or JSON lines (docs/observability.md)
    setup_logging(obs.log_format, args.log_level or obs.log_level)
    return run_served("gateway", lambda: serve(profile, args))


if __name__ == "__main__":
    sys.exit(main())
