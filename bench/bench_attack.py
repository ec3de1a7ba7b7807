"""What a legitimate operator sees during an attack, beside the same figures without it (figures, never
assertions; issue 18, "Done means" for items 3–5).

Run: ``.venv/bin/python bench/bench_attack.py [--quick] [--only slow_headers,viewer_sockets]``.

One real server (``python -m server``: the simulated rover, video and vision on, a users file at the
production argon2 cost, logged in), and in the same run, for "no attack" and then each attack in
:data:`ATTACKS` (the attacker in a process of its own, ``tests/server/attacks.py``), the operator's:

- **e-stop**: the operator (lease holder, rover driving) clicks ``POST /api/estop`` on a *new*
  connection with the dashboard's cookie; click → latched is the runtime's ``operator_estop`` event
  (``wall_t``) minus the click, click → answer the response; and how many got through;
- **telemetry age**: a dashboard's socket opened during the phase: receive time − the snapshot's own
  ``t`` (p50 / p99), and the longest gap between two snapshots;
- **login**: ``POST /api/auth/login`` on a new connection, to its 200 (one argon2 check);
- **streams**: whether that dashboard got its telemetry, video and overlay sockets.

Ratios are attack / no attack. An attack is an :class:`Attack` (``start(ctx)``, ``stop()``): add one to
:data:`ATTACKS`. ``reports`` (item 4) writes a 30-minute recording first (~10–20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from common import REPO, pct, start_server, wait_until  # noqa: F401 - REPO puts the repository on sys.path

from server.gateway.auth.users import UserStore  # noqa: E402
from tests.server.attacks import Attacker  # noqa: E402

PASSWORD = "correct horse battery"


@dataclass
class Ctx:
    """The running server and the people on it: cookie and CSRF token per user."""

    srv: Any
    creds: dict[str, tuple[str, str]] = field(default_factory=dict)
    requests: int = 0                                     # the operator's, on new connections
    failed: list[str] = field(default_factory=list)       # of those, dropped by the server
    estop_retried: int = 0                                # e-stops that needed a second or third click

    def headers(self, user: str, csrf: bool = False) -> dict[str, str]:
        cookie, token = self.creds[user]
        h = {"Cookie": cookie, "Origin": self.srv.url}
        if csrf:
            h["X-CSRF-Token"] = token
        return h


class Attack:
    name = "no attack"
    about = "the same server, nobody attacking"

    def start(self, ctx: Ctx) -> None:
        pass

    def stop(self) -> dict:
        return {}


class AttackerProcess(Attack):
    """An attacker of ``tests/server/attacks.py`` in its own process, in effect once it has tried ``ready`` connections."""

    attack = ""
    ready = 0

    def options(self, ctx: Ctx) -> dict[str, Any]:
        return {}

    def start(self, ctx: Ctx) -> None:
        self.proc = Attacker(self.attack, ctx.srv.port, **self.options(ctx)).__enter__()
        self.proc.wait_connects(self.ready, 60)

    def stop(self) -> dict:
        self.proc.__exit__(None, None, None)
        return self.proc.counts


class SlowHeaders(AttackerProcess):
    name = "slow headers"
    about = "300 slow-header sockets from 127.0.0.1, re-opened as soon as they close (item 3)"
    attack, ready = "slow_headers", 600

    def options(self, ctx: Ctx) -> dict[str, Any]:
        return {"sockets": 300}


class ViewerSockets(AttackerProcess):
    name = "viewer sockets"
    about = ("one viewer session: 100 telemetry, 100 video and 100 overlay sockets, held, the refused ones "
             "tried again every second (item 5)")
    attack, ready = "viewer_sockets", 300

    def options(self, ctx: Ctx) -> dict[str, Any]:
        return {"sockets": 100, "cookie": ctx.creds["vera"][0], "retry-s": 1.0}


#: the report attacker: a viewer's six report requests at once, each round on other bounds (no cached answer),
#: a new round as soon as the last answer came; what came back counted (printed as JSON when it is stopped)
REPORT_ATTACKER = r"""
import asyncio, json, signal, sys
import aiohttp
url, cookie, name = sys.argv[1:4]
counts = {}
async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    round_ = 0
    async with aiohttp.ClientSession(headers={"Cookie": cookie}, timeout=aiohttp.ClientTimeout(total=300)) as http:
        async def one(k):
            try:
                async with http.get(f"{url}/api/recordings/{name}/report?start_t={1.8e9 + round_ * 6 + k:.0f}") as r:
                    await r.read()
                    counts[str(r.status)] = counts.get(str(r.status), 0) + 1
                    if sum(counts.values()) == 1:
                        print("answered", flush=True)  # the pool is busy: the attack is in effect
            except (aiohttp.ClientError, asyncio.TimeoutError):
                counts["error"] = counts.get("error", 0) + 1
        while not stop.is_set():
            burst = asyncio.ensure_future(asyncio.gather(*(one(k) for k in range(6))))
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait([burst, stopper], return_when=asyncio.FIRST_COMPLETED)
            if not burst.done():  # stopped mid-round: its requests are abandoned
                burst.cancel()
                await asyncio.gather(burst, return_exceptions=True)
            stopper.cancel()
            round_ += 1
    print(json.dumps({"rounds": round_, **counts}), flush=True)
asyncio.run(main())
"""


class ReportRequests(Attack):
    name = "report requests"
    about = ("one viewer asks for six reports of a 30-minute recording at once, other bounds each round, a new "
             "round as soon as the answers came (item 4)")
    file = ""  # the recording's name, set by run()

    def start(self, ctx: Ctx) -> None:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-c", REPORT_ATTACKER, ctx.srv.url, ctx.creds["vera"][0],
                                      self.file], stdout=subprocess.PIPE, text=True)
        # in effect once the first answer came (a report made, or refused because the viewer's jobs are running)
        line = self.proc.stdout.readline()
        if line.strip() != "answered":
            raise RuntimeError(f"the report attacker did not start: {line!r}")

    def stop(self) -> dict:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=60)
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"attacker": f"exit {self.proc.returncode}"}


ATTACKS: dict[str, Attack] = {"slow_headers": SlowHeaders(), "viewer_sockets": ViewerSockets(),
                              "reports": ReportRequests()}


# ---------------------------------------------------------------------- what the operator does
def fresh() -> aiohttp.ClientSession:
    """A client that opens a new connection for every request (as a browser does after a while)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                 connector=aiohttp.TCPConnector(force_close=True),
                                 timeout=aiohttp.ClientTimeout(total=20))


async def call(ctx: Ctx, method: str, path: str, user: str | None = None, body: Any = None) -> tuple[int, Any]:
    """One request on a new connection; a connection the server drops counts in ``ctx.failed`` and is
    tried again (an operator clicks again), up to three times."""
    headers = ctx.headers(user, csrf=method != "GET") if user else {"Origin": ctx.srv.url}
    for attempt in range(3):
        ctx.requests += 1
        try:
            async with fresh() as http:
                async with http.request(method, ctx.srv.url + path, json=body, headers=headers) as resp:
                    return resp.status, await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError) as err:
            ctx.failed.append(f"{method} {path}: {type(err).__name__}")
    return 0, {}


async def login(ctx: Ctx, user: str) -> float:
    """Log ``user`` in (a new session, kept in ``ctx.creds``); returns how long it took (NaN: it failed)."""
    t0 = time.perf_counter()
    for attempt in range(3):
        ctx.requests += 1
        try:
            async with fresh() as http:
                async with http.post(ctx.srv.url + "/api/auth/login", json={"username": user, "password": PASSWORD},
                                     headers={"Origin": ctx.srv.url}) as resp:
                    body = await resp.json()
                    assert resp.status == 200, body
                    ctx.creds[user] = (f"teleop_session={resp.cookies['teleop_session'].value}", body["csrf_token"])
                    return time.perf_counter() - t0
        except (aiohttp.ClientError, asyncio.TimeoutError) as err:
            ctx.failed.append(f"login: {type(err).__name__}")
    return float("nan")


async def estop_trial(ctx: Ctx) -> tuple[float, float] | None:
    """Drive, then click the e-stop on a new connection: (click → answer, click → latched) in s, or None
    when the e-stop did not get through at the first click."""
    await call(ctx, "POST", "/api/reset", "otto", {})
    status, _ = await call(ctx, "POST", "/api/start", "otto", {})
    await call(ctx, "POST", "/api/speed", "otto", {"linear": 0.2, "angular": 0.0})
    failed_before = len(ctx.failed)
    click = time.time()
    status, body = await call(ctx, "POST", "/api/estop", "otto", {"reason": "bench"})
    answered = time.time() - click
    if status != 200 or body.get("state") != "estop":
        return None  # not even the third click
    if len(ctx.failed) > failed_before:
        ctx.estop_retried += 1
    _, events = await call(ctx, "GET", "/api/events?limit=50", "otto")
    latched = [e["wall_t"] for e in (events or {}).get("events", [])
               if e["trigger"] == "operator_estop" and e["wall_t"] > click]
    return answered, (min(latched) - click) if latched else float("nan")


async def dashboard(ctx: Ctx, out: dict[str, Any], stop: asyncio.Event) -> None:
    """The operator's dashboard, opened now: which sockets it gets (``out["streams"]``), then the telemetry
    ages and gaps (``out["ages"]``, ``out["gaps"]``) until ``stop`` is set; video frames are acked."""
    headers = ctx.headers("otto")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        sockets = {}
        for path in ("/ws/telemetry", "/ws/video", "/ws/vision"):
            try:
                sockets[path] = await http.ws_connect(ctx.srv.ws_url + path, headers=headers)
                out["streams"][path] = "open"
            except aiohttp.WSServerHandshakeError as err:
                out["streams"][path] = str(err.status)
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                out["streams"][path] = type(err).__name__

        async def read(path: str, ws: aiohttp.ClientWebSocketResponse) -> None:
            last = None
            while not stop.is_set() and not ws.closed:
                try:
                    msg = await asyncio.wait_for(ws.receive(), 0.5)
                except asyncio.TimeoutError:
                    continue
                now = time.time()
                if msg.type == aiohttp.WSMsgType.BINARY and path == "/ws/video":
                    n = int.from_bytes(msg.data[:4], "big")
                    await ws.send_str(json.dumps({"type": "ack", "seq": json.loads(msg.data[4:4 + n])["seq"]}))
                elif msg.type == aiohttp.WSMsgType.TEXT and path == "/ws/telemetry" \
                        and msg.data.startswith('{"type":"telemetry"'):
                    i = msg.data.find(',"t":', 0, 200)
                    out["ages"].append(now - float(msg.data[i + 5:msg.data.find(",", i + 5)]))
                    if last is not None:
                        out["gaps"].append(now - last)
                    last = now
                elif msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    break

        await asyncio.gather(*(read(p, ws) for p, ws in sockets.items()))
        for ws in sockets.values():
            await ws.close()


async def phase(ctx: Ctx, attack: Attack, trials: int, logins: int, settle_s: float) -> dict[str, Any]:
    """``attack`` in effect; the dashboard watching; ``trials`` e-stops, then ``logins`` logins."""
    attack.start(ctx)
    ctx.requests, ctx.failed, ctx.estop_retried = 0, [], 0
    dash: dict[str, Any] = {"ages": [], "gaps": [], "streams": {}}
    stop = asyncio.Event()
    try:
        watch = asyncio.create_task(dashboard(ctx, dash, stop))
        estops = [await estop_trial(ctx) for _ in range(trials)]
        login_s = [t for t in [await login(ctx, "olga") for _ in range(logins)] if t == t]
        await asyncio.sleep(settle_s)  # a stretch of telemetry with nothing else going on
        stop.set()
        await watch
    finally:
        counts = attack.stop()
    return {"estops": estops, "logins": login_s, "dash": dash, "counts": counts, "requests": ctx.requests,
            "failed": list(ctx.failed), "retried": ctx.estop_retried}


# ---------------------------------------------------------------------- the run
def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1e3:.1f}" if values else "—"


def ratio(a: list[float], b: list[float], q: float = 50) -> str:
    if not a or not b or pct(b, q) <= 0:
        return ""
    return f" (×{pct(a, q) / pct(b, q):.1f})"


def report(results: dict[str, dict[str, Any]]) -> None:
    names = list(results)
    base = results[names[0]]
    rows: list[tuple[str, list[str]]] = []

    def got(r: dict) -> list[tuple[float, float]]:
        return [e for e in r["estops"] if e is not None]

    def col(fn) -> list[str]:
        return [fn(results[n], n == names[0]) for n in names]

    rows.append(("e-stop on a new connection: at the 1st click", col(
        lambda r, _: f"{len(got(r)) - r['retried']}/{len(r['estops'])}")))
    rows.append(("  within 3 clicks", col(lambda r, _: f"{len(got(r))}/{len(r['estops'])}")))
    rows.append(("operator's requests dropped", col(lambda r, _: f"{len(r['failed'])}/{r['requests']}")))
    for label, idx in (("e-stop click → latched p50 / max ms", 1), ("e-stop click → answer p50 / max ms", 0)):
        def times(r: dict, i: int) -> list[float]:
            return [e[i] for e in got(r) if e[i] == e[i]]  # NaN: the event was not found

        rows.append((label, col(lambda r, b, i=idx: f"{ms(times(r, i), 50)} / {ms(times(r, i), 100)}"
                                + ("" if b else ratio(times(r, i), times(base, i))))))
    rows.append(("telemetry age p50 / p99 ms", col(lambda r, b: f"{ms(r['dash']['ages'], 50)} / {ms(r['dash']['ages'], 99)}"
                                                + ("" if b else ratio(r["dash"]["ages"], base["dash"]["ages"], 99)))))
    rows.append(("telemetry longest gap ms", col(lambda r, _: ms(r["dash"]["gaps"], 100))))
    rows.append(("snapshots received", col(lambda r, _: str(len(r["dash"]["ages"])))))
    rows.append(("login p50 / max ms", col(lambda r, b: f"{ms(r['logins'], 50)} / {ms(r['logins'], 100)}"
                                        + ("" if b else ratio(r["logins"], base["logins"])))))
    rows.append(("dashboard streams (telemetry, video, overlay)",
                 col(lambda r, _: ", ".join(r["dash"]["streams"].get(p, "—") for p in
                                            ("/ws/telemetry", "/ws/video", "/ws/vision")))))
    width = max(len(r[0]) for r in rows)
    colw = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    print("\n" + " " * width + "  " + "  ".join(n.ljust(w) for n, w in zip(names, colw)))
    for label, cells in rows:
        print(label.ljust(width) + "  " + "  ".join(c.ljust(w) for c, w in zip(cells, colw)))
    for n in names[1:]:
        print(f"  {n}: attacker counts {results[n]['counts']}")
    for n in names:
        if results[n]["failed"]:
            print(f"  {n}: dropped {dict(collections.Counter(results[n]['failed']))}")


def make_users(path: Path) -> None:
    store = UserStore(path)  # the production argon2 cost: a login costs what it costs
    for name, role in (("otto", "operator"), ("olga", "operator"), ("vera", "viewer"), ("ada", "admin")):
        store.add(name, role, PASSWORD)


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="teleop-bench-attack-"))
    make_users(tmp / "users.json")
    chosen = [a for a in ATTACKS if not args.only or a in args.only.split(",")]
    if "reports" in chosen:  # a finished 30-minute recording (10 with --quick) for the report attack
        from tests.server.gateway.recording.synthetic import write_long_recording

        ReportRequests.file = write_long_recording(tmp / "recordings", 600 if args.quick else 1800).name
    srv = start_server({"auth": {"users_file": str(tmp / "users.json")}, "server": {"state_dir": str(tmp / "state")},
                        "recording": {"dir": str(tmp / "recordings")},
                        "safety": {"command_timeout_s": 60},
                        "video": {"enabled": True, "width": 320, "height": 240, "fps": 10, "render_process": False},
                        "vision": {"enabled": True}})
    try:
        ctx = Ctx(srv)
        for user in ("otto", "vera", "ada"):
            await login(ctx, user)
        assert (await call(ctx, "POST", "/api/lease/take", "otto", {}))[0] == 200
        wait_until(lambda: srv.get("/api/vision", headers=ctx.headers("ada"))[1]["running"], 60, "vision running")
        trials, logins, settle_s = (4, 3, 2.0) if args.quick else (10, 5, 5.0)
        print(f"server pid {srv.proc.pid}; {trials} e-stops and {logins} logins per phase; attacks:")
        for key in chosen:
            print(f"  {ATTACKS[key].name}: {ATTACKS[key].about}")
        results: dict[str, dict[str, Any]] = {}
        for attack in [Attack(), *(ATTACKS[a] for a in chosen)]:
            print(f"-- {attack.name} …", flush=True)
            results[attack.name] = await phase(ctx, attack, trials, logins, settle_s)
            # let the server settle: the attacker's connections close, its slots free
            wait_until(lambda: srv.get("/api/telemetry", headers=ctx.headers("ada"))[1]["connections"]["connections"]
                       < 20, 60, "the attacker's connections gone")
        report(results)
    finally:
        srv.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(ATTACKS)}")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
