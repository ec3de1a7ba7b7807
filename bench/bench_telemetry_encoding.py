"""Bytes on the wire per second of a dashboard's telemetry, per encoding (issue 20 §5), on the real server.

One server (the simulated rover, driven at 10 Hz so its values move as when an operator drives), three clients
side by side on the same snapshots:

* ``full``: no subscribe, today's full snapshots at ``telemetry.rate_hz`` (50 Hz);
* ``json``: the dashboard's subscription (every channel of the description, every field) at ``--rate-hz``;
* ``delta``: the same subscription with ``"encoding": "delta"``.

For each stream it prints Mbit/s of websocket payload + frame headers as sent plain, and as permessage-deflate
would send it (the stream recompressed here with one zlib context per socket and a sync flush per message, as
aiohttp does with context takeover), and a msgpack encoding of the same messages (``msgspec.msgpack``, a binary
peer) — rates counted over the server's own snapshot stamps (``t``). The goal: ≤ 0.2 Mbit/s per dashboard
whatever the client negotiates.

    .venv/bin/python bench/bench_telemetry_encoding.py [--seconds 20] [--rate-hz 20]

``--link 4g`` (root, the link emulator) runs instead the server in the robot's namespace with the textured sim
camera and one JPEG viewer acking in the operator's, and measures telemetry age at the operator (arrival − the
snapshot's ``t``; the namespaces share the machine's clocks) p50 / p99 for each client in turn: full snapshots
without deflate, full with permessage-deflate, and the dashboard's delta subscription — with the JPEG pacing on
(and ``--no-pacing`` for the same without it). :func:`ages_over_link` is the function another bench can call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import zlib
from pathlib import Path

import aiohttp
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import start_server  # noqa: E402


def frame_bytes(n: int) -> int:
    """A server's websocket frame: the payload and its 2-, 4- or 10-byte header (unmasked)."""
    return n + (2 if n < 126 else 4 if n < 1 << 16 else 10)


def deflated_sizes(texts: list[str]) -> list[int]:
    """Each message's size as permessage-deflate sends it: one raw-deflate context for the stream (context
    takeover), a sync flush per message whose trailing 00 00 ff ff is not sent (RFC 7692 §7.2.1)."""
    z = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    out = []
    for t in texts:
        data = z.compress(t.encode()) + z.flush(zlib.Z_SYNC_FLUSH)
        out.append(len(data) - 4)
    return out


async def record(url: str, seconds: float, subscribe: dict | None) -> list[tuple[float, str]]:
    """(snapshot ``t``, message text) of each telemetry message for ``seconds`` after the subscription's ack."""
    got: list[tuple[float, str]] = []
    async with aiohttp.ClientSession() as s, s.ws_connect(url + "/ws/telemetry") as ws:
        if subscribe is not None:
            await ws.send_str(json.dumps({"type": "subscribe", "id": 1, **subscribe}))
        acked = subscribe is None
        end = None
        t_last = 0.0
        async for msg in ws:
            m = json.loads(msg.data)
            if m["type"] == "ack" and m.get("id") == 1:
                acked = True
                continue
            if m["type"] != "telemetry" or not acked:
                continue
            if subscribe is not None and subscribe.get("encoding") == "delta" and m.get("encoding") != "delta":
                continue  # sent before the subscription took effect
            end = end or time.monotonic() + seconds
            t_last = m["data"].get("t", t_last)
            got.append((t_last, msg.data))
            if time.monotonic() >= end:
                break
    return got


async def drive(url: str, seconds: float) -> None:
    """Start the rover and drive it in a slow circle (values move as in use), then stop."""
    async with aiohttp.ClientSession() as s, s.ws_connect(url + "/ws/telemetry") as ws:
        async def drain() -> None:  # a socket that is not read is closed by the stall policy
            async for _ in ws:
                pass
        reader = asyncio.create_task(drain())
        await ws.send_str(json.dumps({"type": "start", "id": "s"}))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await ws.send_str(json.dumps({"type": "heartbeat"}))
            await ws.send_str(json.dumps({"type": "speed", "linear": 0.3, "angular": 0.25}))
            await asyncio.sleep(0.1)
        await ws.send_str(json.dumps({"type": "stop"}))
        reader.cancel()


def rates(stream: list[tuple[float, str]]) -> dict[str, float]:
    ts = [t for t, _ in stream]
    span = max(ts[-1] - ts[0], 1e-9)
    texts = [x for _, x in stream][1:]  # the rate over the span between the first and the last stamp
    plain = sum(frame_bytes(len(x.encode())) for x in texts)
    deflate = sum(frame_bytes(n) for n in deflated_sizes([x for _, x in stream])[1:])
    packed = sum(frame_bytes(len(msgspec.msgpack.encode(json.loads(x)))) for x in texts)
    return {"hz": len(texts) / span, "bytes": plain / len(texts),
            "plain": plain * 8 / span / 1e6, "deflate": deflate * 8 / span / 1e6, "msgpack": packed * 8 / span / 1e6}


async def run(url: str, seconds: float, rate_hz: float, channels: list[str]) -> dict[str, dict]:
    dash = {"channels": channels, "fields": "*", "rate_hz": rate_hz}
    driver = asyncio.create_task(drive(url, seconds + 6))
    await asyncio.sleep(2.0)
    full, js, delta = await asyncio.gather(record(url, seconds, None), record(url, seconds, dash),
                                           record(url, seconds, {**dash, "encoding": "delta"}))
    await driver
    return {"full (no subscribe, 50 Hz)": rates(full), f"dashboard json @ {rate_hz:g} Hz": rates(js),
            f"dashboard delta @ {rate_hz:g} Hz": rates(delta)}


async def _link_client(srv, mode: str, seconds: float, channels: list[str], rate_hz: float) -> list[float]:
    """One telemetry client (``full``, ``deflate`` or ``delta``) beside one JPEG viewer acking every frame."""
    headers = srv.auth_headers()
    ages: list[float] = []

    async def viewer(ws) -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                n = int.from_bytes(msg.data[:4], "big")
                await ws.send_str(json.dumps({"type": "ack", "seq": json.loads(msg.data[4:4 + n])["seq"]}))

    async with aiohttp.ClientSession() as http, \
            http.ws_connect(srv.ws_url + "/ws/video", headers=headers) as video, \
            http.ws_connect(srv.ws_url + "/ws/telemetry", headers=headers,
                            compress=15 if mode == "deflate" else 0) as ws:
        task = asyncio.create_task(viewer(video))
        if mode == "delta":
            await ws.send_str(json.dumps({"type": "subscribe", "channels": channels, "fields": "*",
                                          "rate_hz": rate_hz, "encoding": "delta"}))
        start = time.monotonic() + 8.0  # read, not counted, while the video's pacing settles
        end = start + seconds
        async for msg in ws:
            m = json.loads(msg.data)
            if m["type"] == "telemetry" and "t" in m["data"] and time.monotonic() > start:
                ages.append(time.time() - m["data"]["t"])
            if time.monotonic() > end:
                break
        task.cancel()
    return ages


def ages_over_link(profile: str = "4g", seconds: float = 20.0, rate_hz: float = 20.0, pacing: bool = True,
                   modes: tuple[str, ...] = ("full", "deflate", "delta")) -> dict[str, list[float]]:
    """Telemetry ages (s) at the operator per client mode over ``profile`` with a JPEG viewer running."""
    import tempfile
    import tomllib

    import tomli_w

    from linkemu import Link
    from tests.conftest import DEFAULT_CONFIG, REPO, TEST_DEFAULTS, deep_merge
    from tests.linkemu.plugin import LinkedServer
    from tests.server.gateway.auth.client import make_users

    tmp = Path(tempfile.mkdtemp(prefix="teleop-bench-enc-"))
    out: dict[str, list[float]] = {}
    with Link(profile) as link:
        cfg = deep_merge(deep_merge(tomllib.loads((REPO / DEFAULT_CONFIG).read_text()), TEST_DEFAULTS), {
            "auth": {"users_file": str(make_users(tmp / "users.json"))}, "server": {"state_dir": str(tmp / "state")},
            "video": {"enabled": True, "texture": True, "noise_sigma": 6.0, "jpeg_pacing": pacing}})
        path = tmp / "bench.toml"
        path.write_text(tomli_w.dumps(cfg))
        srv = LinkedServer(path, link).start()
        try:
            channels = [c["name"] for c in srv.get("/api/robot")[1]["channels"]]
            for mode in modes:
                out[mode] = link.call_in("operator", asyncio.run, _link_client(srv, mode, seconds, channels, rate_hz))
        finally:
            srv.kill()
    return out


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q / 100 * len(v)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate-hz", type=float, default=20.0, help="the dashboard's subscription rate")
    ap.add_argument("--link", help="a linkemu profile: telemetry ages with a JPEG viewer running (root)")
    ap.add_argument("--no-pacing", action="store_true", help="with --link: the JPEG pacing off")
    args = ap.parse_args()
    if args.link:
        for pacing in ((False,) if args.no_pacing else (True,)):
            ages = ages_over_link(args.link, args.seconds, args.rate_hz, pacing)
            print(f"{args.link}, JPEG viewer (textured sim camera), pacing {'on' if pacing else 'off'}, "
                  f"{args.seconds:g} s per client")
            print("| telemetry client | snapshots | age p50 ms | p99 ms | max ms |")
            print("|---|---|---|---|---|")
            for mode, a in ages.items():
                ms = [x * 1e3 for x in a]
                print(f"| {mode} | {len(ms)} | {pct(ms, 50):.0f} | {pct(ms, 99):.0f} | {max(ms):.0f} |")
        return
    srv = start_server()
    try:
        _, robot = srv.get("/api/robot")
        channels = [c["name"] for c in robot["channels"]]
        results = asyncio.run(run(srv.ws_url, args.seconds, args.rate_hz, channels))
    finally:
        srv.kill()
    print(f"sim rover, {len(channels)} channels, {args.seconds:g} s driving; Mbit/s on the wire (payload + frame "
          "headers), rates over the server's snapshot stamps")
    print("| stream | msgs/s | bytes/msg | plain | permessage-deflate | msgpack | plain vs full |")
    print("|---|---|---|---|---|---|---|")
    ref = next(iter(results.values()))["plain"]
    for name, r in results.items():
        print(f"| {name} | {r['hz']:.1f} | {r['bytes']:.0f} | {r['plain']:.3f} | {r['deflate']:.3f} | "
              f"{r['msgpack']:.3f} | {r['plain'] / ref:.2f} |")


if __name__ == "__main__":
    main()
