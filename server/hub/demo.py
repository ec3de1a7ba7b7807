"""``make fleet N=3`` (``python -m server.hub.demo --robots 3``): a router, a hub and N simulated robots, each a
full teleop server (rover, rover, SCARA, … in turn), all on loopback; prints the hub's URL. Ctrl-C stops them all.
Keys are made fresh in a temporary directory (``python -m server fleet-certs``); the robots and the hub run in
local mode (no users: this machine only). docs/fleet.md, "Try it".
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import tomli_w

from server.config import REPO_ROOT
from server.hub.certs import make_fleet_certs

PROFILES = ("rover-sim", "rover-sim", "scara-sim")


def start(cmd: list[str], marker: str, name: str, procs: list[subprocess.Popen], timeout_s: float = 90.0) -> str:
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(proc)
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            if not found and marker in line:
                found.append(line.strip().split(marker, 1)[1].split()[0])
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout_s) or not found:
        raise RuntimeError(f"{name} did not start")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server.hub.demo")
    p.add_argument("--robots", type=int, default=3)
    p.add_argument("--router-port", type=int, default=7447)
    p.add_argument("--hub-port", type=int, default=8090)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="teleop-fleet-"))
    make_fleet_certs(tmp, ["127.0.0.1"], [])
    endpoint = f"tcp/127.0.0.1:{args.router_port}"
    procs: list[subprocess.Popen] = []
    py = sys.executable
    try:
        start([py, "-m", "server", "router", "--listen", endpoint], "teleop router listening on ", "router", procs)
        for i in range(1, args.robots + 1):
            profile = PROFILES[(i - 1) % len(PROFILES)]
            cfg = tomllib.loads((REPO_ROOT / "config" / f"{profile}.toml").read_text())
            cfg["fleet"] = {"enabled": True, "router": [endpoint], "fleet": "demo", "robot_id": f"r{i}",
                            "hub_public_key": str(tmp / "hub-sign.pub")}
            cfg.setdefault("auth", {})["users_file"] = str(tmp / f"r{i}-users.json")
            path = tmp / f"r{i}.toml"
            path.write_text(tomli_w.dumps(cfg))
            url = start([py, "-m", "server", "--config", str(path), "--port", "0"], "teleop listening on ", f"r{i}",
                        procs)
            print(f"robot r{i} ({profile}): {url}", flush=True)
        hub_cfg = tmp / "hub.toml"
        hub_cfg.write_text(tomli_w.dumps({"auth": {"users_file": str(tmp / "hub-users.json")},
                                          "hub": {"router": [endpoint], "fleet": "demo",
                                                  "key_file": str(tmp / "hub-sign.key"),
                                                  "events_dir": str(tmp / "events")}}))
        url = start([py, "-m", "server", "hub", "--config", str(hub_cfg), "--port", str(args.hub_port)],
                    "teleop hub listening on ", "hub", procs)
        print(f"fleet hub: {url}  (Ctrl-C stops the router, the hub and the robots)", flush=True)
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        while not done.wait(1.0):
            if any(p.poll() is not None for p in procs):
                print("a fleet process exited; stopping the others", file=sys.stderr)
                break
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
