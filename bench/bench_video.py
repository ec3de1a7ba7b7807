"""Video benchmark: render+encode cost, then websocket delivery to 1 and 5 clients and a slow client.

Prints figures, asserts nothing. The server (aiohttp + VideoService + the sim
camera) runs in this process; the viewers run in a separate process with their
own event loop, so their CPU is not counted as the server's. Latency is capture
stamp → message received by the viewer (same machine, same wall clock), so it
includes render and encode.

    .venv/bin/python bench/bench_video.py [--duration 5] [--fps 30] [--width 640 --height 480] [--quality 70]

Targets (docs/video.md, notes/performance.md §3): 30 fps to each of 5 clients,
p99 ≤ 10 ms on loopback; a client that consumes 10 fps: p99 ≤ 50 ms and
≤ 2 frames in flight; ≤ 1 % of a core per extra client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2  # noqa: E402
from aiohttp import ClientSession, WSMsgType, web  # noqa: E402

from drivers.camera.sim import SimCamera  # noqa: E402
from server.video import VideoService, encode_frame, setup_video  # noqa: E402
from sim.camera import CameraIntrinsics, render  # noqa: E402
from sim.world import World  # noqa: E402

WORLD_CFG = {
    "size_m": [6.0, 4.0],
    "boxes": [{"center": [4.5, 1.0], "size": [0.4, 0.4]}, {"center": [3.0, 3.0], "size": [0.6, 0.3], "yaw_deg": 30}],
    "ramps": [{"center": [2.0, 1.0], "size": [1.0, 0.8], "slope_deg": 8}],
}


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else math.nan


# --------------------------------------------------------------------------- render + encode


def bench_render_encode(w: int, h: int, quality: int, n: int = 300) -> None:
    world = World.from_config(WORLD_CFG)
    for sigma in (0.0, 4.0):
        k = CameraIntrinsics(w, h, math.radians(70), noise_sigma=sigma)
        rng = np.random.default_rng(1)
        r_ms, e_ms, sizes = [], [], []
        for i in range(n):
            pose = {"x": 1.0 + 0.01 * i, "y": 2.0, "yaw": 0.2 * math.sin(i / 20), "pitch": 0.03 * math.sin(i / 7),
                    "roll": 0.03 * math.cos(i / 9)}
            t0 = time.perf_counter()
            img = render(world, pose, k, i / 30, i, rng)
            t1 = time.perf_counter()
            f = encode_frame(img, quality, i, time.time())
            t2 = time.perf_counter()
            r_ms.append((t1 - t0) * 1e3)
            e_ms.append((t2 - t1) * 1e3)
            sizes.append(len(f.jpeg))
        print(f"render {w}x{h} noise σ={sigma:g}: p50 {pct(r_ms, 50):.2f} ms  p99 {pct(r_ms, 99):.2f} ms | "
              f"encode q{quality}: p50 {pct(e_ms, 50):.2f} ms  p99 {pct(e_ms, 99):.2f} ms | "
              f"{np.mean(sizes) / 1024:.1f} KB/frame")
    img = render(world, {"x": 1.0, "y": 2.0}, CameraIntrinsics(w, h), 0.0, 0)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    t0 = time.perf_counter()
    for _ in range(100):
        cv2.imdecode(buf, cv2.IMREAD_COLOR)
    print(f"imdecode (what a viewer pays): {(time.perf_counter() - t0) * 10:.2f} ms/frame")


# --------------------------------------------------------------------------- viewers (separate process)


async def _viewer(url: str, t_start: float, t_end: float, ack_delay_s: float, out: dict) -> None:
    lat, frames, in_flight_max = [], 0, 0
    unacked = 0
    async with ClientSession() as s:
        async with s.ws_connect(url, max_msg_size=0, compress=0) as ws:
            pending: list[asyncio.Task] = []

            async def ack_later(seq: int) -> None:
                nonlocal unacked
                await asyncio.sleep(ack_delay_s)
                unacked -= 1
                await ws.send_str(json.dumps({"type": "ack", "seq": seq}))

            while time.time() < t_end:
                try:
                    msg = await asyncio.wait_for(ws.receive(), max(0.01, t_end - time.time()))
                except asyncio.TimeoutError:
                    break
                if msg.type != WSMsgType.BINARY:
                    if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR):
                        break
                    continue
                now = time.time()
                data = msg.data
                n = int.from_bytes(data[:4], "big")
                header = json.loads(data[4:4 + n])
                unacked += 1
                in_flight_max = max(in_flight_max, unacked)
                if now >= t_start:
                    frames += 1
                    lat.append((now - header["capture_t"]) * 1e3)
                if ack_delay_s:
                    pending.append(asyncio.create_task(ack_later(header["seq"])))
                else:
                    unacked -= 1
                    await ws.send_str(json.dumps({"type": "ack", "seq": header["seq"]}))
            for t in pending:
                t.cancel()
    out.update(frames=frames, lat=lat, in_flight_max=in_flight_max)


async def _mjpeg_viewer(url: str, t_start: float, t_end: float, out: dict) -> None:
    lat, frames = [], 0
    async with ClientSession() as s:
        async with s.get(url) as r:
            buf = b""
            while time.time() < t_end:
                try:
                    chunk = await asyncio.wait_for(r.content.readany(), max(0.01, t_end - time.time()))
                except asyncio.TimeoutError:
                    break
                buf += chunk
                while True:
                    head_end = buf.find(b"\r\n\r\n")
                    if head_end < 0:
                        break
                    head = buf[:head_end].decode("latin-1")
                    fields = dict(line.split(": ", 1) for line in head.split("\r\n") if ": " in line)
                    size = int(fields["Content-Length"])
                    end = head_end + 4 + size + 2
                    if len(buf) < end:
                        break
                    now = time.time()
                    buf = buf[end:]
                    if now >= t_start:
                        frames += 1
                        lat.append((now - float(fields["X-Capture-Time"])) * 1e3)
    out.update(frames=frames, lat=lat, in_flight_max=None)


def _clients_main(base: str, specs: list[str], warmup_s: float, duration_s: float, q: mp.Queue) -> None:
    async def main():
        t0 = time.time()
        t_start, t_end = t0 + warmup_s, t0 + warmup_s + duration_s
        outs = [dict() for _ in specs]
        tasks = []
        for spec, out in zip(specs, outs):
            if spec == "mjpeg":
                tasks.append(_mjpeg_viewer(base + "/video.mjpeg", t_start, t_end, out))
            else:
                delay = 0.1 if spec == "slow" else 0.0
                tasks.append(_viewer(base.replace("http", "ws") + "/ws/video", t_start, t_end, delay, out))
        c0 = time.process_time()
        await asyncio.gather(*tasks)
        return outs, (time.process_time() - c0) / (time.time() - t0)

    outs, cpu = asyncio.run(main())
    q.put((outs, cpu))


# --------------------------------------------------------------------------- server side


def _proc_cpu_s() -> float:
    return time.process_time()


async def bench_stream(args, scenarios) -> None:
    world = World.from_config(WORLD_CFG)
    t_sim0 = time.monotonic()

    def pose():
        t = time.monotonic() - t_sim0
        return {"x": 1.0 + 0.2 * math.sin(t / 3), "y": 2.0, "yaw": 0.3 * math.sin(t / 2), "t": t}

    settings = {"width": args.width, "height": args.height, "fps": args.fps, "quality": args.quality}
    service = VideoService(lambda s: SimCamera(s, world, pose), settings)
    app = web.Application()
    setup_video(app, service)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    ctx = mp.get_context("spawn")
    print(f"\nstreaming {args.width}x{args.height} @ {args.fps} fps q{args.quality}, "
          f"{args.duration:g} s per case after {args.warmup:g} s warm-up; viewers in a separate process")
    print(f"{'case':<34} {'fps/client':>22} {'p50/p99/max ms':>22} {'in flight':>9} {'server CPU':>10} {'viewers CPU':>11}")
    try:
        await asyncio.sleep(1.0)
        # idle: capture + render + encode, no viewer
        c0, w0 = _proc_cpu_s(), time.perf_counter()
        await asyncio.sleep(args.duration)
        idle = (_proc_cpu_s() - c0) / (time.perf_counter() - w0)
        print(f"{'0 clients (capture+render+encode)':<34} {'':>22} {'':>22} {'':>9} {idle * 100:>9.1f}% {'':>11}")
        for name, specs in scenarios:
            q = ctx.Queue()
            proc = ctx.Process(target=_clients_main, args=(base, specs, args.warmup, args.duration, q))
            proc.start()
            await asyncio.sleep(args.warmup)
            c0, w0 = _proc_cpu_s(), time.perf_counter()
            while proc.is_alive() and q.empty():  # noqa: ASYNC110 - polls another process's queue
                await asyncio.sleep(0.05)
            cpu = (_proc_cpu_s() - c0) / (time.perf_counter() - w0)
            outs, viewer_cpu = await asyncio.to_thread(q.get)
            proc.join()
            groups: dict[str, list[dict]] = {}
            for spec, out in zip(specs, outs):
                groups.setdefault(spec, []).append(out)
            for spec, group in groups.items():
                fps = [o["frames"] / args.duration for o in group]
                lat = [x for o in group for x in o["lat"]]
                inflight = [o["in_flight_max"] for o in group if o["in_flight_max"] is not None]
                label = f"{name} [{spec} x{len(group)}]"
                fps_txt = ", ".join(f"{f:.1f}" for f in fps)
                lat_txt = f"{pct(lat, 50):.1f}/{pct(lat, 99):.1f}/{max(lat) if lat else math.nan:.1f}"
                print(f"{label:<34} {fps_txt:>22} {lat_txt:>22} {max(inflight) if inflight else '-':>9} "
                      f"{cpu * 100:>9.1f}% {viewer_cpu * 100:>10.1f}%")
            info = service.describe()
            c = info["counters"]
            print(f"{'':<34} server: fps measured {c['fps_measured']}, encode {c['encode_ms']} ms, "
                  f"{c['jpeg_bytes'] / 1024:.1f} KB, coalesced {c['coalesced']}, late {c['late']}")
    finally:
        await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--quality", type=int, default=70)
    ap.add_argument("--skip-render", action="store_true")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, opencv {cv2.__version__}, {os.cpu_count()} CPUs")
    if not args.skip_render:
        bench_render_encode(args.width, args.height, args.quality)
    scenarios = [
        ("1 client", ["fast"]),
        ("5 clients", ["fast"] * 5),
        ("5 clients, one consumes 10 fps", ["fast"] * 4 + ["slow"]),
        ("1 MJPEG viewer (no acks)", ["mjpeg"]),
    ]
    asyncio.run(bench_stream(args, scenarios))


if __name__ == "__main__":
    main()
