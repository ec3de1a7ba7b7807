"""``python -m server --config FILE [--host H] [--port P] [--set KEY=VALUE]``: run teleop.

Other commands: ``python -m server users add|passwd|remove|list …`` (the users file, see
docs/security.md) and ``python -m server replay FILE`` (a recording on the dashboard, see
docs/recording.md).

Starts the robot runtime and the web gateway (server/launcher.py) and prints
``teleop listening on http://HOST:PORT`` once it accepts connections (``--port 0`` picks
a free port). SIGINT/SIGTERM halt the robot first, then close sockets, then exit 0. A bad
config stops start-up with exit status 2 and a message naming the file and the key.
"""

from __future__ import annotations

import argparse
import logging
import sys

from server.config import DEFAULT_CONFIG, ConfigError, load_config, parse_overrides

log = logging.getLogger("teleop")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m server",
        description="teleop: remote robot teleoperation server with a web dashboard. "
        "Starts the robot runtime (control loop and safety supervisor) and the web gateway (dashboard and API).",
        epilog="Examples:\n  python -m server                      # simulated rover on 127.0.0.1:8080\n"
        "  python -m server --config config/rover-sim.toml --port 8080\n"
        "  python -m server --set safety.command_timeout_s=2     # more slack for hand testing\n"
        "Docs: README.md, docs/api.md, docs/configuration.md, docs/runtime-api.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="TOML profile (default: %(default)s)")
    p.add_argument("--host", help="address to listen on (overrides server.host; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="TCP port (overrides server.port; 0 = any free port)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set safety.command_timeout_s=2 (VALUE is TOML; "
                        "repeatable)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level (default: [observability] log_level, INFO)")
    return p.parse_args(argv)


#: subcommands: name → "module:function" taking argv (imported only when used)
SUBCOMMANDS = {
    "users": "server.gateway.auth.cli:main",
    "replay": "server.gateway.replay:main",
    "router": "server.hub.router:main",
    "hub": "server.hub.app:main",
    "fleet-certs": "server.hub.certs:main",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        import importlib

        module, _, func = SUBCOMMANDS[argv[0]].partition(":")
        try:
            entry = getattr(importlib.import_module(module), func)
        except ImportError as err:
            print(f"teleop: '{argv[0]}' is not available in this build: {err}", file=sys.stderr)
            return 2
        return entry(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level or "INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from server.launcher import Launcher

    try:
        # every table and the checks across them; the driver's own table is the runtime's to check when it
        # builds the robot (its refusal is this command's exit 2): building a driver here imported numpy and
        # the simulator into a process that never runs them (~0.2 s of CPU a start, docs/architecture.md)
        profile = load_config(args.config, overrides=parse_overrides(args.set))
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    host = args.host or profile.server.host
    port = profile.server.port if args.port is None else args.port
    if not 0 <= port <= 65535:
        print(f"teleop: --port {port} is outside 0..65535", file=sys.stderr)
        return 2
    return Launcher(profile, args.config, args.set, host, port, args.log_level).run()


if __name__ == "__main__":
    sys.exit(main())
