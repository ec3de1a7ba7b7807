"""Today's real app (``server.app.create_app``) with the trust layer on, as a process, for the browser tests.

``python tests/server/gateway/auth/real_gateway.py --users FILE [--port 0]`` prints
``teleop listening on http://127.0.0.1:PORT`` once it serves. This is the wiring the
gateway will do (``docs/security.md``, "Wiring"), minus the websocket message checks
inside the telemetry handler, which the lead adds there: here the socket's upgrade is
checked (viewer) and its messages run as in today's server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO))


async def serve(users: str, port: int) -> None:
    import logging

    import argon2
    from aiohttp import web

    from server.app import create_app
    from server.gateway.auth import AuthConfig, check_bind, default_permissions, setup_auth
    from server.config import load_config

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    cfg = load_config(REPO / "config" / "rover-sim.toml",
                      overrides={"video": {"enabled": False}, "safety": {"command_timeout_s": 5.0}})
    app = create_app(cfg)
    service = setup_auth(app, AuthConfig.from_table({"users_file": users}), bound_host="127.0.0.1",
                         permissions=default_permissions(),
                         hasher=argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))
    check_bind("127.0.0.1", service.users.configured)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]
    print(service.startup_notice(), flush=True)
    print(f"teleop listening on http://127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--users", required=True)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    asyncio.run(serve(args.users, args.port))
