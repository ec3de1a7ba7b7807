"""Issue 20 §6 over the emulated link (linkemu): the real server in the robot's namespace, logged in, a
dashboard-like operator in the operator's, and the same telemetry figures for the peers of bench_core.py (a
plain aiohttp websocket broadcast, foxglove-sdk's websocket server) on the same link and load, in one run.

Per link, one :class:`linkemu.Link` and, on it, in this order:

1. *after* (the defaults): the server with video on (the sim camera's real-camera-size frames:
   ``config/rover-sim.toml``'s textured floor and sensor noise, 640×480 JPEG q70, 54–57 KB a frame; the mean
   is printed; the rover is put back at its start after every cycle, so each run sees the same scene), one JPEG
   viewer on ``/ws/video`` acking every frame on arrival as ``video/jpeg.js`` does, and
   one operator driving in cycles (``start``, 20 Hz ``speed`` and 10 Hz heartbeats for 5 s, ``stop``) with the
   dashboard's client (``tests/stamped_client.py``: heartbeats from the moment ``start`` is sent, stamped
   commands, the sync exchange answered); then 5 e-stops (each reset), video still running.
2. the aiohttp peer, then the foxglove peer, each in its own process in the robot's namespace on the robot's
   address, broadcasting the project's own snapshot text (one ``{"type":"telemetry",…}`` message the server
   sent in step 1, its ``"t"`` restamped at each send) at the server's telemetry rate, to one client in the
   operator's namespace; the project's video viewer keeps running meanwhile (the same load on the link), and
   on ``4g+download`` the same competing TCP download (robot → operator) runs through every phase.
3. *before* (``--modes before,after``): issue 20's fixes switched off in the same build
   (``telemetry.max_age_s = 0``, ``notsent_lowat_bytes = 0``: snapshots bounded by buffer size only; the
   governor off; the old client: heartbeats only once the start's answer is back, no ``seq``/``sent_t``).

**One clock.** Every age here is a plain difference of stamps: the robot's and the operator's namespaces are
network namespaces of this one machine, so ``time.time()`` in the runtime (snapshot ``t``), in the camera
thread (``capture_t``), in a peer process (its ``"t"``) and in the operator's client read the same
``CLOCK_REALTIME``, and nothing steps it during a run. No offset is estimated and none is needed.

Printed per link and mode:

- telemetry age at the operator (arrival − the snapshot's ``t``) p50 / p99 / max for the project and each
  peer, and the ratios project ÷ peer of p50 and p99. Every telemetry client offers permessage-deflate, as
  Chromium does (``--no-deflate``: none does, as aiohttp's client by default): the project and the aiohttp
  peer accept it, foxglove-sdk's server never does, so its bytes on the wire are the whole snapshot's;
- video: frames per second received, frame age (arrival − ``capture_t``) p50 / p99, Mbit/s of frames, mean
  JPEG size;
- e-stop click → latched (the client's send time → the ``operator_estop`` event's ``wall_t``, stamped by the
  control loop as it latched) p50 / max, and → acknowledged at the operator;
- commands applied late, from the runtime's own records: the bench subscribes to the runtime API's snapshot
  topic (the record the loop makes right after applying a request, published at 50 Hz) and tags every
  ``speed`` by its angular ÷ linear ratio (the governor scales both alike), so the first record showing a
  command or a later one bounds when it was applied; a command acknowledged as applied whose send → that
  record exceeds ``max_command_age_s`` + one publish period (20 ms) is late. The oldest applied command's age
  is printed too. Dropped as stale (the ack says ``"dropped": "stale"``) and reordered are the runtime's counts;
- link-loss stops and their rate per hour of driving; governor (``latency``) stops.

Run as root (network namespaces, tc, nftables, /dev/net/tun); where the emulator cannot run it says why and
exits 0 (``make bench`` goes on)::

    sudo .venv/bin/python bench/bench_link.py [--seconds 60] [--peer-seconds 30] [--links lan,4g,bad,4g+download]
                                              [--modes after | before,after] [--timeout 0.5] [--quick]
    sudo .venv/bin/python bench/bench_link.py --long   # issue 20's 10-minute false-stop runs: 600 s on 4g and bad

``--long`` is ``--seconds 600 --links 4g,bad --modes after`` (peers 30 s each): ~25 min.
Video over WebRTC/H.264 is measured by bench/bench_webrtc.py, not here: this bench carries the JPEG websocket
video, the transport every client has, as the load.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import aiohttp
import orjson

from common import REPO, cancel_and_wait, read_foxglove, read_plain, socket_path, start_peer, watch_video

import tomli_w  # noqa: E402

import linkemu  # noqa: E402
from linkemu import Link  # noqa: E402
from linkemu.traffic import BulkFlow  # noqa: E402
from server.runtime_api.client import RuntimeClient  # noqa: E402
from tests.conftest import DEFAULT_CONFIG, TEST_DEFAULTS, deep_merge  # noqa: E402
from tests.linkemu.plugin import LinkedServer  # noqa: E402
from tests.server.gateway.auth.client import make_users  # noqa: E402
from tests.stamped_client import StampedClient  # noqa: E402

OPERATOR = "otto"
BEFORE = {"telemetry": {"max_age_s": 0.0, "notsent_lowat_bytes": 0}, "safety": {"governor": {"enabled": False}}}
VIDEO = {"video": {"enabled": True}}  # rover-sim.toml's camera: 640x480@30, q70, texture, noise_sigma 3
PUBLISH_PERIOD_S = 0.02  # the runtime publishes its record at 50 Hz (100 Hz loop, every 2nd tick)
RATIO_STEPS = 1000  # speed commands are tagged by angular / linear (speed_tag), k = index mod this
LINEAR_M_S = 0.2
ESTOPS = 5
WORK_LIMIT_S = 1800.0  # one phase at most (--long drives 600 s)
START_POSE = [3.0, 2.0, 0.0]  # the sim's default: the field's centre, facing east (x, y m, yaw rad)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


# ---------------------------------------------------------------------- the runtime's own records
class RuntimeRecords:
    """The runtime API's snapshot and event topics, read on its Unix socket (no network: the robot's side) in a
    thread of its own: ``(t, linear, angular)`` of every record published, and every event as the runtime logged
    it (``wall_t`` stamped by the control loop)."""

    def __init__(self, sock: str) -> None:
        self.sock = sock
        self.records: list[tuple[float, float, float]] = []
        self.events: list[dict] = []
        self.link_losses = 0
        self._ready = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-runtime-records", daemon=True)

    def __enter__(self) -> "RuntimeRecords":
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError(f"no runtime API link on {self.sock} within 60 s: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(30)

    def _on_snapshot(self, data: bytes) -> None:
        snap = orjson.loads(data)
        sp = snap.get("setpoint") or {}
        self.records.append((snap["t"], float(sp.get("linear") or 0.0), float(sp.get("angular") or 0.0)))

    def _run(self) -> None:
        async def main() -> None:
            rt = RuntimeClient(self.sock, on_snapshot=self._on_snapshot, on_event=self.events.append)  # a watcher: it never claims control
            rt.start()
            try:
                await rt.wait_connected(60)
                self._ready.set()
                await asyncio.to_thread(self._done.wait)
            finally:
                self.link_losses = rt.link_losses  # a gap in the records (0 expected)
                logging.getLogger("server.runtime_api.client").setLevel(logging.ERROR)  # its stop is no lost link
                await rt.stop()

        try:
            asyncio.run(main())
        except BaseException as err:  # noqa: BLE001 - reported by __enter__
            self._error = err


def speed_tag(i: int, scale: float = 1.0) -> tuple[float, float]:
    """The ``speed`` of command ``i`` (``scale``: as the governor caps it): 0.2 m/s on a circle of 1-2 m radius
    (the camera keeps the textured floor in view: straight ahead it ends at a wall, 20 KB frames), its angular ÷
    linear ratio 0.5 + 0.5 (k + 1) / RATIO_STEPS rad/m telling ``k = i mod RATIO_STEPS`` back (:func:`tag_of`)."""
    k = i % RATIO_STEPS
    return LINEAR_M_S * scale, LINEAR_M_S * (0.5 + 0.5 * (k + 1) / RATIO_STEPS) * scale


def tag_of(linear: float, angular: float) -> int:
    return round((angular / linear - 0.5) * 2 * RATIO_STEPS) - 1


def applied_ages(sent: list[float], applied: list[bool], records: list[tuple[float, float, float]]) -> list[float]:
    """Upper bounds of the age (s) at which each applied ``speed`` was applied: command ``i`` was sent at wall time
    ``sent[i]`` tagged ``k = i mod RATIO_STEPS``; the first runtime record at or after its send that shows it or a
    later command (applied in order) was made after it was applied. Commands never bounded are left out."""
    upper: list[float | None] = [None] * len(sent)
    last = -1
    for t, linear, angular in records:
        if linear <= 1e-9:
            continue
        k = tag_of(linear, angular)
        i = max((j for j in range(k, len(sent), RATIO_STEPS) if sent[j] <= t), default=-1)
        for j in range(last + 1, i + 1):
            upper[j] = t
        last = max(last, i)
    return [u - s for u, s, ok in zip(upper, sent, applied) if ok and u is not None]


# ---------------------------------------------------------------------- the operator's side
class Frames:
    """What a video viewer received: arrival − ``capture_t`` per frame, bytes, the window."""

    def __init__(self) -> None:
        self.ages: list[float] = []
        self.jpeg_bytes: list[int] = []
        self.message_bytes = 0
        self.first_t: float | None = None
        self.last_t: float | None = None

    def on_frame(self, now: float, header: dict, size: int) -> None:
        self.first_t = self.first_t if self.first_t is not None else now
        self.last_t = now
        self.ages.append(now - header["capture_t"])
        self.jpeg_bytes.append(header["bytes"])
        self.message_bytes += size

    def figures(self, seconds: float) -> dict:
        return {"fps": len(self.ages) / seconds, "age_ms": [a * 1e3 for a in self.ages],
                "mbit_s": self.message_bytes * 8 / seconds / 1e6,
                "jpeg_kb": statistics.mean(self.jpeg_bytes) / 1e3 if self.jpeg_bytes else float("nan")}


async def with_video(srv: LinkedServer, work) -> tuple[object, dict]:
    """``await work`` while one JPEG viewer watches; returns its result and the video figures over its duration."""
    frames = Frames()
    async with aiohttp.ClientSession() as http:
        viewer = asyncio.create_task(watch_video(http, srv.ws_url, time.time() + 86400, frames.on_frame,
                                                 headers=srv.auth_headers(OPERATOR)))
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(WORK_LIMIT_S):  # a hang becomes a traceback that says where
                result = await work
        finally:
            await cancel_and_wait(viewer)
        return result, frames.figures(time.monotonic() - t0)


async def recover(c: StampedClient, srv: LinkedServer) -> dict:
    """``reset``, taking the lease again first if it is gone (a link-loss stop ends it: docs/security.md)."""
    r = await c.call("reset", timeout_s=60)
    if r["type"] == "error" and r["error"]["code"] == "lease_required":
        status, body = await asyncio.to_thread(srv.post, "/api/lease/take", {}, headers=srv.auth_headers(OPERATOR))
        assert status == 200, body
        r = await c.call("reset", timeout_s=60)
    return r


async def drive(srv: LinkedServer, mode: str, seconds: float, compress: int) -> dict:
    new = mode == "after"
    async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/ws/telemetry", compress=compress,
                                                                headers=srv.auth_headers(OPERATOR)) as ws:
        c = StampedClient(ws, answer_sync=new)
        if new:
            await c.synced(timeout_s=60)
        stamp = None if new else False
        speeds: list[tuple[int, float]] = []  # (message id, wall time sent)
        end = time.monotonic() + seconds
        driving_s = 0.0
        while time.monotonic() < end:
            if ws.closed or c._reader.done():
                raise RuntimeError(f"the telemetry socket closed (code {ws.close_code}) or its reader ended: "
                                   f"{c._reader.exception() if c._reader.done() else None!r}")
            state = c.snapshots[-1][1]["state"] if c.snapshots else "idle"
            if state in ("estop", "fault"):
                await recover(c, srv)
                await asyncio.sleep(0.5)
                continue
            stop = asyncio.Event()

            async def beat() -> None:
                while not stop.is_set():
                    await c.send("heartbeat", stamp=stamp)
                    try:
                        await asyncio.wait_for(stop.wait(), 0.1)
                    except asyncio.TimeoutError:
                        pass

            beats = asyncio.create_task(beat()) if new else None
            reply = await c.call("start", timeout_s=60)
            if beats is None:
                beats = asyncio.create_task(beat())  # the old client: only once start's answer is back
            t0 = time.monotonic()
            if reply["type"] == "ack":
                for _ in range(100):  # 5 s at 20 Hz
                    linear, angular = speed_tag(len(speeds))
                    sent_t = time.time()
                    msg_id = await c.send("speed", linear=linear, angular=angular, stamp=stamp)
                    speeds.append((msg_id, sent_t))
                    await asyncio.sleep(0.05)
            stop.set()
            await beats
            driving_s += time.monotonic() - t0
            await c.call("stop", timeout_s=60)
            # back to the start (the sim's teleport, a debug route): every cycle sees the same textured view
            await asyncio.to_thread(srv.post, "/api/debug/driver", {"teleport": START_POSE})
            await asyncio.sleep(0.5)
        estops = []  # (wall time sent, round trip to the ack)
        for _ in range(ESTOPS):
            await recover(c, srv)  # from idle: an e-stop of a robot already latched (link loss) logs nothing new
            await asyncio.sleep(0.3)
            t0, w0 = time.monotonic(), time.time()
            r = await c.call("estop", timeout_s=60)
            estops.append((w0, time.monotonic() - t0))
            assert r["type"] == "ack", r
            await asyncio.sleep(0.3)
        await recover(c, srv)
        await asyncio.sleep(1.0)
        ages = [arrived - snap["t"] for arrived, snap in c.snapshots]
        replies = [c.replies.get(msg_id) for msg_id, _ in speeds]
        await c.close()
        return {"ages": ages, "estops": estops, "driving_s": driving_s, "sent": [t for _, t in speeds],
                "applied": [r is not None and r["type"] == "ack" and not r.get("dropped") for r in replies],
                "stale": sum(1 for r in replies if r and r.get("dropped") == "stale"),
                "reordered": sum(1 for r in replies if r and r.get("dropped") == "reordered"),
                "unanswered": sum(1 for r in replies if r is None),
                "deflate": bool(ws.compress)}


async def one_snapshot(srv: LinkedServer) -> str:
    """One ``/ws/telemetry`` message as the server sends it (envelope and snapshot), for the peers to broadcast."""
    async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/ws/telemetry",
                                                                headers=srv.auth_headers(OPERATOR)) as ws:
        async with asyncio.timeout(60):
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT and msg.data.startswith('{"type":"telemetry"'):
                    return msg.data
    raise RuntimeError("no telemetry message from the server")


async def peer_client(kind: str, url: str, seconds: float, compress: int) -> list[float]:
    lat: list[float] = []
    read = read_plain if kind == "aiohttp" else read_foxglove
    async with aiohttp.ClientSession() as http:
        await read(http, url, time.time() + seconds, lat.append, compress=compress)
    return lat


# ---------------------------------------------------------------------- one link
def server_config(link_name: str, mode: str, timeout_s: float, tmp: Path) -> Path:
    users = make_users(tmp / f"users-{link_name}-{mode}.json")
    base = tomllib.loads((REPO / DEFAULT_CONFIG).read_text())
    cfg = deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), VIDEO), {
        "auth": {"users_file": str(users)}, "server": {"state_dir": str(tmp / f"state-{link_name}-{mode}")},
        "safety": {"command_timeout_s": timeout_s}})
    if mode == "before":
        cfg = deep_merge(cfg, BEFORE)
    path = tmp / f"{link_name}-{mode}.toml"
    path.write_text(tomli_w.dumps(cfg))
    return path


def run_mode(link: Link, link_name: str, mode: str, args, tmp: Path, peers: bool) -> dict:
    cfg_path = server_config(link_name, mode, args.timeout, tmp)
    cfg = tomllib.loads(cfg_path.read_text())
    srv = LinkedServer(cfg_path, link).start()
    try:
        status, body = srv.post("/api/lease/take", {}, headers=srv.auth_headers(OPERATOR))
        assert status == 200, body
        with RuntimeRecords(socket_path(srv)) as records:
            result, video = link.call_in("operator", asyncio.run, with_video(srv, drive(srv, mode, args.seconds,
                                                                                           args.compress)))
            deadline = time.monotonic() + 30  # the events reach the watcher a moment after the acks
            while sum(e["trigger"] == "operator_estop" for e in records.events) < ESTOPS and time.monotonic() < deadline:
                time.sleep(0.1)
        result["video"] = video
        result["load"] = os.getloadavg()
        max_age = cfg["safety"].get("max_command_age_s", 0.3)
        ages = applied_ages(result["sent"], result["applied"], records.records)
        result["applied_ages"] = ages
        result["late"] = sum(1 for a in ages if a > max_age + PUBLISH_PERIOD_S)
        result["unbounded"] = sum(result["applied"]) - len(ages)
        result["record_gaps"] = records.link_losses
        events = records.events
        result["link_loss"] = sum(1 for e in events if e["trigger"] == "link_loss")
        result["latency_stops"] = sum(1 for e in events if e["trigger"] == "latency")
        latched = [e["wall_t"] for e in events if e["trigger"] == "operator_estop"]
        sends = [w for w, _ in result["estops"]] + [float("inf")]
        result["latched"] = [min(w for w in latched if a <= w < b) - a for a, b in zip(sends, sends[1:])
                             if any(a <= w < b for w in latched)]  # one short: an e-stop that logged no event
        result["peers"] = {}
        if peers:
            rate_hz = float(cfg["telemetry"]["rate_hz"])
            message = link.call_in("operator", asyncio.run, one_snapshot(srv))
            result["message_bytes"] = len(message.encode())
            for kind in ("aiohttp", "foxglove"):
                proc, url = start_peer(kind, message, rate_hz, link.robot_ip,
                                       within=lambda fn: link.call_in("robot", fn))
                try:
                    lat, pv = link.call_in("operator", asyncio.run,
                                           with_video(srv, peer_client(kind, url, args.peer_seconds,
                                                                                      args.compress)))
                finally:
                    proc.kill()
                    proc.join(10)
                result["peers"][kind] = {"ages": lat, "video": pv}
        return result
    finally:
        srv.kill()


def run_link(link_name: str, args, tmp: Path) -> list[tuple[str, dict]]:
    with Link(link_name.split("+")[0]) as link:
        flow = BulkFlow(link, "uplink") if "download" in link_name else None
        if flow is not None:
            flow.start()
        try:
            return [(mode, run_mode(link, link_name, mode, args, tmp, peers=mode == "after"))
                    for mode in args.modes.split(",")]
        finally:
            if flow is not None:
                flow.stop()


# ---------------------------------------------------------------------- printing
def ms3(values_s: list[float]) -> str:
    v = [x * 1e3 for x in values_s]
    return f"{pct(v, 50):.0f} / {pct(v, 99):.0f} / {max(v):.0f}" if v else "–"


def ratio(a: list[float], b: list[float], q: float) -> str:
    return f"{pct(a, q) / pct(b, q):.2f}" if a and b and pct(b, q) > 0 else "–"


TELEMETRY_HEAD = ("| link | mode | project age p50 / p99 / max ms | aiohttp | foxglove | project ÷ aiohttp p50, p99 | "
                  "project ÷ foxglove p50, p99 | load |\n|---|---|---|---|---|---|---|---|")
SAFETY_HEAD = ("| link | mode | video fps | frame KB | frame age p50 / p99 ms | video Mbit/s | e-stop click → latched "
               "p50 / max ms | → ack p50 / max ms | applied late (oldest applied ms) | dropped stale / reordered | "
               "link-loss stops (per h of driving) | governor stops |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def telemetry_row(name: str, mode: str, r: dict) -> str:
    p = r["ages"]
    a = r["peers"].get("aiohttp", {}).get("ages", [])
    f = r["peers"].get("foxglove", {}).get("ages", [])
    return (f"| {name} | {mode} | {ms3(p)} | {ms3(a)} | {ms3(f)} | {ratio(p, a, 50)}, {ratio(p, a, 99)} | "
            f"{ratio(p, f, 50)}, {ratio(p, f, 99)} | {r['load'][0]:.1f} |")


def safety_row(name: str, mode: str, r: dict) -> str:
    v = r["video"]
    latched = [x * 1e3 for x in r["latched"]]
    acks = [x * 1e3 for _, x in r["estops"]]
    nan = float("nan")
    oldest = max(r["applied_ages"], default=nan) * 1e3
    per_h = r["link_loss"] / max(r["driving_s"], 1e-9) * 3600
    return (f"| {name} | {mode} | {v['fps']:.1f} | {v['jpeg_kb']:.0f} | {pct(v['age_ms'], 50):.0f} / "
            f"{pct(v['age_ms'], 99):.0f} | {v['mbit_s']:.2f} | {pct(latched, 50):.0f} / {max(latched, default=nan):.0f}"
            f"{'' if len(latched) == len(acks) else f' ({len(latched)} of {len(acks)} logged)'} | "
            f"{pct(acks, 50):.0f} / {max(acks):.0f} | {r['late']} ({oldest:.0f}) | {r['stale']} / {r['reordered']} | "
            f"{r['link_loss']} ({per_h:.0f}) | {r['latency_stops']} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="driving time per run (s)")
    ap.add_argument("--peer-seconds", type=float, default=30.0, help="each peer's run on the link (s)")
    ap.add_argument("--links", default="lan,4g,bad,4g+download")
    ap.add_argument("--modes", default="after", help="after, or before,after (issue 20's fixes off, then on)")
    ap.add_argument("--timeout", type=float, default=0.5, help="safety.command_timeout_s")
    ap.add_argument("--no-deflate", dest="compress", action="store_const", const=0, default=15,
                    help="telemetry clients that do not offer permessage-deflate (a browser always offers it)")
    ap.add_argument("--quick", action="store_true", help="15 s runs, peers 10 s (make bench --quick)")
    ap.add_argument("--long", action="store_true", help="issue 20's 10-minute runs: 600 s on 4g and bad")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.peer_seconds = 15.0, 10.0
    if args.long:
        args.seconds, args.links, args.modes = 600.0, "4g,bad", "after"
    problems = linkemu.missing()
    if problems:
        print("bench_link: skipped: the link emulator cannot run here: " + "; ".join(problems))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="teleop-bench-link-"))
    load = os.getloadavg()
    print(f"bench_link: {args.seconds:g} s of driving per run, peers {args.peer_seconds:g} s each, "
          f"command_timeout_s = {args.timeout:g} s; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}",
          flush=True)
    rows = []
    for name in args.links.split(","):
        for mode, r in run_link(name, args, tmp):
            rows.append((name, mode, r))
            print(f"  {name} {mode}: telemetry {'deflate' if r['deflate'] else 'no deflate'}, "
                  f"{len(r['ages'])} snapshots; {len(r['sent'])} speeds, {r['unanswered']} unanswered, "
                  f"{r['unbounded']} applied but not seen in a runtime record (watcher link lost {r['record_gaps']}×); driving {r['driving_s']:.0f} s; "
                  f"load {r['load'][0]:.1f}"
                  + (f"; peers sent the project's {r['message_bytes']} B message" if "message_bytes" in r else ""),
                  flush=True)
    print("\ntelemetry age at the operator (arrival − snapshot t, one clock), project vs peers on the same link "
          "and load:")
    print(TELEMETRY_HEAD)
    for name, mode, r in rows:
        print(telemetry_row(name, mode, r))
    print("\nvideo (JPEG websocket, one viewer acking), e-stop, stale commands, false stops:")
    print(SAFETY_HEAD)
    for name, mode, r in rows:
        print(safety_row(name, mode, r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
