"""``python -m drivers.check package.module:MyDriver --config my.toml``: the project's driver contract, on your bench.

Runs every check of :mod:`drivers.check.contract` — the ones ``tests/drivers/test_contract.py`` runs against the
simulator, the Firmata, FAULHABER and MAVLink drivers — against your driver, built from your config's
``[driver]`` table (``Driver.from_config``) afresh for each check, and prints one line per check and a summary:

    PASS  open_close_lifecycle
    FAIL  halt_zeroes_the_outputs        motion 0.4 after halt (was 0.41)
    SKIP  timeout_fault_raises_driver_timeout_error   no way to inject a fault on this bench (...)
    27 passed, 1 failed, 2 skipped in 14.2 s

Exit status 0 when nothing failed, 1 when a check failed, 2 when the driver could not even be built (the
message names the config key). A check that does not return within ``--timeout-s`` fails (a blocking call
in ``read``/``write``/``halt`` is a bug the control loop would feel).

Faults: the checks of reads failing and of a silent device need a way to cause them. ``--faults
module:function`` names a function ``(driver, kind)`` that causes ``"read_error"`` or ``"timeout"`` and heals
(``None``: clear it, and call ``driver.reconnect()`` if the driver reconnects); ``--faults debug`` uses the
driver's own test hook (``driver.debug({"fault": kind})``, as the simulator has it); ``--interactive`` asks
you to pull the cable and plug it back. Without any, those checks are skipped and say so.

Motion: the checks read it from the channels in m/s or rad/s, or those ``--motion`` names (a gyro's bias and
noise are not motion).

Settling: by default a command counts as "shown" when the motion channels are steady for 10 fresh samples
(a real device moves in real time); ``--settle count`` reads a fixed 60 times instead, for a simulator that
steps by the ``dt`` it is given.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Callable

from drivers.base import Capability, Driver
from drivers.check import contract
from drivers.errors import DriverConfigError, DriverError
from drivers.registry import DRIVERS, driver_class, load_target, plugin_drivers


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m drivers.check", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("driver", help="package.module:Class, or a registered driver name (built in or an entry point)")
    ap.add_argument("--config", type=Path, help="a TOML file: its [driver] table (or --table) builds the driver")
    ap.add_argument("--table", default="driver", help="the table of --config to use (default: driver; '' = the file)")
    ap.add_argument("--faults", metavar="MODULE:FUNCTION", help="how to inject faults (or 'debug')")
    ap.add_argument("--interactive", action="store_true", help="inject faults by asking you to pull the cable")
    ap.add_argument("--motion", metavar="CH1,CH2", help="the channels that show motion (default: every channel in "
                                                         "m/s or rad/s; leave out a gyro whose bias is no motion)")
    ap.add_argument("--settle", choices=("steady", "count"), default="steady")
    ap.add_argument("--read-dt-s", type=float, default=0.01, help="the period passed to read(), s")
    ap.add_argument("--timeout-s", type=float, default=30.0, help="the longest one check may take, s")
    ap.add_argument("--only", action="append", default=[], help="run only this check (repeatable)")
    ap.add_argument("--skip", action="append", default=[], help="skip this check (repeatable)")
    ap.add_argument("--json", action="store_true", help="one JSON object per check, then the summary")
    return ap.parse_args(argv)


def load_driver_class(target: str) -> type[Driver]:
    cls = load_target(target) if ":" in target else driver_class(target)
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverError(f"{target!r} is not a drivers.base.Driver subclass")
    return cls


def load_table(path: Path | None, table: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the driver's table, the whole profile) from ``path``."""
    if path is None:
        return {}, {}
    try:
        profile = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise DriverConfigError("", f"{path}: {err}") from err
    if not table:
        return profile, profile
    if table not in profile or not isinstance(profile[table], dict):
        raise DriverConfigError("", f"{path} has no [{table}] table")
    return dict(profile[table]), profile


def interactive_faults(driver: Driver, kind: str | None, read_dt_s: float = 0.01, ask: Callable[[str], str] = input,
                       wait_s: float = 15.0) -> None:
    """Faults caused by a person: pull the cable (``read_error``), silence the device (``timeout``), plug it back
    (``None``, then ``reconnect()`` when the driver can)."""
    if kind is None:
        ask("  → plug the device back in (power it on), then press Enter ")
        if driver.has(Capability.RECONNECT):
            driver.reconnect(timeout_s=wait_s)
        return
    ask("  → unplug the device's cable now, then press Enter " if kind == "read_error" else
        "  → make the device go silent without unplugging it (power it off, hold its reset), then press Enter ")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:  # wait until the driver has noticed
        try:
            driver.read(read_dt_s)
        except DriverError:
            return
        time.sleep(read_dt_s)
    raise AssertionError(f"reads still succeed {wait_s:g} s after the fault (does the driver watch for silence?)")


def fault_hook(args: argparse.Namespace) -> Callable[[Driver, str | None], None] | None:
    if args.interactive:
        return functools.partial(interactive_faults, read_dt_s=args.read_dt_s)
    if args.faults == "debug":
        return contract.debug_faults
    if args.faults:
        return load_target(args.faults)
    return None


def bench_for(args: argparse.Namespace) -> contract.Bench:
    bench = contract.Bench(read_dt_s=args.read_dt_s, inject_fault=fault_hook(args), find=driver_class)
    if args.motion:
        names = [n.strip() for n in args.motion.split(",") if n.strip()]
        bench.motion = lambda d, frame: max((abs(frame.values[n]) for n in names if n in frame.values), default=0.0)
    if args.settle == "count":
        bench.settle = functools.partial(contract.settle_by_count, read_dt_s=args.read_dt_s, reads=60)
    else:
        bench.settle = lambda d: contract.settle_until_steady(d, bench.motion, args.read_dt_s)
    return bench


def run_one(check: contract.Check, param: tuple, make: Callable[[], Driver], bench: contract.Bench,
            timeout_s: float) -> tuple[str, str]:
    """("PASS" | "FAIL" | "SKIP", detail) for one check, on a fresh driver, within ``timeout_s``."""
    result: list[tuple[str, str]] = []

    def body() -> None:
        driver = make()
        try:
            if check.needs == "opened":
                with contract.opened(driver):
                    check.fn(bench, driver, *param)
            else:
                check.fn(bench, driver, *param)
            result.append(("PASS", ""))
        except contract.Skip as why:
            result.append(("SKIP", str(why)))
        except AssertionError as err:
            result.append(("FAIL", str(err) or "assertion failed"))
        except Exception as err:  # noqa: BLE001 - whatever the driver raised is the report
            result.append(("FAIL", f"{type(err).__name__}: {err}"))
        finally:
            try:
                driver.close()
            except Exception as err:  # noqa: BLE001
                if not result or result[-1][0] == "PASS":
                    result[-1:] = [("FAIL", f"close() raised {type(err).__name__}: {err}")]

    worker = threading.Thread(target=body, name=f"check-{check.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return "FAIL", f"did not return within {timeout_s:g} s (a call that blocks?)"
    return result[0] if result else ("FAIL", "no result")


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cls = load_driver_class(args.driver)
        table, profile = load_table(args.config, args.table)
        cls.from_config(table, profile)  # a config error stops here, named, before any check
    except DriverConfigError as err:
        print(f"cannot build the driver: [{args.table}{'.' + err.key if err.key else ''}] {err.message}", file=out)
        return 2
    except DriverError as err:
        print(f"cannot load the driver: {err}", file=out)
        return 2
    name = getattr(cls, "name", "?")
    where = ("built in" if name in DRIVERS else "entry point" if name in plugin_drivers() else "not registered")
    if not args.json:
        print(f"teleop driver check: {cls.__module__}:{cls.__qualname__} (name {name!r}, {where})"
              f"{f' with {args.config} [{args.table}]' if args.config else ''}", file=out)
    bench = bench_for(args)
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    t0 = time.monotonic()
    for check in contract.CHECKS:
        if (args.only and check.name not in args.only) or check.name in args.skip:
            continue
        for param in ([(p,) for p in check.params] or [()]):
            label = check.name + (f"[{param[0]!r}]" if param else "")
            status, detail = run_one(check, param, lambda: cls.from_config(table, profile), bench, args.timeout_s)
            counts[status] += 1
            if args.json:
                print(json.dumps({"check": label, "status": status, "detail": detail, "doc": check.doc}), file=out)
            else:
                print(f"  {status}  {label:<62} {detail}".rstrip(), file=out, flush=True)
    took = time.monotonic() - t0
    summary = f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped in {took:.1f} s"
    print(json.dumps({"summary": counts, "seconds": round(took, 2)}) if args.json else summary, file=out)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
