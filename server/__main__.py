"""``python -m server --config FILE [--host H] [--port P]``: run teleop.

Prints ``teleop listening on http://HOST:PORT`` once it accepts connections
(``--port 0`` picks a free port). SIGINT/SIGTERM halt the robot first, then close
sockets, then exit 0. A bad config stops start-up with exit status 2 and a
message naming the file and the key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from drivers.errors import DriverError
from server.app import LOOP, create_app
from server.config import DEFAULT_CONFIG, ConfigError, load_config
from server.connections import ConnectionGuard

log = logging.getLogger("teleop")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m server",
        description="teleop: remote robot teleoperation server with a web dashboard. "
        "Runs the robot's control loop and safety supervisor, and serves the dashboard and the API.",
        epilog="Examples:\n  python -m server                      # simulated rover on 127.0.0.1:8080\n"
        "  python -m server --config config/rover-sim.toml --host 0.0.0.0 --port 8080\n"
        "Docs: README.md, docs/api.md, docs/configuration.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help="TOML profile (default: %(default)s)")
    p.add_argument("--host", help="address to listen on (overrides server.host; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="TCP port (overrides server.port; 0 = any free port)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level (default: %(default)s)")
    return p.parse_args(argv)


async def serve(cfg: dict, host: str, port: int) -> None:
    app = create_app(cfg)
    scfg = cfg["server"]
    runner = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=scfg["request_timeout_s"])
    await runner.setup()  # opens the driver and starts the control loop
    guard = ConnectionGuard(scfg["max_connections"], scfg["request_timeout_s"])
    guard.install(runner.server)
    guard.start()
    stop = asyncio.Event()
    aio = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        aio.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1] if site._server and site._server.sockets else port
        shown = f"[{host}]" if ":" in host else host
        print(f"teleop listening on http://{shown}:{bound}", flush=True)
        await stop.wait()
        log.info("shutting down: halting the robot first")
        await app[LOOP].shutdown_async()
    finally:
        await guard.stop()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    host = args.host or cfg["server"]["host"]
    port = cfg["server"]["port"] if args.port is None else args.port
    if not 0 <= port <= 65535:
        print(f"teleop: --port {port} is outside 0..65535", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(cfg, host, port))
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    except DriverError as err:
        print(f"teleop: driver error at start-up: {err}", file=sys.stderr)
        return 3
    except OSError as err:
        print(f"teleop: cannot listen on {host}:{port}: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
