"""``python -m server.runtime --config FILE --socket PATH``: the robot runtime process.

Runs the driver, the safety supervisor, the controller, the estimators and the fixed-rate
control loop, and serves the runtime API on a Unix socket (docs/runtime-api.md). It imports
nothing of the web server. ``python -m server`` starts it (and restarts it if it dies); run
it alone to drive the robot from ``python -m server.console``.

Prints ``teleop runtime ready on PATH`` once it serves. SIGINT/SIGTERM: the robot halts
(an event and a last snapshot record it), then the socket closes, then the driver. A bad
config exits with status 2, a driver that does not open with 3.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from drivers.errors import DriverError
from server.config import DEFAULT_CONFIG, RUNTIME_TABLES, ConfigError, load_config, parse_overrides
from server.procutil import die_with_parent

log = logging.getLogger("teleop.runtime")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m server.runtime", description=__doc__.split("\n\n")[1])
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="TOML profile (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (TOML value)")
    p.add_argument("--socket", required=True, help="path of the runtime API's Unix socket")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p.parse_args(argv)


async def serve(robot, socket_path: str) -> None:
    from server.runtime.service import RuntimeService

    loop = robot.loop
    service = RuntimeService(robot, socket_path)
    robot.driver.open()
    stop = asyncio.Event()
    aio = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        aio.add_signal_handler(sig, stop.set)
    try:
        loop.start()
        deadline = aio.time() + 5.0
        while loop.seq == 0:  # serve only once the first snapshot exists
            if aio.time() > deadline or not loop.alive:
                raise DriverError("the control loop produced no first tick within 5 s")
            await asyncio.sleep(0.005)
        await robot.calibrations.start()
        await service.start()
        loop.gc.freeze()  # everything alive now is start-up state: never scanned again
        print(f"teleop runtime ready on {socket_path}", flush=True)
        await stop.wait()
        log.info("shutting down: halting the robot first")
    finally:
        loop.shutdown_halt()  # the robot halts before any socket closes
        await service.stop()
        await robot.calibrations.stop()
        await asyncio.to_thread(loop.shutdown)
        try:
            robot.driver.close()
        except DriverError:
            log.exception("driver close failed")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    die_with_parent()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        profile = load_config(args.config, overrides=parse_overrides(args.set), tables=RUNTIME_TABLES)
        from server.runtime.robot import Robot
        from server.runtime.timing import raise_priority

        if profile.loop.realtime:  # before any thread starts: they inherit it (runtime/timing.py)
            raise_priority()

        robot = Robot(profile)
    except ConfigError as err:
        print(f"teleop: configuration error: {err}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(robot, args.socket))
    except DriverError as err:
        print(f"teleop: driver error at start-up: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
