"""``python -m server.runtime.experiments [NAME ...]``: run the seed experiments offline and print their results.

Each runs on :class:`~server.runtime.experiments.runner.OfflineRobot` of its profile (``--config`` to change
it, ``--seed`` for the simulator's), as fast as the machine goes, and prints ours beside the paper's; ``--json``
prints the whole result (rows, trials, paths) instead. With no name: every experiment.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from server.runtime.experiments import EXPERIMENTS, run_offline


def _table(result: dict[str, Any]) -> list[str]:
    lines = [f"{result['experiment']}: {result['title']}", f"  source: {result['source']}"]
    for key in ("overall", "summary"):
        block = result.get(key)
        if isinstance(block, dict):
            block = [block]
        for row in block or []:
            label = row.get("method", key)
            lines.append(f"  {label:10s} ours  {json.dumps(row['ours'])}")
            lines.append(f"  {'':10s} paper {json.dumps(row['paper'])}")
    for row in result.get("rows", []):
        if "case" in row or "method" in row:  # per-target and per-case rows (not the deployments' per-step ones)
            label = row.get("case") or f"{row['method']} {row['target_deg']:g}°"
            lines.append(f"  {label}: ours {json.dumps(row['ours'])}; paper {json.dumps(row['paper'])}")
    lines.append(f"  status: {result['status']['outcome']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.runtime.experiments", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *EXPERIMENTS], metavar="NAME",
                        help=f"experiments to run (default: all): {', '.join(EXPERIMENTS)}")
    parser.add_argument("--config", help="the profile to run on (default: each experiment's own)")
    parser.add_argument("--seed", type=int, help="the simulator's seed ([driver] seed)")
    parser.add_argument("--params", default="{}", help="the experiment's parameters as JSON (one experiment)")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    overrides: dict[str, Any] = {}
    if args.seed is not None:
        overrides["driver"] = {"seed": args.seed}
    for name in args.names or list(EXPERIMENTS):
        result = run_offline(name, args.config, overrides=overrides, params=json.loads(args.params))
        if args.json:
            sys.stdout.write(json.dumps(result) + "\n")
        else:
            sys.stdout.write("\n".join(_table(result)) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
