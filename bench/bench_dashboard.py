"""Dashboard cost in real Chromium at the configured telemetry rate (50 Hz by default).

Starts ``python -m server`` (or uses ``--url``), opens the dashboard with every
widget on screen, starts the rover and spins it in place (so dials, bars and plots
keep changing), then prints, once a minute:

- main-thread time per telemetry message (JSON parse → plots' buffers) and per
  render (one requestAnimationFrame applying the latest snapshot to every panel),
  from the page's own ``performance.measure`` figures (``window.teleop.stats``);
- frames per second (requestAnimationFrame count) and messages per second;
- long tasks (> 50 ms) seen by a PerformanceObserver;
- JS heap: ``performance.memory.usedJSHeapSize`` (``--enable-precise-memory-info``)
  as sampled, and after a forced GC (CDP ``HeapProfiler.collectGarbage``), at
  1 minute and at the end, to show growth.

    .venv/bin/python bench/bench_dashboard.py                 # 10 minutes
    .venv/bin/python bench/bench_dashboard.py --minutes 2     # or TELEOP_BENCH_MINUTES=2
    .venv/bin/python bench/bench_dashboard.py --no-drive --url http://127.0.0.1:8080

Figures only; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("TELEOP_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-precise-memory-info",
]


def start_server(config: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "server", "--config", config, "--port", "0", "--log-level", "WARNING"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "teleop listening on http://" in line and not ready.is_set():
                found["url"] = line.strip().rsplit(" ", 1)[1]
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(30) or proc.poll() is not None:
        proc.kill()
        raise SystemExit("server did not start")
    return proc, found["url"]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


READ_WINDOW = """() => {
  const s = window.teleop.stats.snapshot();
  const out = { ...s, heap: performance.memory ? performance.memory.usedJSHeapSize : null,
                longTasks: window.__longTasks || 0, longTaskMs: window.__longTaskMs || 0,
                state: window.teleop.session.latest && window.teleop.session.latest.state,
                cause: window.teleop.session.latest && window.teleop.session.latest.cause
                  && window.teleop.session.latest.cause.trigger,
                dropped: window.teleop.session.dropped.total };
  window.teleop.stats.reset();
  window.__longTasks = 0; window.__longTaskMs = 0;
  return out;
}"""

LONGTASKS = """() => {
  window.__longTasks = 0; window.__longTaskMs = 0;
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) { window.__longTasks += 1; window.__longTaskMs += e.duration; }
    }).observe({ type: "longtask", buffered: false });
  } catch (e) { /* not supported */ }
}"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("TELEOP_BENCH_MINUTES", 10)),
                    help="streaming time in minutes (default 10, or $TELEOP_BENCH_MINUTES)")
    ap.add_argument("--config", default="config/rover-sim.toml")
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("--no-drive", action="store_true", help="leave the robot idle (values change by noise only)")
    ap.add_argument("--width", type=int, default=1600)
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    proc = None
    url = args.url
    if not url:
        proc, url = start_server(args.config)
    url = url.rstrip("/")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": args.width, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url + "/")
            page.wait_for_function("window.teleop && window.teleop.session.connected", timeout=20000)
            # every widget on screen: make the viewport as tall as the page
            height = page.evaluate("document.documentElement.scrollHeight")
            page.set_viewport_size({"width": args.width, "height": height})
            page.evaluate(LONGTASKS)
            cdp = page.context.new_cdp_session(page)
            robot = page.evaluate("window.teleop.session.robot")
            n_channels = len(robot.get("channels", []))
            n_gauges = page.locator(".gauge").count()
            n_plots = page.locator(".plot").count()
            print(f"dashboard {url}: {n_channels} channels, {n_gauges} gauges, {n_plots} plots, "
                  f"telemetry {robot.get('telemetry_rate_hz')} Hz, "
                  f"video {'on' if (robot.get('video') or {}).get('enabled') else 'off'}, viewport {args.width}x{height}, "
                  f"{args.minutes:g} min{'' if args.no_drive else ', spinning in place'}")
            estops: list[str] = []

            def drive() -> None:
                """Start and hold ArrowLeft: the rover spins in place (20 Hz speed + 10 Hz heartbeats)."""
                page.keyboard.up("ArrowLeft")
                if page.evaluate("window.teleop.session.latest.state") in ("estop", "fault"):
                    page.evaluate("fetch('/api/reset', {method: 'POST'})")
                    page.wait_for_function("window.teleop.session.latest.state === 'idle'", timeout=10000)
                page.wait_for_function("!document.querySelector('#btn-start').disabled", timeout=10000)
                page.click("#btn-start")
                page.wait_for_function("window.teleop.session.latest.state === 'running'", timeout=5000)
                page.locator("#joystick").focus()
                page.keyboard.down("ArrowLeft")

            if not args.no_drive:
                drive()

            cdp.send("Performance.enable")

            def cpu_s() -> tuple[float, float]:
                m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
                return m.get("ThreadTime", 0.0), m.get("ProcessTime", 0.0)

            page.evaluate(READ_WINDOW)  # discard start-up figures
            cpu_prev = cpu_s()
            print("Per telemetry message, in ms: 'handle' = the message handler (parse, plot buffers); 'render' = "
                  "one frame's setState on every panel incl. uPlot drawing; 'main' = CPU time of the renderer's "
                  "main thread (script, style, layout, paint; CDP ThreadTime); 'proc' = CPU time of the whole "
                  "renderer process. The page clock is coarsened to 0.1 ms, so means say more than medians. "
                  "fps = requestAnimationFrame callbacks over the last 5 s of each minute.")
            print(f"{'min':>4} {'msg/s':>6} {'fps':>5} {'handle mean/p99':>16} {'render mean/p99/max':>20} "
                  f"{'main/msg':>8} {'main %':>6} {'proc %':>6} {'long':>5} {'heap MB':>8} {'dropped':>7} state")
            heap_1min = heap_1min_gc = None
            t_start = time.monotonic()
            minute = 0
            total_minutes = max(1, int(round(args.minutes)))
            while minute < total_minutes:
                minute += 1
                deadline = t_start + 60 * minute
                while time.monotonic() < deadline - 5:
                    page.wait_for_timeout(min(1000, max(1, (deadline - 5 - time.monotonic()) * 1000)))
                    if not args.no_drive and page.evaluate("window.teleop.session.latest.state") != "running":
                        # e.g. a link-loss stop when the machine stalls the page for > 0.5 s: note it, go on
                        estops.append(page.evaluate("(window.teleop.session.latest.cause || {}).trigger || "
                                                    "window.teleop.session.latest.state"))
                        drive()
                fps = page.evaluate("window.teleop.stats.measureFps(5000)")
                w = page.evaluate(READ_WINDOW)
                cpu_now = cpu_s()
                main_ms = (cpu_now[0] - cpu_prev[0]) * 1000
                proc_ms = (cpu_now[1] - cpu_prev[1]) * 1000
                cpu_prev = cpu_now
                secs = 60.0
                n_msg = max(1, w["messages"])
                n_render = max(1, w["renders"])
                print(f"{minute:>4} {w['messages'] / secs:>6.1f} {fps:>5.1f} "
                      f"{w['handleTotalMs'] / n_msg:>7.3f} / {pct(w['handleMs'], 99):>6.2f} "
                      f"{w['renderTotalMs'] / n_render:>7.3f} / {pct(w['renderMs'], 99):>4.1f} / "
                      f"{max(w['renderMs'] or [0]):>4.1f} "
                      f"{main_ms / n_msg:>8.3f} {main_ms / (secs * 10):>6.2f} {proc_ms / (secs * 10):>6.2f} "
                      f"{w['longTasks']:>5} "
                      f"{w['heap'] / 1e6:>8.2f} {w['dropped']:>7} {w['state']}",
                      flush=True)
                if minute == 1:
                    heap_1min = w["heap"]
                    cdp.send("HeapProfiler.collectGarbage")
                    heap_1min_gc = page.evaluate("performance.memory.usedJSHeapSize")
            heap_end = page.evaluate("performance.memory.usedJSHeapSize")
            cdp.send("HeapProfiler.collectGarbage")
            heap_end_gc = page.evaluate("performance.memory.usedJSHeapSize")
            if not args.no_drive:
                page.keyboard.up("ArrowLeft")
                if page.locator("#btn-stop").is_enabled():
                    page.click("#btn-stop")
            print()
            if estops:
                print(f"the rover stopped {len(estops)} time(s) during the run ({', '.join(estops)}); "
                      "the bench reset and restarted it each time")
            print(f"JS heap used: after 1 min {heap_1min / 1e6:.2f} MB (after GC {heap_1min_gc / 1e6:.2f} MB); "
                  f"after {total_minutes} min {heap_end / 1e6:.2f} MB (after GC {heap_end_gc / 1e6:.2f} MB); "
                  f"growth after GC {(heap_end_gc - heap_1min_gc) / 1e6:+.2f} MB")
            if errors:
                print(f"page errors: {errors[:5]}")
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
