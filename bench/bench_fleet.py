"""The fleet (issue 22) on this machine: N robots' 1 Hz summaries and one robot watched at 50 Hz into one hub,
and a command's round trip through the hub against the peer, the direct websocket to the robot.

* one real robot (the simulated rover, a full teleop server with ``[fleet]`` on) and ``N - 1`` light robots: the
  fleet link's own pieces (:func:`~server.gateway.fleet.link.zenoh_config` client sessions, the robot's keys,
  a liveliness token, 1 Hz summaries put with congestion control DROP, a signed-query queryable checked by
  :class:`~server.gateway.fleet.trust.Verifier`) in one process, without a gateway and runtime each;
* ``python -m server router`` and ``python -m server hub`` (local mode) as separate processes, on loopback;
* a browser-like client (aiohttp) on the hub's ``/ws/fleet`` (summary latency robot → hub → browser: receive time −
  the robot's own send time, one clock) and ``/ws/fleet/r0`` (the watched robot's snapshots);
* command round trip: ``speed`` (zero, while running) sent as a websocket message and its ``ack``: through the hub
  (browser → hub → router → robot gateway → runtime and back) against straight to the robot's ``/ws/telemetry``.

``python bench/bench_fleet.py [--robots 100] [--seconds 20] [--quick]``; figures in docs/fleet.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from common import REPO, cpu_seconds, pct, start_server  # noqa: F401 - REPO puts the repo on sys.path

from tests.server.fleet.fleetkit import RouterProc, hub_config, hub_proc  # noqa: E402

FLEET = "bench"


def child_pids(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def light_robots(endpoint: str, n: int, public: str, seconds: float, ready: mp.Event, out: mp.Queue) -> None:
    """``n`` light robots in this process: the fleet link's sessions, keys, token, summaries and a queryable."""
    import orjson
    import zenoh

    from server.gateway.fleet.keys import RobotKeys
    from server.gateway.fleet.link import zenoh_config
    from server.gateway.fleet.trust import Verifier

    robots = []
    for i in range(1, n + 1):
        keys = RobotKeys(FLEET, f"r{i}")
        s = zenoh.open(zenoh_config("client", connect=[endpoint]))
        verifier = Verifier.from_file(public)

        def answer(q, keys=keys, verifier=verifier):
            try:
                verifier.open(q.payload.to_bytes(), q.attachment.to_bytes() if q.attachment else None)
                q.reply(keys.rpc, b'{"ok": true, "result": {}}')
            except Exception as err:  # noqa: BLE001
                q.reply(keys.rpc, orjson.dumps({"ok": False, "status": 401, "error": {"message": str(err)}}))
            q.drop()

        pub = s.declare_publisher(keys.summary, congestion_control=zenoh.CongestionControl.DROP)
        robots.append((s, keys, pub, s.liveliness().declare_token(keys.alive), s.declare_queryable(keys.rpc, answer)))
    ready.set()
    t_end = time.time() + seconds
    k = 0
    while time.time() < t_end:
        t0 = time.time()
        for s, keys, pub, *_ in robots:
            pub.put(orjson.dumps({"id": keys.robot, "fleet": FLEET, "t": time.time(), "state": "idle", "cause": None,
                                  "battery": 12.0, "position": {"x": 0.0, "y": 0.0}, "alerts": [], "lease": None,
                                  "link": {"age_s": None}}))
        k += 1
        time.sleep(max(0.0, 1.0 - (time.time() - t0)))
    out.put({"rounds": k})
    for s, *_ in robots:
        s.close()


async def browser_fleet(url: str, seconds: float) -> dict:
    lat, n = [], 0
    async with aiohttp.ClientSession() as s, s.ws_connect(url.replace("http", "ws") + "/ws/fleet") as ws:
        t_end = time.time() + seconds
        while time.time() < t_end:
            try:
                msg = await asyncio.wait_for(ws.receive(), 2)
            except asyncio.TimeoutError:
                continue
            now = time.time()
            m = json.loads(msg.data)
            t = m.get("data", {}).get("t")
            if m.get("type") == "robot" and isinstance(t, (int, float)):
                lat.append(now - t)
                n += 1
    return {"summaries": n, "latency_s": lat}


async def browser_watch(url: str, rid: str, seconds: float) -> dict:
    ages, n = [], 0
    async with aiohttp.ClientSession() as s, s.ws_connect(url.replace("http", "ws") + f"/ws/fleet/{rid}") as ws:
        t_end = time.time() + seconds
        t_first = None
        while time.time() < t_end:
            try:
                msg = await asyncio.wait_for(ws.receive(), 2)
            except asyncio.TimeoutError:
                continue
            if msg.type == aiohttp.WSMsgType.BINARY:
                now = time.time()
                t_first = t_first or now
                ages.append(now - json.loads(msg.data)["t"])
                n += 1
    span = max(1e-9, time.time() - (t_first or time.time()))
    return {"snapshots": n, "rate_hz": n / span, "age_s": ages}


async def round_trips(ws_url: str, n: int, beat: bool) -> list[float]:
    """``n`` zero ``speed`` messages, one at a time, and their ``ack``s (heartbeats between: the robot runs)."""
    rtts: list[float] = []
    async with aiohttp.ClientSession() as s, s.ws_connect(ws_url) as ws:
        async def reader():
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    yield json.loads(msg.data)

        it = reader()
        await ws.send_str(json.dumps({"type": "start", "id": "s"}))
        for i in range(n):
            t0 = time.perf_counter()
            await ws.send_str(json.dumps({"type": "speed", "id": i, "linear": 0.0, "angular": 0.0}))
            async for m in it:
                if m.get("id") == i and m.get("type") in ("ack", "error"):
                    if m["type"] == "ack":
                        rtts.append(time.perf_counter() - t0)
                    break
            if beat:
                await ws.send_str(json.dumps({"type": "heartbeat"}))
            await asyncio.sleep(0.02)
        await ws.send_str(json.dumps({"type": "stop", "id": "x"}))
    return rtts


def ms(values, q) -> str:
    return f"{pct(values, q) * 1e3:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--robots", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--trips", type=int, default=300)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.robots, args.seconds, args.trips = 20, 8.0, 100
    tmp = Path(tempfile.mkdtemp(prefix="teleop-fleet-bench-"))
    subprocess.run([sys.executable, "-m", "server", "fleet-certs", "--out", str(tmp), "--router-host", "127.0.0.1"],
                   check=True, cwd=REPO, capture_output=True)
    private, public = tmp / "hub-sign.key", tmp / "hub-sign.pub"
    router = RouterProc().start()
    robot = start_server({"fleet": {"enabled": True, "router": [router.endpoint], "fleet": FLEET, "robot_id": "r0",
                                    "hub_public_key": str(public)},
                          "auth": {"users_file": str(tmp / "robot-users.json")},
                          "safety": {"command_timeout_s": 2.0}})
    hub = hub_proc(hub_config(tmp, router, FLEET, private, watch_hz=50.0, events_dir="")).start()
    spawn = mp.get_context("spawn")  # a fresh interpreter: zenoh's threads do not survive a fork
    ready, out = spawn.Event(), spawn.Queue()
    light = spawn.Process(target=light_robots, args=(router.endpoint, args.robots - 1, str(public),
                                                                      args.seconds + 30, ready, out))
    try:
        light.start()
        if not ready.wait(120):
            raise RuntimeError("light robots did not start")
        deadline = time.time() + 60
        while time.time() < deadline:
            robots = hub.get("/api/fleet")[1]["robots"]
            if sum(r["online"] for r in robots) >= args.robots:
                break
            time.sleep(0.5)
        online = sum(r["online"] for r in hub.get("/api/fleet")[1]["robots"])
        print(f"fleet: {online} of {args.robots} robots online on the hub "
              f"(1 real rover + {args.robots - 1} light robots)")
        pids = {"hub": hub.proc.pid, "router": router.proc.pid, "light robots": light.pid}
        for pid in child_pids(robot.proc.pid):  # the real robot's runtime and gateway
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            pids[f"r0 {argv[2].decode() if len(argv) > 2 else pid}"] = pid
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        t0 = time.time()

        async def window():
            return await asyncio.gather(browser_fleet(hub.url, args.seconds), browser_watch(hub.url, "r0", args.seconds))

        fleet_fig, watch_fig = asyncio.run(window())
        span = time.time() - t0
        cpu = {k: (cpu_seconds(p) - cpu0[k]) / span * 100 for k, p in pids.items()}
        mem = {k: rss_mb(p) for k, p in pids.items()}
        lat = fleet_fig["latency_s"]
        print(f"summaries robot → hub → browser: {fleet_fig['summaries']} in {span:.1f} s, latency p50 "
              f"{ms(lat, 50)} / p99 {ms(lat, 99)} / max {ms(lat, 100)} ms")
        print(f"watched robot r0 (50 Hz asked): {watch_fig['rate_hz']:.1f} snapshots/s at the browser, age p50 "
              f"{ms(watch_fig['age_s'], 50)} / p99 {ms(watch_fig['age_s'], 99)} ms")
        print("CPU % of one core: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
        print("RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in mem.items())
              + f"; light robots per robot {mem['light robots'] / max(1, args.robots - 1):.2f} MiB")

        # commands: through the hub (lease taken there) vs the direct websocket (the peer)
        assert hub.post("/api/fleet/r0/lease/take", {})[0] == 200
        hub.post("/api/fleet/r0/reset", {})
        via_hub = asyncio.run(round_trips(hub.url.replace("http", "ws") + "/ws/fleet/r0", args.trips, beat=True))
        assert hub.post("/api/fleet/r0/lease/release", {})[0] == 200
        robot.post("/api/reset")
        direct = asyncio.run(round_trips(robot.ws_url + "/ws/telemetry", args.trips, beat=True))
        print(f"command round trip ({len(via_hub)}/{args.trips} and {len(direct)}/{args.trips} acked):")
        print(f"  browser → hub → robot runtime → back: p50 {ms(via_hub, 50)} / p99 {ms(via_hub, 99)} ms")
        print(f"  direct websocket to the robot (peer):  p50 {ms(direct, 50)} / p99 {ms(direct, 99)} ms")
        print(f"  added by the hub: p50 {(pct(via_hub, 50) - pct(direct, 50)) * 1e3:.2f} ms, p99 "
              f"{(pct(via_hub, 99) - pct(direct, 99)) * 1e3:.2f} ms; ratio p50 "
              f"{pct(via_hub, 50) / pct(direct, 50):.2f}×, p99 {pct(via_hub, 99) / pct(direct, 99):.2f}×")
        per_robot_hub = cpu["hub"] / args.robots
        per_robot_router = cpu["router"] / args.robots
        print(f"1,000 robots on paper (linear in robots): hub ≈ {per_robot_hub * 1000:.0f} %, router ≈ "
              f"{per_robot_router * 1000:.0f} % of one core for summaries; light-robot memory "
              f"{mem['light robots'] / max(1, args.robots - 1) * 1000 / 1024:.1f} GiB if in one process")
    finally:
        if light.pid is not None:
            light.terminate()
        light.join(10)
        hub.kill()
        robot.kill()
        router.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
