"""Attackers for the tests and ``bench/bench_attack.py``, each in a process of its own (so the client
that measures is not slowed by the attacker's own event loop), started and stopped by its pid.

- ``slow_headers``: N sockets that each send a request's first bytes, then one more byte a second
  and never the end of the headers, re-opened as soon as the server closes or refuses them (issue 18,
  item 3: 300 of them made 198 of 199 new connections fail for 40 s);
- ``viewer_sockets``: one logged-in session (``--cookie``) opening N telemetry, video and overlay
  sockets, holding (and reading) what it gets and trying again for the rest (item 5: 100 of them gave
  the operators' dashboards 503 ``busy``).

Run one by hand: ``python -m tests.server.attacks slow_headers --port 8080 --sockets 300``. It prints
a JSON line of counts (connects, closed by the server, failed connects) twice a second, and once more
on SIGTERM, and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


async def slow_headers(args: argparse.Namespace, counts: dict[str, int], stop: asyncio.Event) -> None:
    host, port = args.host, args.port
    head = f"GET /api/state HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode()

    async def one() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                counts["failed"] += 1
                await asyncio.sleep(0)
                continue
            counts["connects"] += 1
            try:
                writer.write(head)
                while not stop.is_set():
                    try:
                        data = await asyncio.wait_for(reader.read(4096), 1.0)
                    except asyncio.TimeoutError:
                        writer.write(b"a")  # one more byte of a header that never ends
                        continue
                    if not data:
                        break
                counts["closed"] += 1
            except OSError:
                counts["closed"] += 1
            finally:
                writer.close()

    await asyncio.gather(*(one() for _ in range(args.sockets)))


async def viewer_sockets(args: argparse.Namespace, counts: dict[str, int], stop: asyncio.Event) -> None:
    """``--sockets`` sockets on each of ``--paths`` with one session's ``--cookie``, each read all the time
    (a video frame acked), and tried again ``--retry-s`` after a refusal or a close: it takes any slot that
    frees (at 0.1 s, 284 refused sockets are also a flood of 2,800 upgrade requests a second)."""
    import aiohttp

    origin = f"http://{args.host}:{args.port}"
    headers = {"Cookie": args.cookie, "Origin": origin}

    async def one(http: aiohttp.ClientSession, path: str) -> None:
        while not stop.is_set():
            counts["connects"] += 1
            try:
                ws = await http.ws_connect(origin + path, headers=headers, autoping=True)
            except aiohttp.WSServerHandshakeError:
                counts["refused"] += 1
                await asyncio.sleep(args.retry_s)
                continue
            except (aiohttp.ClientError, OSError):
                counts["failed"] += 1
                await asyncio.sleep(args.retry_s)
                continue
            counts["held"] += 1
            counts["held_max"] = max(counts["held_max"], counts["held"])
            try:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY and path == "/ws/video":
                        n = int.from_bytes(msg.data[:4], "big")
                        await ws.send_str(json.dumps({"type": "ack", "seq": json.loads(msg.data[4:4 + n])["seq"]}))
            except (aiohttp.ClientError, OSError, ValueError):
                pass
            finally:
                counts["held"] -= 1
                counts["closed"] += 1
                await ws.close()
            await asyncio.sleep(args.retry_s)

    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                     connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.gather(*(one(http, p) for p in args.paths.split(",") for _ in range(args.sockets)))


ATTACKS = {"slow_headers": slow_headers, "viewer_sockets": viewer_sockets}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.server.attacks")
    p.add_argument("attack", choices=sorted(ATTACKS))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sockets", type=int, default=300, help="sockets (viewer_sockets: per path)")
    p.add_argument("--cookie", default="", help="viewer_sockets: the session's Cookie header")
    p.add_argument("--paths", default="/ws/telemetry,/ws/video,/ws/vision", help="viewer_sockets: where")
    p.add_argument("--retry-s", type=float, default=1.0, help="viewer_sockets: wait before trying a socket again")
    args = p.parse_args(argv)
    counts = {"connects": 0, "closed": 0, "failed": 0, "refused": 0, "held": 0, "held_max": 0}

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        task = asyncio.create_task(ATTACKS[args.attack](args, counts, stop))
        print("attacking", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
                print(json.dumps(counts), flush=True)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    print(json.dumps(counts), flush=True)
    return 0


class Attacker:
    """``with Attacker("slow_headers", port, sockets=300) as a:`` … ``a.counts`` (the latest, and the final
    ones after the block); ``a.wait_connects(n)`` until it has opened ``n`` connections."""

    def __init__(self, attack: str, port: int, **options: Any) -> None:
        self.args = [sys.executable, "-m", "tests.server.attacks", attack, "--port", str(port)]
        for key, value in options.items():
            self.args += [f"--{key}", str(value)]
        self.proc: subprocess.Popen | None = None
        self.counts: dict[str, int] = {}

    def __enter__(self) -> "Attacker":
        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "attacking", line
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        return self

    def _read(self, stream) -> None:
        for line in stream:
            try:
                self.counts = json.loads(line)
            except ValueError:
                pass

    def wait_connects(self, n: int, timeout_s: float = 30.0) -> None:
        """Until the attacker has tried ``n`` connections (or sockets)."""
        deadline = time.monotonic() + timeout_s
        while self.counts.get("connects", 0) < n:
            assert time.monotonic() < deadline, f"the attacker opened only {self.counts} in {timeout_s} s"
            assert self.proc is not None and self.proc.poll() is None, "the attacker died"
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)


if __name__ == "__main__":
    sys.exit(main())
