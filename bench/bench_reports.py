"""Run reports and CSV exports on a 30-minute recording, and what a legitimate operator sees while a
viewer asks for six of them at once (issue 18, item 4). Figures, never assertions.

Run: ``.venv/bin/python bench/bench_reports.py [--quick] [--baseline DIR] [--only 1,2]``.

1. Offline, in a child process per figure: report (JSON without plots, and the HTML page with
   plots) and CSV (4 columns, every channel) of a synthetic 30-min recording (90,000 snapshots of
   the real rover's shape, ``tests/server/gateway/recording/synthetic.py``): wall time and the
   child's peak RSS.
2. The real server (launcher, runtime, gateway; users with the production argon2 cost): an
   operator holding the lease drives (start, heartbeats at 10 Hz over ``/ws/telemetry``, a ping
   after each heartbeat: its round trip is the heartbeat's), another user logs in once a second,
   and the gateway's RSS (and its report workers') is sampled. Phases in one run: quiet; a viewer
   sends six identical parallel ``GET …/report``; three viewers send two different reports each
   (six distinct jobs). Per phase: heartbeat round trip p50/p99/max, the runtime's largest link age,
   link-loss stops, login time p50/max and failures, report answers (status counts, slowest), RSS.

``--baseline DIR`` runs the same against another checkout (e.g. ``git archive <main> | tar -x -C DIR``):
old and new side by side, same machine, same load. With ``--pool thread`` the new tree runs its
reports in threads instead of processes (``[recording] report_pool``), to compare the two.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

import tests.conftest as conftest  # noqa: E402
from common import pct, start_server  # noqa: E402
from server.gateway.auth.users import UserStore  # noqa: E402
from tests.server.gateway.auth.client import PASSWORD, Client  # noqa: E402
from tests.server.gateway.recording.synthetic import write_long_recording  # noqa: E402

USERS = {"olga": "operator", "otto": "operator", "vera": "viewer", "vince": "viewer", "val": "viewer", "ada": "admin"}

OFFLINE = r"""
import json, sys, time, io
sys.path.insert(0, sys.argv[1])
from server.gateway.recording import Recording
from server.gateway.reports import report_html, run_report
path, what = sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if what == "report":
    size = len(json.dumps(run_report(path, plots=False)))
elif what == "report.html":
    size = len(report_html(run_report(path, plots=True)))
else:
    with Recording(path) as rec:
        cols = ["battery_v", "linear_m_s", "angular_rad_s", "state"] if what == "csv4" else rec.channel_names()
        out = io.StringIO()
        rec.export_csv(out, cols)
        size = len(out.getvalue())
# VmHWM: this process's own peak (ru_maxrss would include the parent's RSS at the fork)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"s": time.perf_counter() - t0, "rss_mb": hwm / 1024, "bytes": size}))
"""


def offline(tree: Path, path: Path) -> dict[str, dict]:
    out = {}
    for what in ("report", "report.html", "csv4", "csv_all"):
        res = subprocess.run([sys.executable, "-c", OFFLINE, str(tree), str(path), what], capture_output=True,
                             text=True, cwd=tree)
        out[what] = json.loads(res.stdout) if res.returncode == 0 else {"error": res.stderr[-300:]}
    return out


# ---------------------------------------------------------------------- the real server
@contextlib.contextmanager
def server_from(tree: Path, overrides: dict):
    """``python -m server`` with ``tree`` as its working directory (so its code is what runs)."""
    saved = conftest.REPO
    conftest.REPO = tree
    try:
        srv = start_server(overrides)
    finally:
        conftest.REPO = saved
    try:
        yield srv
    except BaseException:
        print("".join(srv.output[-30:]), file=sys.stderr)
        raise
    finally:
        srv.kill()


def descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def gateway_pid(srv) -> int:
    for pid in descendants(srv.proc.pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 2 and cmd[1] == b"-m" and cmd[2].endswith(b"gateway"):
            return pid
    raise RuntimeError("no gateway process")


class Operator:
    """The lease holder's dashboard: heartbeats at 10 Hz, each followed by a ping whose pong times it."""

    def __init__(self, client: Client, creds) -> None:
        self.client, self.creds = client, creds
        self.rtts: list[float] = []
        self.link_ages: list[float] = []
        self.stops: list[str] = []
        self.drops: list[str] = []
        self.ws = None

    async def open(self) -> None:
        self.ws = await self.client.ws(self.creds)
        assert not isinstance(self.ws, int), self.ws

    async def start(self) -> None:
        """Start the robot (resetting a latched stop first); the heartbeats follow at once."""
        for _ in range(4):
            try:
                reply = await Client.ws_call(self.ws, "start", timeout_s=15)
            except AssertionError as err:  # the socket ended meanwhile: counted, reopened
                self.drops.append(f"{err} (close code {self.ws.close_code})")
                await self.open()
                continue
            code = reply["error"]["code"] if reply["type"] == "error" else None
            if code == "lease_required":  # a link loss ended the lease
                status, body, _ = await self.client.request("POST", "/api/lease/take", self.creds, json_body={})
                assert status == 200, body
            elif code is not None:  # latched (estop_latched, conflict): reset first
                await Client.ws_call(self.ws, "reset", timeout_s=15)
            else:
                break
        assert reply["type"] == "ack", reply

    async def run(self, over: asyncio.Event) -> None:
        self.rtts, self.link_ages, self.stops, self.drops = [], [], [], []
        if self.ws.closed:
            await self.open()
        await self.start()
        drops_at_start = len(self.drops)
        sent: dict[int, float] = {}
        seq = 0

        async def send() -> None:
            nonlocal seq
            while not over.is_set() and len(self.drops) == drops_at_start:
                seq += 1
                sent[seq] = time.monotonic()
                try:
                    await self.ws.send_str('{"type":"heartbeat"}')
                    await self.ws.send_str(json.dumps({"type": "ping", "id": f"p{seq}", "t": seq}))
                except ConnectionError:
                    return
                await asyncio.sleep(0.1)

        async def receive() -> None:
            while not over.is_set():
                try:
                    msg = await asyncio.wait_for(self.ws.receive(), 2)
                except asyncio.TimeoutError:
                    if over.is_set():
                        return
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:  # the socket ended: counted, reopened next phase
                    self.drops.append(f"{msg.type.name} {msg.data!r} (close code {self.ws.close_code})")
                    return
                data = msg.data
                if data.startswith('{"type":"pong"'):
                    t = json.loads(data).get("t")
                    if t in sent:
                        self.rtts.append(time.monotonic() - sent.pop(t))
                elif data.startswith('{"type":"telemetry"'):
                    i = data.find('"link":{"age_s":')
                    if i >= 0:
                        j = data.find(",", i + 16)
                        with contextlib.suppress(ValueError):
                            self.link_ages.append(float(data[i + 16:j]))
                elif data.startswith('{"type":"event"'):
                    ev = json.loads(data)["data"]
                    if ev.get("state_before") == "running" and ev.get("trigger") != "operator":
                        self.stops.append(ev.get("trigger"))

        await asyncio.gather(send(), receive())


async def login_prober(client: Client, over: asyncio.Event, times: list[float], failures: list[str]) -> None:
    while not over.is_set():
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(15):
                status, body, _ = await client.request("POST", "/api/auth/login",
                                                       json_body={"username": "otto", "password": PASSWORD,
                                                                  "bearer": True})
            if status == 200:
                times.append(time.monotonic() - t0)
            else:
                failures.append(str(status))
        except TimeoutError:
            failures.append("timeout")
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))


async def report_burst(client: Client, tokens: list, file: str, distinct: bool) -> dict:
    """Six report requests at once: from one viewer (identical) or from three (two different each)."""
    queries = []
    for k in range(6):
        creds = tokens[0] if not distinct else tokens[k % len(tokens)]
        q = "" if not distinct else f"?start_t={1.8e9 + k:.0f}"
        queries.append((creds, f"/api/recordings/{file}/report{q}"))
    t0 = time.monotonic()

    async def one(creds, path):
        try:
            async with asyncio.timeout(300):
                status, body, resp = await client.request("GET", path, creds)
            return status, time.monotonic() - t0, resp.headers.get("Retry-After")
        except TimeoutError:
            return "timeout", time.monotonic() - t0, None

    results = await asyncio.gather(*(one(c, p) for c, p in queries))
    counts: dict[str, int] = {}
    for status, _s, _ra in results:
        counts[str(status)] = counts.get(str(status), 0) + 1
    return {"counts": counts, "slowest_s": max(s for _st, s, _ra in results),
            "ok_slowest_s": max([s for st, s, _ra in results if st == 200] or [float("nan")]),
            "retry_after": sorted({ra for _st, _s, ra in results if ra})}


async def scenario(srv, file: str, quick: bool) -> list[dict]:
    http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
    client = Client(srv.url, http)
    try:
        olga = await client.login("olga")
        status, body, _ = await client.request("POST", "/api/lease/take", olga, json_body={})
        assert status == 200, body
        viewers = [await client.login(v, bearer=True) for v in ("vera", "vince", "val")]
        op = Operator(client, olga)
        await op.open()
        gw = gateway_pid(srv)
        phases = []
        for name, attack in (("quiet", None), ("6 identical reports, 1 viewer", "same"),
                             ("6 different reports, 3 viewers", "distinct"), ("quiet after", None)):
            seconds = 8.0 if quick else 15.0
            logins: list[float] = []
            failures: list[str] = []
            rss: list[float] = []
            over = asyncio.Event()

            def total_rss() -> tuple[float, float]:  # with its report workers, alone (a /proc scan: off this loop)
                alone = rss_mb(gw)
                return alone + sum(rss_mb(p) for p in descendants(gw)), alone

            async def sample_rss() -> None:
                while not over.is_set():
                    rss.append(await asyncio.to_thread(total_rss))
                    await asyncio.sleep(0.5)

            burst = None

            async def phase() -> None:  # at least ``seconds``, and until every report was answered
                nonlocal burst
                await asyncio.sleep(1.0)
                if attack is not None:
                    burst = await report_burst(client, viewers, file, attack == "distinct")
                await asyncio.sleep(max(0.0, seconds - 1.0 - (burst or {}).get("slowest_s", 0.0)))
                over.set()

            await asyncio.gather(op.run(over), login_prober(client, over, logins, failures), sample_rss(), phase())
            phases.append({"phase": name, "rtt": list(op.rtts), "link_age_max_s": max(op.link_ages or [0]),
                           "stops": list(op.stops), "drops": list(op.drops), "logins": logins, "login_failures": failures,
                           "rss_peak_mb": max([r[0] for r in rss] or [0]), "rss_end_mb": rss[-1][0] if rss else 0,
                           "gw_peak_mb": max([r[1] for r in rss] or [0]), "gw_end_mb": rss[-1][1] if rss else 0,
                           "burst": burst})
        return phases
    finally:
        await http.close()


def print_phases(label: str, phases: list[dict]) -> None:
    print(f"\n  {label}")
    print(f"  {'phase':<32} {'heartbeat rtt p50/p99/max ms':>30} {'link age max':>12} {'stops':>6} {'drops':>6} "
          f"{'login p50/max s':>16} {'fail':>5} {'RSS peak/end MB (gateway alone)':>32}  reports")
    for p in phases:
        r = [x * 1e3 for x in p["rtt"]]
        rtt = f"{pct(r, 50):.1f} / {pct(r, 99):.1f} / {max(r or [float('nan')]):.0f}"
        lg = f"{pct(p['logins'], 50):.2f} / {max(p['logins'] or [float('nan')]):.2f}"
        b = p["burst"]
        rep = "" if b is None else (f"{b['counts']} slowest {b['slowest_s']:.1f} s"
                                    + (f", Retry-After {','.join(b['retry_after'])}" if b["retry_after"] else ""))
        print(f"  {p['phase']:<32} {rtt:>30} {p['link_age_max_s']:>10.3f} s {','.join(p['stops']) or '0':>6} {len(p['drops']):>6} {lg:>16} "
              f"{len(p['login_failures']):>5} {p['rss_peak_mb']:>7.0f} / {p['rss_end_mb']:<4.0f} ({p['gw_peak_mb']:.0f} / "
              f"{p['gw_end_mb']:.0f}){'':>8}  {rep}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--baseline", type=Path, help="another checkout to run side by side (the old code)")
    ap.add_argument("--only", default="1,2")
    ap.add_argument("--pool", choices=["process", "thread", "both", "none"], default="both",
                    help="the new tree's report pool (both: one server run each)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="teleop-bench-reports-"))
    minutes = 10 if args.quick else 30
    rec_dir = tmp / "recordings"
    t0 = time.perf_counter()
    path = write_long_recording(rec_dir, minutes * 60)
    print(f"recording: {path.name}, {minutes} min, {path.stat().st_size / 1e6:.1f} MB "
          f"({minutes * 60 * 50:,} snapshots), written in {time.perf_counter() - t0:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}")
    trees = [("new", REPO)] + ([("old", args.baseline.resolve())] if args.baseline else [])
    if "1" in only:
        print("\n1. Offline (a child process per figure): wall time, peak RSS of the child")
        for label, tree in trees:
            for what, r in offline(tree, path).items():
                if "error" in r:
                    print(f"  {label:<4} {what:<12} error: {r['error']}")
                else:
                    print(f"  {label:<4} {what:<12} {r['s']:6.2f} s  {r['rss_mb']:6.0f} MB  {r['bytes'] / 1e6:6.2f} MB out")
    if "2" in only:
        print("\n2. The real server: what the lease holder sees during report requests (same run per tree)")
        users = tmp / "users.json"
        store = UserStore(users)  # the production argon2 cost: a login costs what it costs in the field
        for name, role in USERS.items():
            store.add(name, role, PASSWORD)
        runs = []
        for label, tree in trees:
            pools = ["process", "thread"] if label == "new" and args.pool == "both" else \
                [args.pool if args.pool != "none" else None] if label == "new" else [None]
            for pool in pools:
                rec_cfg = {"dir": str(rec_dir)} | ({"report_pool": pool} if pool else {})
                overrides = {"auth": {"users_file": str(users)}, "recording": rec_cfg,
                             "server": {"state_dir": str(tmp / "state")}}
                with server_from(tree, overrides) as srv:
                    phases = asyncio.run(scenario(srv, path.name, args.quick))
                runs.append((f"{label}" + (f" ({pool} pool)" if pool else ""), phases))
        for label, phases in runs:
            print_phases(label, phases)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
