"""Video for the internet, side by side (issue 21): our WebRTC and H.264/websocket against today's JPEG websocket
and a plain aiortc sender with its defaults, over every link profile of the emulator, same camera, same Chromium.

Per profile (linkemu: the real server in the robot namespace, headless Chromium in the operator's, logged in
as an admin holding the lease) and per transport, ``SECONDS`` of video with the robot driving in a circle
(so the picture moves), then:

- fps displayed, glass-to-glass age p50 / p95 (capture → displayed, read from the sim camera's time strip in
  the displayed picture, on the robot's clock), Mbit/s received by the browser, the longest gap between
  two displayed frames, the tier at the end;
- offline, the same run's camera: bitrate and SSIM against the source of the H.264 top tier at 640×480@30,
  and the JPEG q70 size (``encode_quality``);
- on ``lan``: gateway CPU with 1 and 5 WebRTC viewers on one tier (a one-tier ladder: one encoder, the second
  to fifth viewers cost sends only), the ratio and the cost per extra viewer, and the 1 kHz loop's deadlines
  met while WebRTC video runs. The viewers are aiortc receivers in the operator's namespace, each on its own
  login session, decoding what they get (:class:`AiortcViewers` says why not five Chromium pages);
- on ``bad``: link-loss stops while driving with commands on the data channel vs on the websocket, same
  duration each; the WebRTC page drives only once its command channel is open.

``--profiles ""`` runs only the offline quality, CPU and link-loss parts; ``--loss-s`` sets the driving time.

Transports: ``webrtc`` (ours), ``h264`` (ours, H.264 over the websocket with WebCodecs: Chromium is told the
robot's http origin is secure, as https would make it), ``jpeg`` (today's), ``aiortc`` (aiortc's own encoder per
connection, REMB only: the server's ``[debug] routes`` ``/ws/webrtc?peer=aiortc``; it answers with the codec the
browser lists first, VP8).

Run: ``python bench/bench_webrtc.py [--quick] [--profiles lan,bad]``. Needs root (network namespaces) and
Chromium; prints the machine's load average with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tomli_w  # noqa: E402

import linkemu  # noqa: E402
from tests.conftest import TEST_DEFAULTS, deep_merge, wait_until  # noqa: E402
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.linkemu.plugin import LinkedServer  # noqa: E402
from tests.server.gateway.auth.client import PASSWORD, make_users  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
TRANSPORTS = ("webrtc", "h264", "jpeg", "aiortc")


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else math.nan


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def gateway_pid(server_pid: int) -> int | None:
    """The gateway process among the launcher's children (its command line names server.gateway)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if "server.gateway" in cmd and ppid in (server_pid, *child_pids(server_pid)):
            return int(d.name)
    return None


def child_pids(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def start(profile: str, tmp: Path, overrides: dict | None = None) -> LinkedServer:
    link = linkemu.Link(profile).start()
    users = make_users(tmp / f"users-{profile}.json")
    base = tomllib.loads((REPO / "config/rover-sim.toml").read_text())
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), {
        "auth": {"users_file": str(users)}, "server": {"state_dir": str(tmp / f"state-{profile}")},
        "debug": {"routes": True}, "safety": {"command_timeout_s": 1.0}, "video": {"enabled": True},
        **(overrides or {})})
    path = tmp / f"bench-{profile}.toml"
    path.write_text(tomli_w.dumps(cfg))
    return LinkedServer(path, link).start()


def open_page(browser, srv: LinkedServer, transport: str, init_script: str | None = None):
    ctx = browser.new_context()
    if init_script is not None:
        ctx.add_init_script(init_script)
    page = ctx.new_page()
    page.goto(srv.url + "/login", timeout=60000)
    page.evaluate(f"""() => {{ localStorage.setItem("teleop.video.transport", "{'webrtc' if transport == 'aiortc' else transport}");
        localStorage.setItem("teleop.video.peer", "{'aiortc' if transport == 'aiortc' else ''}"); }}""")
    page.fill("#login-user", "ada")
    page.fill("#login-password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(srv.url + "/", timeout=60000)
    try:
        page.wait_for_function("() => window.teleop && window.teleop.session.connected && window.teleopVideo",
                               timeout=60000)
    except Exception:
        print("  page state:", page.evaluate("() => ({url: location.href, teleop: !!window.teleop, "
                                             "connected: window.teleop && window.teleop.session.connected, "
                                             "video: !!window.teleopVideo})"), flush=True)
        raise
    return ctx, page


DRIVE_JS = """() => {
  const s = window.teleop.session;
  window.benchDrive = setInterval(() => { s.post("speed", {linear: 0.15, angular: 0.5}); }, 50);
  window.benchBeat = setInterval(() => s.post("heartbeat"), 100);
}"""


def drive(srv: LinkedServer, page) -> None:
    """The page takes the lease and starts the robot itself: its session must hold the lease, or it sends
    nothing (``mayDrive`` false; before, the bench took the lease on its own bearer session, the page sent no
    speed and no heartbeat, and every "link-loss stop" was the command timeout of a robot nobody drove)."""
    page.locator("#lease-take").click(timeout=60_000)
    page.wait_for_function("() => document.querySelector('#lease-panel').innerText.includes('You drive')",
                           timeout=60_000)
    page.evaluate("() => window.teleop.session.command('reset')")
    page.evaluate(DRIVE_JS)
    page.evaluate("() => window.teleop.session.command('start')")


def measure(page, seconds: float) -> dict:
    wait_until(lambda: page.evaluate("window.teleopVideo.stats().frames") > 5, 40, "first frames")
    page.wait_for_timeout(3000)  # settle (the rate controller's first seconds)
    a0 = page.evaluate("window.teleopVideo.ages(0).next")
    s0 = page.evaluate("window.teleopVideo.stats()")
    t0 = time.time()
    b0 = page.evaluate("window.teleopVideo.transportStats()") or {}
    page.wait_for_timeout(seconds * 1000)
    t1 = time.time()
    s1 = page.evaluate("window.teleopVideo.stats()")
    b1 = page.evaluate("window.teleopVideo.transportStats()") or {}
    ages = page.evaluate(f"window.teleopVideo.ages({a0}).ages")
    nbytes = (b1.get("bytes") or 0) - (b0.get("bytes") or 0)
    if nbytes < 0:  # the transport reconnected in the cell (a blackout): its counter began again
        nbytes = b1.get("bytes") or 0
    rate = s1.get("rate") or {}
    tier = rate.get("tier") or (rate.get("rate") or {}).get("tier")
    return {"transport": s1["transport"], "fps": (s1["frames"] - s0["frames"]) / (t1 - t0),
            "p50": pct(ages, 50), "p95": pct(ages, 95), "p99": pct(ages, 99), "mbit": 8 * nbytes / (t1 - t0) / 1e6,
            "max_gap_ms": s1["maxGapMs"], "tier": tier or f"{s1['width']}x{s1['height']}", "n": len(ages),
            "codec": b1.get("codec"), "why": s1.get("why")}


def row(profile: str, name: str, r: dict) -> str:
    return (f"| {profile} | {name} | {r['fps']:.1f} | {r['p50']:.0f} / {r['p95']:.0f} / {r['p99']:.0f} | "
            f"{r['mbit']:.2f} | {r['max_gap_ms']:.0f} | {r.get('keyframes', '–')} | {r['tier']} |")


def keyframes(srv: LinkedServer) -> int:
    """Keyframes made by every encoder of the gateway so far (ours; aiortc's own encoders are not counted)."""
    encoders = (srv.get("/api/video")[1].get("encoded") or {}).get("encoders") or []
    return sum(e.get("keyframes", 0) for e in encoders)


def ratios(profile: str, cells: dict[str, dict]) -> None:
    """Ours against the peers, same run, same link: < 1 is ours smaller (bitrate, age), > 1 ours higher (fps)."""
    for ours in ("webrtc", "h264"):
        for peer in ("jpeg", "aiortc"):
            a, b = cells.get(ours), cells.get(peer)
            if not a or not b:
                continue
            print(f"  {profile}: {ours} / {peer}: Mbit/s ×{a['mbit'] / max(b['mbit'], 1e-9):.2f}, fps "
                  f"×{a['fps'] / max(b['fps'], 1e-9):.2f}, glass-to-glass p50 ×{a['p50'] / b['p50']:.2f}, "
                  f"p95 ×{a['p95'] / b['p95']:.2f}", flush=True)


def encode_quality(seconds: float = 4.0) -> None:
    """Offline: the top tier's bitrate and SSIM against the source, on the sim camera's real-size frames."""
    import cv2

    from drivers.camera.sim import SimCamera
    from server.gateway.video.encoder import EncoderSettings, TierEncoder
    from sim.world import World

    base = tomllib.loads((REPO / "config/rover-sim.toml").read_text())
    world = World.from_config(base["sim"]["world"])
    t = {"v": 0.0}
    cam = SimCamera({**base["video"], "render_process": False}, world,
                    lambda: {"x": 1.0 + 0.5 * math.cos(t["v"]), "y": 2.0 + 0.5 * math.sin(t["v"]), "yaw": t["v"] + 1.6},
                    np.random.default_rng(1))
    cam.open()
    frames, packets = [], []
    enc = TierEncoder("640x480@30", "h264", 640, 480, 30, 1_500_000, 1_500_000,
                      EncoderSettings(max_frame_age_s=5.0), packets.append)
    enc.start()
    n = int(seconds * 30)
    for i in range(n):
        t["v"] = i * 0.5 / 30  # 0.5 rad/s
        img, ts = cam.read()
        frames.append(img)
        enc.offer(img, time.time(), i + 1)
        deadline = time.time() + 2
        while len(packets) < i + 1 and time.time() < deadline:
            time.sleep(0.002)
        time.sleep(max(0.0, 1 / 30 - 0.002))
    enc.stop()
    cam.close()
    import av

    dec = av.CodecContext.create("h264", "r")
    ssims = []
    for p in packets:
        for fr in dec.decode(av.Packet(p.data)):
            y = cv2.cvtColor(fr.to_ndarray(format="bgr24"), cv2.COLOR_BGR2GRAY).astype(np.float64)
            x = cv2.cvtColor(frames[p.seq - 1], cv2.COLOR_BGR2GRAY).astype(np.float64)
            ssims.append(ssim(x, y))
    jpeg = [len(cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 70])[1]) for f in frames[::10]]
    mbit = 8 * sum(len(p.data) for p in packets) / (len(packets) / 30) / 1e6
    print(f"  640x480@30, real-camera-size sim frames (JPEG q70 {np.mean(jpeg) / 1e3:.1f} KB = "
          f"{8 * np.mean(jpeg) * 30 / 1e6:.1f} Mbit/s at 30 fps): H.264 top tier {mbit:.2f} Mbit/s, SSIM mean "
          f"{np.mean(ssims):.3f}, p5 {pct(ssims, 5):.3f}, min {min(ssims):.3f} ({len(ssims)} frames), "
          f"encode {enc.encode_ms:.1f} ms/frame")


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    import cv2

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    g = lambda x: cv2.GaussianBlur(x, (11, 11), 1.5)  # noqa: E731
    ma, mb = g(a), g(b)
    va, vb, cov = g(a * a) - ma * ma, g(b * b) - mb * mb, g(a * b) - ma * mb
    return float((((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma * ma + mb * mb + c1) * (va + vb + c2))).mean())


#: one tier for the CPU cell: every viewer on the same tier, whatever its controller thinks (one encoder)
ONE_TIER = [{"name": "640x480@30", "width": 640, "height": 480, "fps": 30, "min_bitrate_bit_s": 700_000,
             "max_bitrate_bit_s": 1_500_000}]


class AiortcViewers:
    """WebRTC viewers that are aiortc receivers in the operator's namespace, each logged in on its own session,
    counting the frames they decode. Why not five Chromium pages: at load 20+ here the fifth dashboard did not
    connect in 60 s (five renderers, five decoders, five telemetry sockets), and each dashboard's telemetry
    would be counted as video CPU; these cost the gateway what a viewer's video costs it: signalling, RTCP,
    one send per packet."""

    def __init__(self, srv: LinkedServer) -> None:
        self.srv = srv
        self.frames: list[int] = []
        self.loop = asyncio.new_event_loop()
        self._pcs: list = []
        self._tasks: list = []
        started = threading.Event()

        def run() -> None:
            with srv.link.netns("operator"):
                asyncio.set_event_loop(self.loop)
                started.set()
                self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="bench-aiortc-viewers", daemon=True)
        self.thread.start()
        started.wait()

    def add(self, timeout_s: float = 180.0) -> None:
        """One more viewer; returns once it has decoded frames (or raises after ``timeout_s``)."""
        status, body = self.srv.request("POST", "/api/auth/login", headers={},
                                        body={"username": "vera", "password": PASSWORD, "bearer": True})
        assert status == 200, (status, body)
        headers = {"Authorization": f"Bearer {body['token']}", "Origin": self.srv.url}
        i = len(self.frames)
        self.frames.append(0)
        asyncio.run_coroutine_threadsafe(self._viewer(i, headers), self.loop)
        wait_until(lambda: self.frames[i] > 10, timeout_s, f"aiortc viewer {i + 1} to decode frames")

    async def _viewer(self, i: int, headers: dict) -> None:
        import aiohttp
        from aiortc import RTCPeerConnection, RTCSessionDescription

        pc = RTCPeerConnection()
        self._pcs.append(pc)
        pc.addTransceiver("video", direction="recvonly")

        @pc.on("track")
        def on_track(track) -> None:
            async def pull() -> None:
                while True:
                    await track.recv()
                    self.frames[i] += 1

            self._tasks.append(asyncio.ensure_future(pull()))

        await pc.setLocalDescription(await pc.createOffer())
        http = aiohttp.ClientSession()
        ws = await http.ws_connect(self.srv.ws_url + "/ws/webrtc", headers=headers)
        self._tasks.append(http)
        await ws.send_str(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
        async for msg in ws:  # the socket stays open: the peer ends with it
            d = json.loads(msg.data)
            if d.get("type") == "answer":
                await pc.setRemoteDescription(RTCSessionDescription(d["sdp"], "answer"))

    def close(self) -> None:
        async def shut() -> None:
            for pc in self._pcs:
                await pc.close()
            for t in self._tasks:
                if hasattr(t, "cancel"):
                    t.cancel()
                else:
                    await t.close()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def cpu_and_loop(tmp: Path, seconds: float) -> None:
    """Gateway CPU with 1 and 5 WebRTC viewers on one tier (one encoder), and the 1 kHz loop meanwhile."""
    srv = start("lan", tmp / "cpu", {"loop": {"rate_hz": 1000}, "video": {"enabled": True, "tiers": ONE_TIER}})
    viewers = AiortcViewers(srv)
    cpu: dict[int, float] = {}
    try:
        gw = gateway_pid(srv.proc.pid)
        for n in (1, 5):
            while len(viewers.frames) < n:
                viewers.add()
            time.sleep(3)
            c0, l0, t0, f0 = proc_cpu_s(gw), srv.get("/api/state")[1]["loop"], time.time(), list(viewers.frames)
            time.sleep(seconds)
            c1, l1, t1, f1 = proc_cpu_s(gw), srv.get("/api/state")[1]["loop"], time.time(), list(viewers.frames)
            ticks, missed = l1["ticks"] - l0["ticks"], l1["missed"] - l0["missed"]
            fps = [(b - a) / (t1 - t0) for a, b in zip(f0, f1)]
            cpu[n] = 100 * (c1 - c0) / (t1 - t0)
            encoded = srv.get("/api/video")[1]["encoded"]
            print(f"  lan, {n} WebRTC viewer(s) (aiortc receivers), one tier: gateway CPU {cpu[n]:.1f} % of a core "
                  f"(encoders: {len(encoded['encoders'])}, viewers {encoded['viewers']}); 1 kHz loop deadlines met "
                  f"{100 * ticks / max(1, ticks + missed):.3f} % ({missed} missed of {ticks + missed}); "
                  f"fps per viewer {', '.join(f'{f:.1f}' for f in fps)}; load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"  CPU 5 viewers / 1 viewer: ×{cpu[5] / max(cpu[1], 1e-9):.2f}; per extra viewer "
              f"{(cpu[5] - cpu[1]) / 4:.1f} % of a core", flush=True)
    finally:
        viewers.close()
        srv.kill()
        srv.link.close()


def link_loss(browser, tmp: Path, seconds: float) -> None:
    """False link-loss stops while driving on ``bad``: commands on the data channel (WebRTC page), then on the
    websocket (JPEG page), each for ``seconds``. The WebRTC page drives only once its command channel is open
    (before, the drive started first and every command went on the websocket: the data channel's counts were 0)."""
    per_hour = {}
    for transport in ("webrtc", "jpeg"):
        srv = start("bad", tmp / f"loss-{transport}")
        try:
            ctx, page = open_page(browser, srv, transport)
            wait_until(lambda: page.evaluate("window.teleopVideo.stats().frames") > 3, 180, "frames")
            if transport == "webrtc":
                page.wait_for_function("() => window.teleop.session.commandChannel"
                                       " && window.teleop.session.commandChannel.open", timeout=180_000)
            drive(srv, page)
            wait_until(lambda: srv.get("/api/state")[1]["state"] == "running", 120, "the robot to run")
            t0 = time.time()
            stops = 0
            while time.time() - t0 < seconds:
                time.sleep(0.5)
                st = srv.get("/api/state")[1]
                if st["state"] in ("estop", "idle", "stopping") and (st.get("cause") or {}).get("trigger") == "link_loss":
                    stops += 1
                    page.evaluate("() => window.teleop.session.command('reset')")
                    page.evaluate("() => window.teleop.session.command('start')")
            dt = time.time() - t0
            dc = page.evaluate("window.teleop.session.commandChannel ? window.teleop.session.commandChannel.counts : null")
            peers = [c["webrtc"]["commands"] for c in srv.get("/api/video")[1]["clients"] if c.get("webrtc")]
            per_hour[transport] = 3600 * stops / dt
            print(f"  bad, commands on {'the data channel' if transport == 'webrtc' else 'the websocket'}: {stops} link-loss"
                  f" stop(s) in {dt:.0f} s of driving ({per_hour[transport]:.0f}/h); data channel sends {dc}; "
                  f"server's data channel commands {[{k: p[k] for k in ('forwarded', 'errors')} for p in peers]}; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
            ctx.close()
        finally:
            srv.kill()
            srv.link.close()
    if "webrtc" in per_hour and "jpeg" in per_hour:
        print(f"  link-loss stops/h, data channel / websocket: {per_hour['webrtc']:.0f} / {per_hour['jpeg']:.0f}",
              flush=True)


AGES_JS = """() => { const s = window.teleop.session; window.benchTel = {ages: [], via: {}};
  s.on("telemetry", (snap) => { const a = s.snapshotAgeMs(snap);
    if (a !== null) { window.benchTel.ages.push(a); window.benchTel.via[s.telemetryVia] = (window.benchTel.via[s.telemetryVia] || 0) + 1; } }); }"""
#: the page's telemetry channel gets a label the server refuses (it closes it): the page keeps the socket at 20 Hz
NO_TELEMETRY_CHANNEL_JS = """(() => { const make = RTCPeerConnection.prototype.createDataChannel;
  RTCPeerConnection.prototype.createDataChannel = function (label, opts) {
    return make.call(this, label === "telemetry" ? "telemetry-refused" : label, opts); }; })()"""


def telemetry_paths(pw, tmp: Path, seconds: float, profile: str = "4g", overrides: dict | None = None) -> None:
    """Telemetry age at the dashboard with WebRTC video running: snapshots on the ``telemetry`` data channel
    (unordered, no retransmission) against the same page with that channel refused (the websocket at 20 Hz), same
    link, same load, one after the other; the ages are the page's own (session.snapshotAgeMs: its clock offset,
    the snapshot's mono_t), every snapshot shown. Also the bytes each path sent per second."""
    srv = start(profile, tmp / "telemetry", {"safety": {"command_timeout_s": 1.0}, **(overrides or {})})
    browser = pw.chromium.launch(executable_path=srv.link.wrapper("operator", CHROMIUM), headless=True,
                                 args=CHROMIUM_ARGS)
    up = linkemu.PROFILES[profile].uplink
    goal_ms = (up.delay_s + 0.05) * 1e3
    res = {}
    try:
        for cell in ("data channel", "websocket"):
            ctx, page = open_page(browser, srv, "webrtc",
                                  None if cell == "data channel" else NO_TELEMETRY_CHANNEL_JS)
            try:
                wait_until(lambda: page.evaluate("window.teleopVideo.stats().frames") > 5, 120, "frames")
                if cell == "data channel":
                    page.wait_for_function("() => window.teleop.session.telemetryVia === 'data channel'",
                                           timeout=120_000)
                drive(srv, page)
                page.wait_for_timeout(3000)
                page.evaluate(AGES_JS)
                before = _path_bytes(srv)
                t0 = time.time()
                page.wait_for_timeout(seconds * 1000)
                dt = time.time() - t0
                after = _path_bytes(srv)
                tel = page.evaluate("window.benchTel")
                peer = next((c["webrtc"] for c in srv.get("/api/video")[1]["clients"] if c.get("webrtc")), {})
                rate = peer.get("rate") or {}
                print(f"    video: {page.evaluate('window.teleopVideo.stats().fps'):.1f} fps, bitrate "
                      f"{(rate.get('bitrate_bit_s') or 0) / 1e6:.2f} Mbit/s, estimate {(rate.get('estimate_bit_s') or 0) / 1e6:.2f},"
                      f" pacer {peer.get('pacer')}", flush=True)
                ages = tel["ages"]
                key = "datachannel" if cell == "data channel" else "socket"
                mbit = 8 * (after[key] - before[key]) / dt / 1e6
                res[cell] = (pct(ages, 50), pct(ages, 99), len(ages) / dt, mbit)
                print(f"  {profile}, telemetry via the {cell} (WebRTC video on): age p50 / p99 {pct(ages, 50):.0f} / "
                      f"{pct(ages, 99):.0f} ms, max {max(ages, default=math.nan):.0f}, {len(ages) / dt:.1f} snapshots/s "
                      f"shown, {mbit:.3f} Mbit/s of telemetry on that path (the channel: zlib per message; the socket: JSON "
                      f"before permessage-deflate); shown via {tel['via']}; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            except Exception as err:  # noqa: BLE001 - a cell that fails is reported, the bench goes on
                print(f"  {profile}, telemetry via the {cell}: failed: {type(err).__name__}: {str(err)[:200]}",
                      flush=True)
            finally:
                ctx.close()
                srv.post("/api/stop", {})
    finally:
        browser.close()
        srv.kill()
        srv.link.close()
    if len(res) == 2:
        d, w = res["data channel"], res["websocket"]
        print(f"  telemetry age p99, data channel / websocket: {d[1]:.0f} / {w[1]:.0f} ms = ×{d[1] / w[1]:.2f} "
              f"(goal ≤ one-way delay + 50 ms = {goal_ms:.0f} ms; {profile} uplink {up.delay_s * 1e3:.0f} ± "
              f"{up.jitter_s * 1e3:.0f} ms, {up.loss * 100:.0f} % loss)", flush=True)


def _path_bytes(srv: LinkedServer) -> dict[str, int]:
    """Telemetry bytes sent so far on the data channels (compressed, as sent) and on the telemetry sockets (JSON,
    before permessage-deflate)."""
    peers = [c["webrtc"].get("telemetry") or {} for c in srv.get("/api/video")[1]["clients"] if c.get("webrtc")]
    clients = srv.get("/api/telemetry")[1].get("per_client") or []
    return {"datachannel": sum(p.get("bytes_sent", 0) for p in peers),
            "socket": sum((c.get("bytes_sent") or 0) for c in clients)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profiles", default=",".join(linkemu.PROFILES))
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--skip", default="", help="comma list of: quality, telemetry, cpu, loss")
    ap.add_argument("--loss-s", type=float, default=0, help="seconds of driving per link-loss cell")
    ap.add_argument("--telemetry-s", type=float, default=0, help="seconds per telemetry-path cell")
    ap.add_argument("--pace-share", type=float, default=None,
                    help="[webrtc] pace_share for the transport table and the telemetry part (0: no pacer; default: the config's)")
    args = ap.parse_args()
    problems = linkemu.missing()
    if problems:
        print("bench_webrtc: skipped, the link emulator cannot run here:", "; ".join(problems))
        return 0
    seconds = 8 if args.quick else 20
    tmp = Path(tempfile.mkdtemp(prefix="teleop-bench-webrtc-"))
    print(f"bench_webrtc: load average at start {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} (2 cores); "
          f"{seconds} s per cell")
    skip = set(args.skip.split(","))
    if "quality" not in skip:
        encode_quality()
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        print("| link | transport | fps | glass to glass p50 / p95 / p99 ms | Mbit/s | longest gap ms | keyframes "
              "| tier at the end |")
        print("|---|---|---|---|---|---|---|---|")
        for profile in [p for p in args.profiles.split(",") if p]:  # --profiles "": only the cpu and loss parts
            srv = start(profile, tmp, None if args.pace_share is None else {"webrtc": {"pace_share": args.pace_share}})
            origin = srv.url
            browser = pw.chromium.launch(executable_path=srv.link.wrapper("operator", CHROMIUM), headless=True,
                                         args=[*CHROMIUM_ARGS, f"--unsafely-treat-insecure-origin-as-secure={origin}"])
            cells: dict[str, dict] = {}
            try:
                for transport in args.transports.split(","):
                    ctx, page = open_page(browser, srv, transport)
                    try:
                        drive(srv, page)
                        k0 = keyframes(srv)
                        r = measure(page, seconds)
                        r["keyframes"] = keyframes(srv) - k0 if transport in ("webrtc", "h264") else "–"
                        cells[transport] = r
                        name = {"webrtc": "WebRTC (ours)", "h264": "H.264/ws (ours)", "jpeg": "JPEG/ws (today)",
                                "aiortc": f"aiortc defaults ({r['codec'] or '?'})"}[transport]
                        if r["transport"] != ("webrtc" if transport == "aiortc" else transport):
                            name += f" → fell back to {r['transport']}: {r['why']}"
                        print(row(profile, name, r), flush=True)
                    except Exception as err:  # noqa: BLE001 - a cell that fails is reported, the bench goes on
                        print(f"| {profile} | {transport} | failed: {type(err).__name__}: {str(err)[:120]} |", flush=True)
                    finally:
                        ctx.close()
                        srv.post("/api/stop", {})
            finally:
                browser.close()
                srv.kill()
                srv.link.close()
            ratios(profile, cells)
        pacing = None if args.pace_share is None else {"webrtc": {"pace_share": args.pace_share}}
        for part, run in (("telemetry", lambda: telemetry_paths(pw, tmp, args.telemetry_s or (20 if args.quick else 60),
                                                                overrides=pacing)),
                          ("cpu", lambda: cpu_and_loop(tmp, seconds)),
                          ("loss", lambda: link_loss_with_own_browser(pw, tmp, args.loss_s or (60 if args.quick else 180)))):
            if part not in skip:
                try:
                    run()
                except Exception as err:  # noqa: BLE001 - a part that fails is reported, the bench goes on
                    print(f"  {part}: failed: {type(err).__name__}: {str(err)[:200]}", flush=True)
    finally:
        pw.stop()
    print(f"bench_webrtc: load average at the end {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f}")
    return 0


def link_loss_with_own_browser(pw, tmp: Path, seconds: float) -> None:
    global start
    made: dict = {}
    original = start

    def start_and_browser(profile, tmp_, overrides=None):
        srv = original(profile, tmp_, overrides)
        if "browser" in made:
            made["browser"].close()
        made["browser"] = pw.chromium.launch(executable_path=srv.link.wrapper("operator", CHROMIUM), headless=True,
                                             args=CHROMIUM_ARGS)
        return srv

    start = start_and_browser
    try:
        link_loss(_LazyBrowser(made), tmp, seconds)
    finally:
        start = original
        if "browser" in made:
            made["browser"].close()


class _LazyBrowser:
    """The browser of the link started last (each server gets a link of its own, and its own Chromium)."""

    def __init__(self, made: dict) -> None:
        self.made = made

    def new_context(self):
        return self.made["browser"].new_context()


if __name__ == "__main__":
    sys.exit(main())
