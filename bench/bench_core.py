"""Issue 9's figures: the runtime process and the gateway, measured against their peers in one run.

Run: ``.venv/bin/python bench/bench_core.py [--quick] [--only loop,fanout,api,idle]`` (``make bench`` runs
it all).

* control loop at 1 kHz (default profile, video on, one viewer acking every frame): deadlines met
  and lateness p99 over the whole run, from the runtime's own histogram (``loop_stats``); then
  the same with two CPU-bound processes and 50 telemetry clients;
* telemetry latency (snapshot stamped in the runtime → client receives it) at 1, 10, 50 and 100
  clients, side by side with a plain aiohttp broadcast server and a foxglove-sdk server sending a
  message of the snapshot's size at the same rate to the same client swarm (the foxglove peer with
  ``TCP_NODELAY``, as aiohttp has it: without it Nagle's algorithm made its p99 24–28 ms at every N,
  see ``server.gateway.recording.live.set_listener_nodelay``);
* gateway → runtime command latency: request round trips over the runtime API from a client
  process like the gateway, and a setpoint's one-way time from sent to applied (the runtime's stamp on
  the record it makes right after applying it);
* link-loss stop with the gateway frozen (SIGSTOP), 1 kHz: how long after the timeout the runtime
  commanded the stop, read from its own event log;
* idle CPU of the whole server (launcher, runtime, gateway, renderer) with video on and no client,
  and where it goes (per process and per runtime thread).

Figures, never assertions: this is a shared 2-core VM; compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import orjson

from common import (REPO, cpu_seconds, read_foxglove, read_plain, read_telemetry, socket_path, start_peer, start_server,
                    summary_ms, video_viewer_proc, wait_until)

RATE_HZ = 50.0


# ---------------------------------------------------------------------- helpers
def loop_figures(srv, before: dict | None = None) -> dict:
    """Deadlines met and lateness percentiles from the runtime's histogram (delta since ``before``)."""
    h = runtime_call(srv, "loop_stats")
    if before is not None:
        h = {**h, "counts": [a - b for a, b in zip(h["counts"], before["counts"])],
             "ticks": h["ticks"] - before["ticks"], "missed": h["missed"] - before["missed"]}
    counts = np.array(h["counts"], dtype=float)
    edges = h["buckets_us"]
    total = counts.sum()

    def pct(q: float) -> float:
        i = int(np.searchsorted(np.cumsum(counts), q * total))
        return edges[min(i, len(edges) - 1)]

    met = 100.0 * h["ticks"] / max(1, h["ticks"] + h["missed"])
    return {"met": met, "missed": h["missed"], "ticks": h["ticks"], "p50": pct(0.5), "p99": pct(0.99),
            "p999": pct(0.999), "raw": h}


def runtime_call(srv, method: str, params: dict | None = None) -> dict:
    sys.path.insert(0, str(REPO))
    from server.console import Console

    c = Console(socket_path(srv))
    try:
        return c.call(method, params or {})
    finally:
        c.close()


def children(srv) -> dict[str, int]:
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == srv.proc.pid and len(cmd) > 2 and cmd[1] == b"-m":
            out[cmd[2].decode().rsplit(".", 1)[-1]] = int(pid)
    return out


def descendants(pid: int) -> list[int]:
    out = [pid]
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == pid:
            out += descendants(int(p))
    return out


def _burn(seconds: float) -> None:
    end = time.time() + seconds
    x = 0
    while time.time() < end:
        x += 1


# ---------------------------------------------------------------------- client swarm (own process)
def _swarm(kind: str, url: str, n: int, seconds: float, out: mp.Queue) -> None:
    """``n`` clients of a ``kind`` server ("project", "aiohttp", "foxglove"): latency = receive wall time −
    the message's own ``"t"`` (stamped where it was built)."""
    lat: list[float] = []

    async def project(session: aiohttp.ClientSession, stop_t: float) -> None:
        async with session.ws_connect(url + "/ws/telemetry") as ws:
            await read_telemetry(ws, stop_t, lambda _now, latency: lat.append(latency))

    async def plain(session: aiohttp.ClientSession, stop_t: float) -> None:
        await read_plain(session, url, stop_t, lat.append)

    async def foxglove(session: aiohttp.ClientSession, stop_t: float) -> None:
        await read_foxglove(session, url, stop_t, lat.append)

    async def main() -> None:
        stop_t = time.time() + seconds
        one = {"project": project, "aiohttp": plain, "foxglove": foxglove}[kind]
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(one(session, stop_t) for _ in range(n)), return_exceptions=True)

    asyncio.run(main())
    out.put(lat)


def fanout(ns: list[int], seconds: float) -> None:
    srv = start_server({"telemetry": {"rate_hz": RATE_HZ}})
    try:
        snap = srv.request("GET", "/api/state")[1]
        message = json.dumps(snap, separators=(",", ":"))
        message = '{"seq":1,"t":0.0,' + message.split(",", 2)[2]  # "t" second, like a snapshot
        print(f"  snapshot {len(message)} B at {RATE_HZ:.0f} Hz; latency = receive − build stamp (ms)")
        peers = {kind: start_peer(kind, message, RATE_HZ) for kind in ("aiohttp", "foxglove")}
        rows = []
        for n in ns:
            row = {}
            for kind, url in (("project", srv.url), ("aiohttp", peers["aiohttp"][1]),
                              ("foxglove", peers["foxglove"][1])):
                q = mp.Queue()
                p = mp.Process(target=_swarm, args=(kind, url, n, seconds, q), daemon=True)
                p.start()
                lat = q.get(timeout=seconds + 60)
                p.join(10)
                row[kind] = np.asarray(lat) * 1e3
            rows.append((n, row))
            r = {k: (np.percentile(v, 99) if len(v) else float("nan")) for k, v in row.items()}
            print(f"  N={n:3d}: p99 project {r['project']:.2f} / aiohttp {r['aiohttp']:.2f} / foxglove "
                  f"{r['foxglove']:.2f} ms; p50 {np.percentile(row['project'], 50):.2f} / "
                  f"{np.percentile(row['aiohttp'], 50):.2f} / {np.percentile(row['foxglove'], 50):.2f}; "
                  f"project ÷ aiohttp {r['project'] / r['aiohttp']:.2f}×, ÷ foxglove {r['project'] / r['foxglove']:.2f}×"
                  f"; delivered {len(row['project'])} / {len(row['aiohttp'])} / {len(row['foxglove'])}")
        for p, _ in peers.values():
            p.kill()
    finally:
        srv.stop()


# ---------------------------------------------------------------------- the loop
def loop_1khz(seconds: float, load: bool) -> None:
    srv = start_server({"loop": {"rate_hz": 1000}, "video": {"enabled": True}})
    procs = []
    try:
        q: mp.Queue = mp.Queue()
        v = mp.Process(target=video_viewer_proc, args=(srv.url, seconds + 4, q), daemon=True)
        v.start()
        procs.append(v)
        if load:
            for _ in range(2):
                b = mp.Process(target=_burn, args=(seconds + 6,), daemon=True)
                b.start()
                procs.append(b)
            sq: mp.Queue = mp.Queue()
            s = mp.Process(target=_swarm, args=("project", srv.url, 50, seconds + 4, sq), daemon=True)
            s.start()
            procs.append(s)
        time.sleep(2.0)  # connections up, the camera streaming
        before = runtime_call(srv, "loop_stats")
        time.sleep(seconds)
        f = loop_figures(srv, before)
        label = "video + 1 viewer" + (" + 2 CPU-bound processes + 50 telemetry clients" if load else "")
        fps = ""
        if not load:
            v.join(seconds + 10)
            fps = f"; viewer {q.get(timeout=10) / (seconds + 4):.1f} fps"
        print(f"  1 kHz, {label}, {seconds:.0f} s: deadlines met {f['met']:.3f} % ({f['missed']} missed of "
              f"{f['ticks'] + f['missed']}); lateness p50 ≤ {f['p50']:g} µs, p99 ≤ {f['p99']:g} µs, "
              f"p99.9 ≤ {f['p999']:g} µs (histogram bucket edges){fps}; gc collections {f['raw']['gc_collections']}")
    finally:
        for p in procs:
            p.kill()
        srv.stop()


# ---------------------------------------------------------------------- runtime API round trip
def _rtt_proc(sock: str, n: int, out: mp.Queue) -> None:
    async def main() -> dict:
        sys.path.insert(0, str(REPO))
        from server.runtime_api.client import RuntimeClient

        res = {"ping": [], "heartbeat": [], "setpoint": [], "setpoint applied (one way)": []}
        want: list = []  # [linear, wall time sent] of the setpoint in flight

        def on_snapshot(data: bytes) -> None:
            # one way = the runtime's stamp on the record it made right after applying the setpoint (under
            # the loop lock, before the reply) − the wall time the request left; both processes read the
            # same system clock
            if want:
                snap = orjson.loads(data)
                if snap.get("setpoint", {}).get("linear") == want[0] and snap["t"] >= want[1]:
                    res["setpoint applied (one way)"].append(snap["t"] - want[1])
                    want.clear()

        rt = RuntimeClient(sock, on_snapshot=on_snapshot)
        rt.set_control("bench")  # this client drives: its heartbeats and setpoints keep the robot alive
        rt.start()
        await rt.wait_connected(10)
        await rt.request("start", principal="bench")
        for i in range(n):
            for method, params in (("ping", {}), ("heartbeat", {}),
                                   ("setpoint", {"setpoint": {"linear": 0.05 if i % 2 else 0.0, "angular": 0.0}})):
                if method == "setpoint":
                    want[:] = [params["setpoint"]["linear"], time.time()]
                t0 = time.perf_counter()
                await rt.request(method, params, principal="bench")
                res[method].append(time.perf_counter() - t0)
            await asyncio.sleep(0.002)
        await rt.request("stop")
        await rt.stop()
        return res

    out.put(asyncio.run(main()))


def command_latency(n: int) -> None:
    srv = start_server({"safety": {"command_timeout_s": 60.0}})
    try:
        q: mp.Queue = mp.Queue()
        p = mp.Process(target=_rtt_proc, args=(socket_path(srv), n, q), daemon=True)
        p.start()
        res = q.get(timeout=120)
        for method, v in res.items():
            if "one way" in method:
                print(f"  gateway → runtime, setpoint sent → applied (one way): {summary_ms(v)}")
            else:
                print(f"  gateway → runtime → gateway, {method}: {summary_ms(v)}")
        t0 = time.perf_counter()
        http = []
        for _ in range(n // 2):
            t0 = time.perf_counter()
            srv.post("/api/heartbeat")
            http.append(time.perf_counter() - t0)
        print(f"  for scale, a whole HTTP heartbeat (client → gateway → runtime → back): {summary_ms(http)}")
    finally:
        srv.stop()


# ---------------------------------------------------------------------- link loss with the gateway frozen
def frozen_gateway(trials: int) -> None:
    srv = start_server({"loop": {"rate_hz": 1000}, "safety": {"command_timeout_s": 0.2}})
    beyond = []
    try:
        for _ in range(trials):
            gateway = children(srv)["gateway"]
            wait_until(lambda: srv.post("/api/reset", timeout_s=5)[0] == 200, 10, "reset")
            srv.post("/api/start")
            srv.post("/api/speed", {"linear": 0.2, "angular": 0.0})
            os.kill(gateway, signal.SIGSTOP)
            try:
                ev = wait_until(lambda: [e for e in runtime_call(srv, "events", {"limit": 5})["events"]
                                         if e["trigger"] == "link_loss"], 10, "link loss")
            finally:
                os.kill(gateway, signal.SIGCONT)
            beyond.append(ev[-1]["values"]["age_s"] - 0.2)
            wait_until(lambda: srv.get("/api/state", timeout_s=5)[0] == 200, 10, "gateway back")
            srv.post("/api/debug/driver", {"teleport": [3.0, 2.0, 0.0]})
        print(f"  link loss at 1 kHz with the gateway frozen: stop commanded beyond the 0.2 s timeout: "
              f"{summary_ms(beyond)}")
    finally:
        srv.stop()


# ---------------------------------------------------------------------- idle CPU
def thread_cpu(pid: int) -> dict[str, float]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{name}[{tid}]"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def idle_cpu(seconds: float) -> None:
    """`make run`'s own profile (config/rover-sim.toml: 100 Hz, video on), no client connected."""
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    from tests.conftest import ServerProc

    srv = ServerProc(REPO / "config" / "rover-sim.toml")
    srv.port = free
    srv.start()
    try:
        time.sleep(3.0)
        pids = {name: descendants(pid) for name, pid in children(srv).items()}
        pids["launcher"] = [srv.proc.pid]
        t0 = time.time()
        cpu0 = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
        threads0 = thread_cpu(children(srv)["runtime"])
        time.sleep(seconds)
        wall = time.time() - t0
        cpu = {k: (sum(cpu_seconds(p) for p in v) - cpu0[k]) / wall for k, v in pids.items()}
        threads = thread_cpu(children(srv)["runtime"])
        total = sum(cpu.values())
        print(f"  idle CPU (make run's profile, video on, no client), {seconds:.0f} s: {100 * total:.1f} % of a core:"
              + "".join(f" {k} {100 * v:.1f} %" for k, v in cpu.items()))
        busiest = sorted(((threads[t] - threads0.get(t, 0.0)) / wall, t) for t in threads)[::-1][:4]
        print("    runtime threads: " + ", ".join(f"{t} {100 * c:.1f} %" for c, t in busiest))
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="loop,fanout,api,idle",
                    help="comma-separated sections to run (default: all of loop,fanout,api,idle)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    secs = 5 if args.quick else 20
    if "loop" in only:
        print("== control loop at 1 kHz (runtime process)")
        loop_1khz(secs, load=False)
        loop_1khz(secs, load=True)
    if "fanout" in only:
        print("== telemetry fan-out, side by side")
        fanout([1, 10, 50, 100], 5 if args.quick else 10)
    if "api" in only:
        print("== runtime API")
        command_latency(200 if args.quick else 1000)
        frozen_gateway(10 if args.quick else 30)
    if "idle" in only:
        print("== idle")
        idle_cpu(10 if args.quick else 20)


if __name__ == "__main__":
    main()
