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
  pipeline on and off in the same run (needs the pipeline wired into the gateway: issue 14 phase 2).

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

from common import REPO, pct  # noqa: E402

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


# ---------------------------------------------------------------------- control loop, pipeline on and off
def bench_deadlines(seconds: float) -> None:
    try:
        from bench_core import loop_figures, runtime_call  # noqa: F401
        from server.config import TABLES
    except ImportError as err:  # pragma: no cover - a bench, not a test
        print(f"control-loop deadlines: skipped ({err})")
        return
    if "vision" not in TABLES:
        print("control-loop deadlines with the pipeline on/off: not measured yet (the pipeline is not wired into "
              "the gateway: issue 14 phase 2)")
        return
    from common import start_server, video_viewer_proc  # noqa: F401

    import multiprocessing as mp

    print(f"control loop at 1 kHz, video on with one viewer, {seconds:.0f} s per case (same run):")
    for label, vision in (("pipeline off", False), ("pipeline on, 10 Hz", True), ("pipeline off again", False)):
        srv = start_server({"loop": {"rate_hz": 1000}, "video": {"enabled": True},
                            "vision": {"enabled": vision, "rate_hz": 10.0}})
        procs = []
        try:
            q: mp.Queue = mp.Queue()
            v = mp.Process(target=video_viewer_proc, args=(srv.url, seconds + 4, q), daemon=True)
            v.start()
            procs.append(v)
            time.sleep(2.0)
            before = runtime_call(srv, "loop_stats")
            time.sleep(seconds)
            f = loop_figures(srv, before)
            extra = ""
            if vision:
                _, body = srv.get("/api/vision")
                st = (body or {}).get("stats", {})
                extra = (f"; vision held {st.get('rate_hz_held')} Hz, latency p50 {st.get('latency_ms_p50')} ms, "
                         f"keeping_up {st.get('keeping_up')}")
            print(f"  {label}: deadlines met {f['met']:.3f} % ({f['missed']} missed of {f['ticks'] + f['missed']}); "
                  f"lateness p50 ≤ {f['p50']:g} µs, p99 ≤ {f['p99']:g} µs, p99.9 ≤ {f['p999']:g} µs{extra}")
        finally:
            for p in procs:
                p.kill()
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
        bench_deadlines(5.0 if args.quick else 20.0)


if __name__ == "__main__":
    main()
