"""Shared helpers for the benchmarks: start the real server, stats, CPU time of a process."""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import os
import queue
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


async def cancel_and_wait(task: asyncio.Task, every_s: float = 2.0) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again while it has not: Python 3.11's
    ``asyncio.wait_for`` swallows a cancellation that arrives as its inner await completes (fixed in 3.12), so one
    ``cancel()`` of a reader inside ``messages_until`` could leave it reading until its stop time — a day for the
    video viewer of bench_link.py, whose 600 s runs hung there after the last phase."""
    task.cancel()
    while not task.done():
        await asyncio.wait({task}, timeout=every_s)
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)


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


async def watch_video(session: aiohttp.ClientSession, url: str, stop_t: float, on_frame=None,
                      headers: dict[str, str] | None = None) -> int:
    """One ``/ws/video`` JPEG viewer until the wall time ``stop_t``, acking every frame on arrival as the
    dashboard's ``video/jpeg.js`` does once the picture is decoded (one frame in flight: the server sends the
    next only after the ack). ``on_frame(received_wall_t, header, message_bytes)`` per frame; returns the count."""
    frames = 0
    async with session.ws_connect(url + "/ws/video", headers=headers or {}, max_msg_size=0) as ws:
        async for msg in messages_until(ws, stop_t):
            if msg.type == aiohttp.WSMsgType.BINARY:
                now = time.time()
                n = int.from_bytes(msg.data[:4], "big")
                header = json.loads(msg.data[4:4 + n])
                await ws.send_str(json.dumps({"type": "ack", "seq": header["seq"]}))
                frames += 1
                if on_frame is not None:
                    on_frame(now, header, len(msg.data))
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                break
    return frames


def video_viewer_proc(url: str, seconds: float, out: mp.Queue) -> None:
    """One /ws/video viewer that acks every frame (a browser tab), in its own process; puts the frame count."""
    async def main() -> int:
        async with aiohttp.ClientSession() as s:
            return await watch_video(s, url, time.time() + seconds)

    out.put(asyncio.run(main()))


# ---------------------------------------------------------------------- the peers of the telemetry fan-out
# A plain aiohttp websocket broadcast and foxglove-sdk's websocket server, sending a given message (the
# project's own snapshot text) with a fresh wall-clock "t" at a given rate to every client: bench_core.py
# compares them on loopback, bench_link.py on the emulated link. Their clients (read_plain, read_foxglove)
# take the latency as receive wall time − the message's "t".

def stamp_of(text: str | bytes) -> float:
    """The value of a message's first ``"t":`` (the snapshot's own stamp), a cheap parse."""
    if isinstance(text, (bytes, memoryview)):
        text = bytes(text).decode()
    i = text.find('"t":')
    j = min(k for k in (text.find(",", i + 4), text.find("}", i + 4)) if k >= 0)
    return float(text[i + 4:j])


def _restamp(message: str):
    """``message`` → a function giving it with its first ``"t"`` set to the wall time now."""
    i = message.index('"t":') + 4
    j = min(k for k in (message.find(",", i), message.find("}", i)) if k >= 0)
    head, tail = message[:i], message[j:]
    return lambda: f"{head}{time.time()!r}{tail}"


def aiohttp_peer(port_q: mp.Queue, message: str, rate_hz: float, host: str = "127.0.0.1") -> None:
    """A plain aiohttp broadcast server: every 1/rate s, the message (with a fresh "t") to every client (aiohttp's
    defaults: permessage-deflate when the client offers it, ``TCP_NODELAY``)."""
    from aiohttp import web

    clients: set = set()
    fresh = _restamp(message)

    async def ws_handler(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        clients.add(ws)
        try:
            async for _ in ws:
                pass
        finally:
            clients.discard(ws)
        return ws

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", ws_handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, host, 0)
        await site.start()
        port_q.put(site._server.sockets[0].getsockname()[1])
        next_t = time.monotonic()
        while True:
            next_t += 1.0 / rate_hz
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
            text = fresh()
            for ws in list(clients):
                try:
                    await ws.send_str(text)
                except (ConnectionError, RuntimeError):
                    clients.discard(ws)

    asyncio.run(main())


def foxglove_peer(port_q: mp.Queue, message: str, rate_hz: float, host: str = "127.0.0.1") -> None:
    """foxglove-sdk's websocket server logging the message (fresh "t") on one JSON channel at ``rate_hz``, with
    ``TCP_NODELAY`` on its listener (without it Nagle's algorithm made its p99 24–28 ms at every N:
    ``server.gateway.recording.live.set_listener_nodelay``)."""
    import foxglove

    from server.gateway.recording.live import set_listener_nodelay

    ctx = foxglove.Context()
    channel = foxglove.Channel("/bench", message_encoding="json", context=ctx)
    server = foxglove.start_server(name="bench", host=host, port=0, context=ctx)
    if set_listener_nodelay(server.port) != 1:
        raise RuntimeError(f"foxglove peer: no TCP listener on port {server.port} to set TCP_NODELAY on")
    port_q.put(server.port)
    fresh = _restamp(message)
    next_t = time.monotonic()
    while True:
        next_t += 1.0 / rate_hz
        time.sleep(max(0.0, next_t - time.monotonic()))
        channel.log(fresh().encode())


PEERS = {"aiohttp": aiohttp_peer, "foxglove": foxglove_peer}


def start_peer(kind: str, message: str, rate_hz: float, host: str = "127.0.0.1",
               within=lambda fn: fn()) -> tuple[mp.Process, str]:
    """Start the ``kind`` peer ("aiohttp", "foxglove") in its own process; returns it and its URL. ``within(fn)``
    calls ``fn`` where the process must start (``lambda fn: link.call_in("robot", fn)``: a spawned process keeps
    the network namespace of the thread that started it)."""
    q = mp.get_context("spawn").Queue()

    def go() -> mp.Process:
        p = mp.get_context("spawn").Process(target=PEERS[kind], args=(q, message, rate_hz, host), daemon=True)
        p.start()
        return p

    p = within(go)
    deadline = time.monotonic() + 60
    while True:
        try:
            port = q.get(timeout=0.5)
            break
        except queue.Empty:
            if not p.is_alive() or time.monotonic() > deadline:
                p.kill()
                raise RuntimeError(f"the {kind} peer did not start (exit code {p.exitcode})") from None
    return p, f"http://{host}:{port}" + ("/" if kind == "aiohttp" else "")


async def read_plain(session: aiohttp.ClientSession, url: str, stop_t: float, on_latency, compress: int = 0) -> None:
    """A client of the aiohttp peer until ``stop_t``: ``on_latency(receive wall time − "t")`` per message;
    ``compress``: offer permessage-deflate with this window (aiohttp's default 0: not offered)."""
    async with session.ws_connect(url, compress=compress) as ws:
        async for msg in messages_until(ws, stop_t):
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            on_latency(time.time() - stamp_of(msg.data))


async def read_foxglove(session: aiohttp.ClientSession, url: str, stop_t: float, on_latency,
                        compress: int = 0) -> None:
    """A client of the foxglove peer (subprotocol ``foxglove.sdk.v1``, subscribed to its one channel) until
    ``stop_t``: ``on_latency(receive wall time − "t")`` per message (``compress``: as :func:`read_plain`; the
    SDK's server never accepts it)."""
    async with session.ws_connect(url, protocols=["foxglove.sdk.v1"], compress=compress) as ws:
        chan = None
        while chan is None:
            msg = json.loads((await asyncio.wait_for(ws.receive(), 30)).data)
            if msg.get("op") == "advertise":
                chan = msg["channels"][0]["id"]
        await ws.send_str(json.dumps({"op": "subscribe", "subscriptions": [{"id": 1, "channelId": chan}]}))
        async for msg in messages_until(ws, stop_t):
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data[0] == 0x01:  # MessageData: op, sub id, log time
                on_latency(time.time() - stamp_of(msg.data[13:]))
            elif msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                break


def socket_path(srv) -> str:
    """The runtime API's socket of a started server (from the launcher's output)."""
    for line in srv.output:
        if "runtime API on " in line:
            return line.split("runtime API on ", 1)[1].split(" ", 1)[0]
    raise RuntimeError("no runtime socket in the launcher's output")


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


__all__ = ["PEERS", "REPO", "ServerProc", "aiohttp_peer", "best_us", "cpu_seconds", "foxglove_peer", "pct", "read_foxglove",
           "read_plain", "socket_path", "start_peer", "start_server", "stamp_of", "summary_ms", "video_viewer_proc",
           "wait_until", "watch_video"]
