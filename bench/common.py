"""Shared helpers for the benchmarks: start the real server, stats, CPU time of a process."""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import TEST_DEFAULTS, ServerProc, deep_merge, wait_until  # noqa: E402

import tomli_w  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def start_server(overrides: dict | None = None) -> ServerProc:
    base = tomllib.loads((REPO / "config/rover-sim.toml").read_text())
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), overrides or {})
    path = Path(tempfile.mkdtemp(prefix="teleop-bench-")) / "bench.toml"
    path.write_text(tomli_w.dumps(cfg))
    return ServerProc(path).start()


async def messages_until(ws: aiohttp.ClientWebSocketResponse, stop_t: float):
    """The socket's messages until the wall time ``stop_t`` (a quiet socket is polled every 2 s)."""
    while time.time() < stop_t:
        try:
            yield await asyncio.wait_for(ws.receive(), 2)
        except asyncio.TimeoutError:
            continue


async def read_telemetry(ws: aiohttp.ClientWebSocketResponse, stop_t: float, on_snapshot) -> None:
    """Read ``/ws/telemetry`` until ``stop_t``; ``on_snapshot(received_wall_t, latency_s)`` per snapshot, where
    the latency is the receive time − the snapshot's own ``"t"`` (a cheap parse: the client process must not be
    the bottleneck)."""
    async for msg in messages_until(ws, stop_t):
        if msg.type != aiohttp.WSMsgType.TEXT:
            break
        now = time.time()
        if msg.data.startswith('{"type":"telemetry"'):
            i = msg.data.find(',"t":', 0, 200)
            j = msg.data.find(",", i + 5)
            on_snapshot(now, now - float(msg.data[i + 5:j]))


def video_viewer_proc(url: str, seconds: float, out: mp.Queue) -> None:
    """One /ws/video viewer that acks every frame (a browser tab)."""
    async def main() -> int:
        frames = 0
        stop_t = time.time() + seconds
        async with aiohttp.ClientSession() as s, s.ws_connect(url + "/ws/video") as ws:
            async for msg in messages_until(ws, stop_t):
                if msg.type == aiohttp.WSMsgType.BINARY:
                    n = int.from_bytes(msg.data[:4], "big")
                    seq = json.loads(msg.data[4:4 + n])["seq"]
                    await ws.send_str(json.dumps({"type": "ack", "seq": seq}))
                    frames += 1
        return frames

    out.put(asyncio.run(main()))


def cpu_seconds(pid: int) -> float:
    """user+system CPU seconds of a process (all threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def best_us(fn, n: int) -> float:
    """Best of three runs of ``n`` calls of ``fn()``, microseconds per call."""
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def pct(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def summary_ms(values) -> str:
    v = np.asarray(values, dtype=float) * 1e3
    if not len(v):
        return "no samples"
    return f"p50 {pct(v, 50):.3f} / p99 {pct(v, 99):.3f} / max {v.max():.3f} ms (n={len(v)})"


__all__ = ["REPO", "video_viewer_proc", "ServerProc", "best_us", "cpu_seconds", "pct", "start_server", "summary_ms", "wait_until"]
