"""Recorder and replay figures: caller cost, writer throughput and CPU, bytes per minute, 1 h file load,
and the recorder wired into the real server.

Prints figures, asserts nothing. The snapshot is shaped like the gateway's (about
1.7 KB of JSON, channel values with full float precision and sensor noise, so it
compresses like the real thing, not like a test pattern); video frames are random
bytes of a JPEG's size (65 KB, incompressible like JPEG). The "peer" rows read the
same file with the ``mcap`` library's own readers: linearly (what a file without an
index costs) and through its index.

Sections 5-7 use the real gateway: the per-snapshot cost of every wired hook on its event
loop (parse once, health, recorder), then ``python -m server`` with the recorder switched on
and off in alternating phases of one run (so both sides share the machine's load), with and
without camera frames recorded: loop deadlines and lateness from the runtime's own histogram,
telemetry latency at a client, the gateway's CPU, bytes per minute; and ``python -m server
replay`` of the 1 h file: from the command to the first snapshot on the websocket.

    .venv/bin/python bench/bench_recording.py [--quick] [--only 5,6,7]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from mcap.reader import make_reader  # noqa: E402
from mcap.records import Message  # noqa: E402
from mcap.stream_reader import StreamReader  # noqa: E402

from server.gateway.recording import Recorder, Recording, RecordingConfig, list_recordings, recent_events  # noqa: E402
from server.gateway.recording.replay import FakeClock, ReplaySource  # noqa: E402
from server.gateway.reports import run_report  # noqa: E402
from common import read_telemetry, start_server, wait_until  # noqa: E402

QUICK = "--quick" in sys.argv
RNG = np.random.default_rng(7)
CHANNELS = [f"ch{k:02d}_{u}" for k, u in enumerate(["rad_s", "m", "v", "a", "m_s2", "deg"] * 6)][:34]
ROBOT = {"name": "bench rover", "profile": "rover", "channels": [{"name": c} for c in CHANNELS],
         "geometry": {"wheel_radius_m": 0.05, "track_m": 0.3}}
# distinct frames (JPEG data does not repeat; one frame repeated would compress to nothing inside a chunk)
FRAMES = [RNG.bytes(65_000) for _ in range(32)]
FRAME = FRAMES[0]


def snapshot(i: int, t: float) -> bytes:
    values = {c: float(v) for c, v in zip(CHANNELS, RNG.normal(1.0, 0.3, len(CHANNELS)))}
    return orjson.dumps({
        "seq": i, "t": t, "state": "running", "cause": None,
        "setpoint": {"linear": 0.3, "angular": 0.1}, "command": {"linear": 0.2999, "angular": 0.1},
        "values": values, "truth": {"x": float(RNG.normal()), "y": float(RNG.normal()), "yaw": float(RNG.normal())},
        "behavior": None, "link": {"age_s": 0.0123, "timeout_s": 0.5},
        "loop": {"rate_hz": 100.0, "measured_hz": 99.98, "ticks": i * 2, "overruns": 0, "missed": 0,
                 "jitter_p50_us": 3.1, "jitter_p99_us": 81.4, "jitter_max_us": 452.0, "exec_p99_us": 123.4,
                 "realtime": "SCHED_FIFO 50"}})


def event(k: int, t: float) -> dict:
    return {"t": 1000.0 + k, "wall_t": t, "trigger": "link_loss", "message": "no command for 0.5 s",
            "values": {"age_s": 0.51}, "state_before": "running", "state_after": "estop", "kind": "safety"}


def wait_written(rec: Recorder, n: int, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while rec.status()["total_messages"] < n:
        if time.monotonic() > deadline or rec.status()["state"] == "error":
            raise RuntimeError(f"writer stuck: {rec.status()}")
        time.sleep(0.005)


def row(label: str, value: str) -> None:
    print(f"  {label:<58} {value}")


def bench_caller_cost(tmp: Path) -> None:
    print("\n1. Cost of one record_* call on the caller (the event loop): median / p99 of single calls, writer running")
    data = [snapshot(i, 1.8e9 + i * 0.02) for i in range(2000)]
    ev = event(1, 1.8e9)
    rec = Recorder(RecordingConfig(dir=str(tmp / "caller"), queue_size=1_000_000, queue_bytes=2**30), robot=ROBOT)
    rec.start()
    rec.start_recording("caller")
    clock = time.perf_counter
    calls = {"record_snapshot (1.5 KB of JSON bytes)": lambda i: rec.record_snapshot(data[i % 2000], 1.8e9 + i),
             "record_event (serialised in the call, orjson)": lambda i: rec.record_event(ev),
             "record_command (serialised in the call)": lambda i: rec.record_command(
                 "speed", {"linear": 0.3, "angular": 0.0}, accepted=True, principal="alice", t=1.8e9 + i)}
    for label, fn in calls.items():
        times = []
        written = rec.status()["total_messages"]
        for i in range(3000):
            t0 = clock()
            fn(i)
            times.append(clock() - t0)
            if i % 500 == 499:  # let the writer drain, as it does between two snapshots at 50 Hz
                written += 500 * (2 if "event" in label else 1)
                rec._wake.set()
                wait_written(rec, written)
        us = np.asarray(times) * 1e6
        row(label, f"{np.median(us):.2f} / {np.percentile(us, 99):.2f} µs")
    rec.stop_recording()
    rec.close()
    idle = Recorder(RecordingConfig(dir=str(tmp / "idle")), robot=ROBOT)
    t0 = clock()
    for i in range(20000):
        idle.record_snapshot(data[i % 2000], 1.0)
    row("record_snapshot while not recording", f"{(clock() - t0) / 20000 * 1e6:.2f} µs")


def bench_throughput(tmp: Path) -> None:
    print("\n2. Writer throughput, flat out (zstd chunks, flush every 1 s)")
    n = 20_000 if QUICK else 60_000
    data = [snapshot(i, 0.0) for i in range(2000)]
    for label, frames_per_snapshot in (("snapshots only", 0.0), ("+ 30 fps video at 50 Hz snapshots", 0.6)):
        rec = Recorder(RecordingConfig(dir=str(tmp / f"tp{frames_per_snapshot}"), queue_size=1_000_000,
                                       queue_bytes=2**31, video_frames=True, video_fps=120.0), robot=ROBOT)
        rec.start()
        rec.start_recording("tp")
        count = 0
        frame_acc = 0.0
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(n if not frames_per_snapshot else n // 4):
            t = 1.8e9 + i * 0.02
            rec.record_snapshot(data[i % 2000], t)
            count += 1
            frame_acc += frames_per_snapshot
            if frame_acc >= 1.0:
                frame_acc -= 1.0
                if rec.record_frame(FRAMES[i % 32], t):
                    count += 1
        wait_written(rec, count)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        size = rec.status()["total_bytes"]  # all parts: the video run rotates at 256 MiB
        rec.close()
        snaps = n if not frames_per_snapshot else n // 4
        row(f"{label}: snapshots/s", f"{snaps / wall:,.0f} ({count} msgs in {wall:.2f} s, "
            f"CPU {cpu / wall * 100:.0f} % of a core, {size / wall / 1e6:.1f} MB/s to disk)")


def bench_realtime(tmp: Path) -> dict:
    print("\n3. A default run in real time (50 Hz snapshots, an event every 10 s): CPU and bytes per minute")
    seconds = 5.0 if QUICK else 12.0
    out = {}
    for label, video in (("not recording", None), ("recording", False), ("recording + video at 5 fps", True)):
        rec = Recorder(RecordingConfig(dir=str(tmp / f"rt{label[:5]}{video}"), video_frames=bool(video),
                                       video_fps=5.0), robot=ROBOT)
        rec.start()
        if video is not None:
            rec.start_recording("rt")
        cpu0, t0 = time.process_time(), time.monotonic()
        i = 0
        next_t = t0
        while time.monotonic() - t0 < seconds:
            t = time.time()
            rec.record_snapshot(snapshot(i, t), t)
            if i % 500 == 250:
                rec.record_event(event(i, t))
            if video and i % 2 == 0:
                rec.record_frame(FRAMES[i % 32], t)  # offered at 25 fps, kept at 5 fps
            i += 1
            next_t += 0.02
            time.sleep(max(0.0, next_t - time.monotonic()))
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        rec.stop_recording()
        rec.close()
        files = list((tmp / f"rt{label[:5]}{video}").glob("*.mcap"))
        size = sum(f.stat().st_size for f in files)
        out[label] = (cpu / wall, size / wall * 60)
        extra = f", {size / wall * 60 / 1e6:.2f} MB per minute" if files else ""
        row(label, f"process CPU {cpu / wall * 100:.1f} % of a core (incl. building the snapshots){extra}")
    base = out["not recording"][0]
    row("recorder's own CPU (recording − not recording)", f"{(out['recording'][0] - base) * 100:.2f} % of a core")
    row("  with video at 5 fps", f"{(out['recording + video at 5 fps'][0] - base) * 100:.2f} % of a core")
    return out


def bench_one_hour(tmp: Path) -> Path:
    hours = 0.25 if QUICK else 1.0
    n = int(hours * 3600 * 50)
    print(f"\n4. A {hours:g} h recording ({n:,} snapshots at 50 Hz, an event every 10 s): load and read times")
    d = tmp / "hour"
    rec = Recorder(RecordingConfig(dir=str(d), queue_size=1_000_000, queue_bytes=2**31), robot=ROBOT)
    rec.start()
    rec.start_recording("hour")
    t0 = 1.8e9
    data = [snapshot(i, 0.0) for i in range(3000)]
    written = 0
    w0 = time.perf_counter()
    for i in range(n):
        rec.record_snapshot(data[i % 3000], t0 + i * 0.02)
        written += 1
        if i % 500 == 250:
            rec.record_event(event(i, t0 + i * 0.02))
            written += 2
        if i % 20000 == 0 and written > 50_000:  # keep the backlog (memory) bounded
            wait_written(rec, written - 50_000)
    wait_written(rec, written)
    write_s = time.perf_counter() - w0
    rec.close()
    (path,) = d.glob("*.mcap")
    size = path.stat().st_size
    row("writing it (flat out)", f"{write_s:.1f} s, file {size / 1e6:.1f} MB ({size / n:.0f} B per snapshot)")

    def timed(label: str, fn, repeat: int = 3):
        best = float("inf")
        result = None
        for _ in range(repeat):
            s = time.perf_counter()
            result = fn()
            best = min(best, time.perf_counter() - s)
        row(label, f"{best * 1e3:,.1f} ms")
        return result

    timed("list_recordings (summary only, cold cache)", lambda: (list_recordings.__globals__["_INFO_CACHE"].clear(),
                                                               list_recordings(d))[1])

    def replay_open_seek():
        src = ReplaySource(path, clock=FakeClock())
        src.seek(t0 + hours * 1800)
        msgs = src.due()
        src.close()
        return msgs

    msgs = timed("replay: open + seek to the middle + first due()", replay_open_seek)
    assert msgs and msgs[0].topic == "/teleop/telemetry"

    def replay_minute():
        clock = FakeClock()
        src = ReplaySource(path, clock=clock, max_batch=10**6)
        src.seek(t0 + hours * 1800)
        src.play()
        clock.advance(60.0)
        k = len(src.due())
        src.close()
        return k

    k = timed("replay: one minute of playback from the middle (due() calls)", replay_minute)
    row("  messages in that minute", f"{k}")
    timed("recent_events(100) (event topic only, newest first)", lambda: recent_events(d, 100))

    def csv_minute():
        import io
        out = io.StringIO()
        with Recording(path) as r:
            return r.export_csv(out, CHANNELS[:4], t0 + 600, t0 + 660)
    timed("CSV export, 4 channels, 1 minute", csv_minute)
    timed("run report of 3 channels over the whole file (decodes every snapshot)",
          lambda: run_report(path, channels=CHANNELS[:3], pairs=[], plots=True), repeat=1)

    def peer_indexed_all():
        with open(path, "rb") as f:
            return sum(1 for _ in make_reader(f).iter_messages())
    timed("peer: mcap make_reader().iter_messages() over everything", peer_indexed_all, repeat=1)

    def peer_linear_all():
        with open(path, "rb") as f:
            return sum(1 for r in StreamReader(f).records if isinstance(r, Message))
    timed("peer: mcap StreamReader linear pass (what a file without index costs)", peer_linear_all, repeat=1)
    return path


# ---------------------------------------------------------------------- 5. the wired hooks, in process
def bench_hooks(tmp: Path) -> None:
    print("\n5. Per-snapshot cost of the wired hooks on the gateway's event loop (a real sim snapshot):"
          " median / p99")
    import asyncio

    from server.config import GATEWAY_TABLES, load_config, parse_overrides
    from server.gateway.app import create_app
    from server.gateway.hooks import HOOKS, Hooks
    from server.gateway.recording.setup import RECORDER
    from server.runtime_api.client import RuntimeClient

    srv = start_server()
    try:
        snap = srv.get("/api/state")[1]
        robot = srv.get("/api/robot")[1]
    finally:
        srv.stop()
    data0 = orjson.dumps(snap)
    profile = load_config(REPO / "config/rover-sim.toml", tables=GATEWAY_TABLES,
                          overrides=parse_overrides([f'recording.dir="{tmp / "hooks"}"']))

    async def run() -> None:
        rt = RuntimeClient("/nonexistent")
        rt.description = robot
        app = create_app(profile, rt)
        hooks = app[HOOKS].on_snapshot
        recorder = app[RECORDER]
        await asyncio.to_thread(recorder.start)
        rt.connected, rt.connects = True, 1
        clock = time.perf_counter
        # a new bytes object per snapshot, as from the socket (bytes(b) would return b itself)
        copies = [data0[:-1] + data0[-1:] for _ in range(4000)]

        def measure(fn) -> np.ndarray:
            out = []
            for k in range(4000):
                data = copies[k]
                rt.latest = data
                t0 = clock()
                fn(data)
                out.append(clock() - t0)
                if k % 500 == 499:
                    recorder._wake.set()
            return np.asarray(out) * 1e6

        parse = measure(lambda d: orjson.loads(d))
        off = measure(lambda d: Hooks.call(hooks, d))
        recorder.start_recording("hooks")
        on = measure(lambda d: Hooks.call(hooks, d))
        for label, us in (("orjson.loads of the snapshot alone", parse),
                          ("all hooks, not recording (parse once + health + recorder no-op)", off),
                          ("all hooks, recording (parse once + health + record_snapshot)", on)):
            row(label, f"{np.median(us):.1f} / {np.percentile(us, 99):.1f} µs")
        row("at 50 Hz, recording", f"{np.mean(on) * 50 / 1e4:.3f} % of the event loop's time")
        await recorder.aclose()

    asyncio.run(run())


# ---------------------------------------------------------------------- 6. the real server, recorder on vs off
def _latency_client(url: str, seconds: float, out) -> None:
    """One telemetry client: (receive wall time, receive − the snapshot's own t) per snapshot."""
    import asyncio

    import aiohttp

    async def main() -> list[tuple[float, float]]:
        got: list[tuple[float, float]] = []
        stop_t = time.time() + seconds
        async with aiohttp.ClientSession() as session, session.ws_connect(url + "/ws/telemetry") as ws:
            await read_telemetry(ws, stop_t, lambda now, latency: got.append((now, latency)))
        return got

    out.put(asyncio.run(main()))


def bench_server(tmp: Path) -> None:
    import multiprocessing as mp

    from bench_core import children, loop_figures
    from common import cpu_seconds, video_viewer_proc
    from tests.server.test_stop_paths import Heartbeat

    phase_s = 6.0 if QUICK else 15.0
    rounds = 2 if QUICK else 3
    print(f"\n6. The real server (100 Hz loop, 50 Hz telemetry, rover driving a circle, one telemetry client): "
          f"recorder on vs off in alternating {phase_s:g} s phases, {rounds} of each")
    for video in (False, True):
        rec_dir = tmp / f"server-{video}"
        srv = start_server({"recording": {"dir": str(rec_dir), "video_frames": video, "video_fps": 5.0},
                            "video": {"enabled": video}})
        total = rounds * 2 * phase_s + 15
        q: mp.Queue = mp.Queue()
        client = mp.Process(target=_latency_client, args=(srv.url, total, q), daemon=True)
        client.start()
        viewer = None
        if video:  # the camera runs in both phases: the difference is the recording of its frames
            vq: mp.Queue = mp.Queue()
            viewer = mp.Process(target=video_viewer_proc, args=(srv.url, total, vq), daemon=True)
            viewer.start()
        gateway = children(srv)["gateway"]
        phases: dict[str, list[dict]] = {"off": [], "on": []}
        try:
            with Heartbeat(srv, 0.1):
                srv.post("/api/start")
                srv.post("/api/speed", {"linear": 0.2, "angular": 0.3})
                wait_until(lambda: srv.get("/api/telemetry")[1]["clients"] >= 1, 20, "client connected")
                time.sleep(2.0)  # let the first-second transients pass (bench, not a test)
                for _ in range(rounds):
                    for mode in ("off", "on"):
                        if mode == "on":
                            srv.post("/api/recordings/start", {"name": "bench"})
                        before = loop_figures(srv)["raw"]
                        b0 = srv.get("/api/recordings/status")[1]["total_bytes"]
                        cpu0, t0 = cpu_seconds(gateway), time.time()
                        time.sleep(phase_s)
                        t1 = time.time()
                        cpu = (cpu_seconds(gateway) - cpu0) / (t1 - t0)
                        b1 = srv.get("/api/recordings/status")[1]["total_bytes"]
                        lf = loop_figures(srv, before)
                        phases[mode].append({"t0": t0, "t1": t1, "cpu": cpu, "loop": lf, "bytes": b1 - b0})
                        if mode == "on":
                            srv.post("/api/recordings/stop")
            lat = q.get(timeout=total + 60)
        finally:
            srv.stop()
            client.join(10)
            if viewer is not None:
                viewer.join(10)
        label = "recording snapshots + camera frames at 5 fps (camera 640x480@30 watched by one viewer in both)" \
            if video else "recording snapshots, events, commands"
        print(f"  {label}:")
        for mode in ("off", "on"):
            ps = phases[mode]
            ticks = sum(p["loop"]["ticks"] for p in ps)
            missed = sum(p["loop"]["missed"] for p in ps)
            p99 = max(p["loop"]["p99"] for p in ps)
            p999 = max(p["loop"]["p999"] for p in ps)
            l_ms = [x[1] * 1e3 for x in lat if any(p["t0"] + 0.5 <= x[0] <= p["t1"] for p in ps)]
            cpu = np.mean([p["cpu"] for p in ps]) * 100
            extra = ""
            if mode == "on":
                mb_min = sum(p["bytes"] for p in ps) / (len(ps) * phase_s) * 60 / 1e6
                extra = f"; {mb_min:.2f} MB per minute"
            row(f"  recorder {mode}", f"deadlines missed {missed} of {ticks + missed}; lateness p99 ≤ {p99:g} µs, "
                f"p99.9 ≤ {p999:g} µs; telemetry latency p50 {np.percentile(l_ms, 50):.2f} / "
                f"p99 {np.percentile(l_ms, 99):.2f} ms; gateway CPU {cpu:.1f} % of a core{extra}")


# ---------------------------------------------------------------------- 7. replaying the 1 h file
def bench_replay_server(path: Path, tmp: Path) -> None:
    import subprocess

    from websockets.sync.client import connect

    print(f"\n7. python -m server replay of the {path.stat().st_size / 1e6:.0f} MB file: command → first snapshot "
          "on the websocket (process start, imports, open, serve)")
    times = []
    for _ in range(1 if QUICK else 3):
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "server", "replay", str(path), "--port", "0"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            port = None
            for line in proc.stdout:
                if "teleop listening on http://" in line:
                    port = int(line.strip().rsplit(":", 1)[1])
                    break
            listening = time.perf_counter() - t0
            with connect(f"ws://127.0.0.1:{port}/ws/telemetry") as ws:
                while True:
                    msg = orjson.loads(ws.recv(30))
                    if msg["type"] == "telemetry":
                        break
            times.append((listening, time.perf_counter() - t0))
        finally:
            proc.terminate()
            proc.wait(10)
    best = min(times, key=lambda x: x[1])
    row("listening after / first snapshot after (best)", f"{best[0] * 1e3:,.0f} ms / {best[1] * 1e3:,.0f} ms")
    import subprocess as sp
    t0 = time.perf_counter()
    sp.run([sys.executable, "-c", "import server.gateway.replay, server.gateway.app"], cwd=REPO, check=True)
    row("  of which the interpreter and imports alone", f"{(time.perf_counter() - t0) * 1e3:,.0f} ms")


def main() -> None:
    only = None
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
    tmp = Path(tempfile.mkdtemp(prefix="teleop-bench-rec-"))

    def want(k: str) -> bool:
        return only is None or k in only

    try:
        size = len(snapshot(1, 1.8e9))
        print(f"snapshot size {size} B; video frame {len(FRAME)} B; {os.cpu_count()} CPUs; quick={QUICK}")
        if want("1"):
            bench_caller_cost(tmp)
        if want("2"):
            bench_throughput(tmp)
        if want("3"):
            bench_realtime(tmp)
        if want("4") or want("7"):
            path = bench_one_hour(tmp)
            if want("7"):
                bench_replay_server(path, tmp)
        if want("5"):
            bench_hooks(tmp)
        if want("6"):
            bench_server(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
