"""Issue 14's figures: the vision pipeline's accuracy against the simulator, its cost, its latency.

Run: ``.venv/bin/python bench/bench_vision.py [--quick] [--no-server]``.

* detection against ground truth: every marker decoded from the default world over a sweep of
  poses (rendered by the sim camera at 640×480, JPEG quality 70 like the video service), range
  and bearing errors against the world's geometry, with and without sensor noise; marker pose
  fixes against the true pose, by how many markers they rest on;
* the floor cue's free fraction against the geometric truth over the same sweep;
* CPU cost per frame at 640×480, stage by stage (decode, markers, fix, floor), thread CPU time;
* the worker fed by a 30 fps camera thread (pre-rendered frames of a drive): the rate it holds
  at rate_hz 10 and 30, latency from capture stamp to result, the event loop's lag next to it
  (is a thread enough, or does vision need a process?);
* on the real server (unless ``--no-server``): the control loop's deadlines at 1 kHz with the
  pipeline on and off in the same server (alternating segments; ``POST /api/debug/vision`` pauses
  it), at 10 and 30 Hz; latency from frame capture to the measurement's arrival in the runtime
  (the runtime's ``external.vision.latency_s`` of each new measurement); the gateway's CPU per
  processed frame (on − off); the whole server's idle CPU with vision off and on (``make run``'s
  profile, no client).

Figures, never assertions: this is a shared 2-core VM; compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import threading
import time
import tomllib
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import REPO, pct, summary_ms  # noqa: E402

from tests.server.gateway.vision.scene import ground_truth_free, sweep_poses, truth, truth_clear  # noqa: E402

from robotics.angles import wrap_pi  # noqa: E402
from server.gateway.vision import (  # noqa: E402
    VisionPipeline, VisionWorker, camera_from_config, markers_from_world, parse_vision_config,
)
from sim.camera import CameraIntrinsics, render  # noqa: E402
from sim.world import World  # noqa: E402

PROFILE = tomllib.loads((REPO / "config" / "rover-sim.toml").read_text())
WORLD_CFG = PROFILE["sim"]["world"]
WORLD = World.from_config(WORLD_CFG)


def make_pipeline(**vision) -> VisionPipeline:
    cfg = parse_vision_config({"enabled": True, **vision})
    return VisionPipeline(cfg, camera_from_config(cfg, PROFILE["video"]), markers_from_world(WORLD_CFG, cfg.dictionary))


def jpeg(img: np.ndarray, quality: int = 70) -> bytes:
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()


# ---------------------------------------------------------------------- accuracy
def bench_accuracy(step: float) -> None:
    poses = sweep_poses(step)
    print(f"detection against ground truth: {len(poses)} poses over the default world, 640×480, JPEG q70")
    for sigma in (0.0, 4.0):
        pipe = make_pipeline()
        worker = VisionWorker(pipe, 10.0)
        k = CameraIntrinsics(640, 480, math.radians(70.0), noise_sigma=sigma)
        rng = np.random.default_rng(14)
        rows, fixes, false_ids = [], {1: [], 2: [], 3: []}, 0
        for pose in poses:
            r = worker.run_once(jpeg(render(WORLD, pose, k, 0.0, 0, rng)), time.time())
            for m in r.markers:
                if not m.known:
                    false_ids += 1
                    continue
                tr, tb = truth(pose, WORLD.marker(m.id))
                px = cv2.arcLength(m.corners.astype(np.float32), True) / 4.0
                rows.append((tr, m.range_m - tr, math.degrees(wrap_pi(m.bearing_rad - tb)), px))
            if r.fix is not None:
                err = math.hypot(r.fix.x - pose["x"], r.fix.y - pose["y"])
                fixes[min(len(r.fix.used), 3)].append((err, abs(math.degrees(wrap_pi(r.fix.yaw - pose["yaw"]))),
                                                       r.fix.position_sigma_m))
        a = np.array(rows)
        print(f"  noise σ {sigma:g} grey levels: {len(a)} markers decoded, {false_ids} ids not in the world")
        for lo, hi in ((0.0, 2.0), (2.0, 3.5), (3.5, 10.0)):
            b = a[(a[:, 0] >= lo) & (a[:, 0] < hi)]
            if len(b):
                rel = 100 * b[:, 1] / b[:, 0]
                print(f"    range {lo:g}-{hi:g} m (n={len(b)}, side {b[:, 3].min():.0f}-{b[:, 3].max():.0f} px): "
                      f"range error mean {100 * b[:, 1].mean():+.1f} cm ({rel.mean():+.2f} %), rms "
                      f"{100 * np.sqrt((b[:, 1] ** 2).mean()):.1f} cm, max {100 * np.abs(b[:, 1]).max():.1f} cm; "
                      f"bearing error rms {np.sqrt((b[:, 2] ** 2).mean()):.3f}°, max {np.abs(b[:, 2]).max():.3f}°")
        for n, f in fixes.items():
            if f:
                e = np.array(f)
                label = f"{n}+ markers" if n == 3 else f"{n} marker{'s' if n > 1 else ''}"
                print(f"    pose fix from {label} (n={len(e)}): position error rms {100 * np.sqrt((e[:, 0] ** 2).mean()):.1f}"
                      f" cm, max {100 * e[:, 0].max():.1f} cm (claimed σ median {100 * np.median(e[:, 2]):.1f} cm); "
                      f"yaw error rms {np.sqrt((e[:, 1] ** 2).mean()):.2f}°, max {e[:, 1].max():.2f}°")


def bench_floor(step: float) -> None:
    pipe = make_pipeline()
    worker = VisionWorker(pipe, 10.0)
    k = CameraIntrinsics(640, 480, math.radians(70.0))
    worker.run_once(jpeg(render(WORLD, {"x": 3.0, "y": 2.0, "yaw": 0.0}, k, 0.0, 0)), time.time())
    band = pipe.floor.band(pipe.camera, (640, 480))
    errs, clear_err = [], []
    for pose in sweep_poses(step):
        r = worker.run_once(jpeg(render(WORLD, pose, k, 0.0, 0)), time.time())
        free = ground_truth_free(pose, band, WORLD)
        errs.append(r.floor.free_fraction - free.mean())
        clear_err.append(r.floor.clear_m - truth_clear(band, free, 0.6, 1.5))
    e, c = np.abs(errs), np.abs(clear_err)
    print(f"floor cue against geometry ({len(e)} poses, band 0.6-1.5 m × ±0.25 m): free-fraction error mean "
          f"{np.mean(errs):+.3f}, p50 {pct(e, 50):.3f}, p95 {pct(e, 95):.3f}, max {e.max():.3f}; clear_m error "
          f"p50 {100 * pct(c, 50):.0f} cm, p95 {100 * pct(c, 95):.0f} cm, max {100 * c.max():.0f} cm")


# ---------------------------------------------------------------------- cost
def bench_cost(n: int) -> None:
    pipe = make_pipeline()
    k = CameraIntrinsics(640, 480, math.radians(70.0))
    scenes = {"1 marker": {"x": 3.0, "y": 2.0, "yaw": 0.0}, "3 markers": {"x": 1.0, "y": 2.5, "yaw": -0.3},
              "no marker": {"x": 2.5, "y": 1.5, "yaw": -math.pi / 2}}
    print(f"CPU per 640×480 frame (process CPU time: OpenCV's own worker threads included; mean of {n}):")
    for name, pose in scenes.items():
        data = jpeg(render(WORLD, pose, k, 0.0, 0))
        buf = np.frombuffer(data, np.uint8)
        gray = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
        small = cv2.imdecode(buf, cv2.IMREAD_REDUCED_COLOR_4)
        markers, _ = pipe.detector.detect(gray, pipe.camera)

        def cpu(fn) -> float:
            fn()
            t0 = time.process_time()
            for _ in range(n):
                fn()
            return (time.process_time() - t0) / n * 1e3

        stages = {
            "decode grey": cpu(lambda: cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)),
            "decode ¼ colour": cpu(lambda: cv2.imdecode(buf, cv2.IMREAD_REDUCED_COLOR_4)),
            "markers+poses": cpu(lambda: pipe.detector.detect(gray, pipe.camera)),
            "fix": cpu(lambda: pipe._fix(markers)),
            "floor": cpu(lambda: pipe.floor.measure(small, pipe.camera, (640, 480))),
        }
        worker = VisionWorker(pipe, 10.0)
        whole = []
        threads = cv2.getNumThreads()
        for n_threads in (threads, 1):
            cv2.setNumThreads(n_threads)
            total = cpu(lambda: worker.run_once(data, time.time()))
            t0 = time.perf_counter()
            for _ in range(n):
                worker.run_once(data, time.time())
            wall = (time.perf_counter() - t0) / n * 1e3
            whole.append(f"{total:.2f} ms CPU / {wall:.2f} ms wall with {n_threads} OpenCV thread(s) "
                         f"(at 30 fps: {total * 3:.0f} % of a core)")
        cv2.setNumThreads(threads)
        print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()) + "; whole frame " + "; ".join(whole))


# ---------------------------------------------------------------------- worker: rate, latency, event loop
def drive_frames(n: int) -> list[bytes]:
    """A short drive east from the start pose, turning a little: the frames a camera would give."""
    k = CameraIntrinsics(640, 480, math.radians(70.0))
    return [jpeg(render(WORLD, {"x": 2.0 + 0.02 * i, "y": 2.0, "yaw": 0.3 * math.sin(i / 15)}, k, 0.0, i))
            for i in range(n)]


async def loop_lag(seconds: float) -> list[float]:
    """Lateness of a 1 ms periodic task on this event loop (the gateway's health)."""
    lags = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        t = loop.time()
        await asyncio.sleep(0.001)
        lags.append(loop.time() - t - 0.001)
    return lags


def bench_worker(seconds: float) -> None:
    frames = drive_frames(60)
    print(f"worker fed by a 30 fps camera thread, {seconds:.0f} s each (latency: capture stamp → result):")
    base = asyncio.run(loop_lag(seconds))
    print(f"  event loop alone: 1 ms sleep late by p50 {1e3 * pct(base, 50):.3f} / p99 {1e3 * pct(base, 99):.3f}"
          f" / max {1e3 * max(base):.3f} ms")
    for rate in (10.0, 30.0):
        latencies = []
        worker = VisionWorker(make_pipeline(), rate, lambda r: latencies.append(r.latency_s))
        stop = threading.Event()

        def camera() -> None:
            i, period = 0, 1 / 30
            nxt = time.monotonic()
            while not stop.is_set():
                worker._put(frames[i % len(frames)], time.time(), i)
                i += 1
                nxt += period
                stop.wait(max(0.0, nxt - time.monotonic()))

        cam = threading.Thread(target=camera, daemon=True)
        worker.start()
        cam.start()
        t_cpu = time.process_time()
        lags = asyncio.run(loop_lag(seconds))
        cpu = (time.process_time() - t_cpu) / seconds
        s = worker.stats(window_s=seconds)
        stop.set()
        cam.join(2)
        worker.stop()
        print(f"  rate_hz {rate:g}: held {s['rate_hz_held']:.1f} Hz of {min(rate, s['camera_fps']):.1f} asked "
              f"(keeping_up {s['keeping_up']}), busy {100 * s['busy_fraction']:.0f} % of the time, process CPU "
              f"{100 * cpu:.0f} % of a core; latency p50 {1e3 * pct(latencies, 50):.1f} / p99 "
              f"{1e3 * pct(latencies, 99):.1f} / max {1e3 * max(latencies):.1f} ms; event loop 1 ms sleep late by "
              f"p50 {1e3 * pct(lags, 50):.3f} / p99 {1e3 * pct(lags, 99):.3f} / max {1e3 * max(lags):.3f} ms")


# ---------------------------------------------------------------------- on the real server
def _segment(srv, seconds: float, sample: bool) -> dict:
    """Loop deadlines, gateway CPU and (``sample``) capture → runtime latencies over ``seconds``."""
    from bench_core import children, loop_figures, runtime_call

    from common import cpu_seconds

    gw = children(srv)["gateway"]
    before = runtime_call(srv, "loop_stats")
    cpu0, t0 = cpu_seconds(gw), time.monotonic()
    st0 = (srv.get("/api/vision")[1].get("stats") or {}).get("processed", 0)
    latencies, last = [], None
    while time.monotonic() - t0 < seconds:
        if sample:
            ext = (srv.state().get("external") or {}).get("vision") or {}
            if ext.get("sample_t") is not None and ext["sample_t"] != last:
                last = ext["sample_t"]
                latencies.append(ext["latency_s"])
        time.sleep(0.03)
    wall = time.monotonic() - t0
    cpu = (cpu_seconds(gw) - cpu0) / wall
    vision = srv.get("/api/vision")[1]
    processed = (vision.get("stats") or {}).get("processed", 0) - st0
    return {"loop": loop_figures(srv, before), "gateway_cpu": cpu, "processed": processed, "wall": wall,
            "latencies": latencies, "vision": vision}


def bench_server(seconds: float) -> None:
    """The pipeline in the real server: 1 kHz loop, video on with one viewer acking every frame, the
    pipeline switched on and off in the same server (the debug route pauses it) and at two rates."""
    import multiprocessing as mp

    from common import start_server, video_viewer_proc

    for rate in (10.0, 30.0):
        srv = start_server({"loop": {"rate_hz": 1000}, "video": {"enabled": True},
                            "vision": {"enabled": True, "rate_hz": rate}})
        q: mp.Queue = mp.Queue()
        viewer = mp.Process(target=video_viewer_proc, args=(srv.url, 4 * seconds + 10, q), daemon=True)
        try:
            viewer.start()
            wait_until_fresh(srv)
            time.sleep(2.0)
            print(f"real server, 1 kHz loop, video 640×480 30 fps with one viewer, pipeline at {rate:g} Hz; "
                  f"{seconds:.0f} s per segment, alternating (same server):")
            rows = []
            for label, paused in (("off", True), ("on", False), ("off", True), ("on", False)):
                srv.post("/api/debug/vision", {"paused": paused})
                time.sleep(1.0)
                f = _segment(srv, seconds, sample=not paused)
                rows.append((label, f))
                lf = f["loop"]
                extra = ""
                if not paused:
                    st = f["vision"]["stats"]
                    per_frame = 1e3 * f["gateway_cpu"] * f["wall"] / max(1, f["processed"])
                    extra = (f"; vision held {st['rate_hz_held']} Hz (keeping_up {st['keeping_up']}), "
                             f"capture → runtime {summary_ms(f['latencies'])}, gateway CPU per processed frame "
                             f"{per_frame:.1f} ms (all of it, video included)")
                print(f"  pipeline {label}: deadlines met {lf['met']:.3f} % ({lf['missed']} missed of "
                      f"{lf['ticks'] + lf['missed']}), lateness p50 ≤ {lf['p50']:g} µs, p99 ≤ {lf['p99']:g} µs, "
                      f"p99.9 ≤ {lf['p999']:g} µs; gateway CPU {100 * f['gateway_cpu']:.0f} % of a core{extra}")
            off = [f["gateway_cpu"] for label, f in rows if label == "off"]
            on = [f for label, f in rows if label == "on"]
            extra_cpu = sum(f["gateway_cpu"] for f in on) / len(on) - sum(off) / len(off)
            frames = sum(f["processed"] for f in on) / sum(f["wall"] for f in on)
            print(f"  the pipeline's own cost: +{100 * extra_cpu:.0f} % of a core for {frames:.1f} frames/s = "
                  f"{1e3 * extra_cpu / max(frames, 1e-9):.1f} ms CPU per frame")
        finally:
            viewer.kill()
            srv.stop()


def wait_until_fresh(srv, timeout_s: float = 30.0) -> None:
    from common import wait_until

    wait_until(lambda: ((srv.state().get("external") or {}).get("vision") or {}).get("fresh"), timeout_s,
               "vision measurements in the runtime")


def bench_idle(seconds: float) -> None:
    """``make run``'s profile with no client: the whole server's CPU with vision off (the default) and on
    (the camera then runs for the pipeline alone)."""
    import tempfile

    import tomli_w
    from bench_core import children, descendants

    from common import cpu_seconds
    from tests.conftest import ServerProc, deep_merge

    base = tomllib.loads((REPO / "config" / "rover-sim.toml").read_text())
    print(f"idle CPU of the whole server, make run's profile (100 Hz, video on), no client, {seconds:.0f} s:")
    for label, vision in (("vision off (default)", {}), ("vision on, 10 Hz", {"enabled": True}),
                          ("vision on, 5 Hz", {"enabled": True, "rate_hz": 5.0})):
        cfg = deep_merge(base, {"server": {"port": 0}, "vision": vision} if vision else {"server": {"port": 0}})
        path = Path(tempfile.mkdtemp(prefix="teleop-bench-")) / "idle.toml"
        path.write_text(tomli_w.dumps(cfg))
        srv = ServerProc(path).start()
        try:
            if vision:
                wait_until_fresh(srv)
            time.sleep(3.0)
            pids = {name: descendants(pid) for name, pid in children(srv).items()}
            pids["launcher"] = [srv.proc.pid]
            cpu0 = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
            t0 = time.monotonic()
            time.sleep(seconds)
            wall = time.monotonic() - t0
            cpu = {k: (sum(cpu_seconds(p) for p in v) - cpu0[k]) / wall for k, v in pids.items()}
            print(f"  {label}: {100 * sum(cpu.values()):.1f} % of a core:"
                  + "".join(f" {k} {100 * v:.1f} %" for k, v in cpu.items()))
        finally:
            srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a coarser sweep and shorter runs")
    ap.add_argument("--no-server", action="store_true", help="skip the control-loop run on the real server")
    args = ap.parse_args()
    step = 0.9 if args.quick else 0.6
    seconds = 3.0 if args.quick else 8.0
    bench_accuracy(step)
    bench_floor(step)
    bench_cost(20 if args.quick else 100)
    bench_worker(seconds)
    if not args.no_server:
        bench_server(5.0 if args.quick else 15.0)
        bench_idle(5.0 if args.quick else 15.0)


if __name__ == "__main__":
    main()
