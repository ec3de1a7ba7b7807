"""The live scheme's cost per telemetry frame in real Chromium (issue 13's benchmark), for the SCARA arm and the
Stewart platform.

Starts ``python -m server`` with each profile, opens the dashboard, starts the robot and keeps it moving (the
arm runs ``scara_demo``, the platform the ``yaw`` series, over and over), then prints:

- the scheme's own update per telemetry frame (scheme.js ``setState``: the transforms computed from the joint
  or pose channels and the attributes that changed set), from its ``performance.now()`` figures, and how many
  attributes a frame changes;
- the whole dashboard's render per animation frame and its message handling (main.js's figures), for scale;
- a peer, measured in the same page: one update done by changing ``transform`` attributes, against the same
  update done by rebuilding the scheme (parsing the SVG text and replacing the DOM), each followed by a forced
  layout (``getBoundingClientRect``) so the browser's own work is counted.

    .venv/bin/python bench/bench_arms_dashboard.py                  # 30 s per profile
    .venv/bin/python bench/bench_arms_dashboard.py --seconds 60 --profile stewart

Headless Chromium coarsens ``performance.now()`` to 100 µs, so one frame's figure is 0 or a multiple of 100 µs:
the mean (total over frames) is the figure to read; the peer loop times hundreds of updates at once.

Figures only; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_dashboard import ARGS, CHROMIUM, pct  # noqa: E402
from bench.common import TEST_DEFAULTS, ServerProc, deep_merge  # noqa: E402

import tomli_w  # noqa: E402
import tomllib  # noqa: E402

PROFILES = {"scara": ("config/scara-sim.toml", "scara_demo"), "stewart": ("config/stewart-sim.toml", "yaw")}

PEER = """([n]) => {
  const panel = window.teleopScheme;
  const svg = panel.svg;
  const host = svg.parentNode;
  const text = svg.outerHTML;
  const robot = window.teleop.session.robot;
  const scheme = robot.scheme;
  const ids = scheme.kind === 'stewart'
    ? [...svg.querySelectorAll('.leg, .platform')].map(e => e.id)
    : Object.keys(scheme.channels).map(k => 'body-' + k);
  const transforms = (i) => {             // n distinct configurations, as telemetry would bring them
    const s = Math.sin(i / 25), c = Math.cos(i / 40);
    const out = {};
    for (const [k, id] of ids.entries()) out[id] = `translate(${(k * 10).toFixed(3)} 0) rotate(${(30 * s + k * c).toFixed(3)})`;
    return out;
  };
  let t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const tr = transforms(i);
    for (const id of ids) svg.getElementById(id).setAttribute('transform', tr[id]);
    svg.getBoundingClientRect();
  }
  const attrs = (performance.now() - t0) / n;
  t0 = performance.now();
  let current = svg;
  for (let i = 0; i < n; i++) {
    const tr = transforms(i);
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    for (const id of ids) doc.getElementById(id).setAttribute('transform', tr[id]);
    const fresh = document.importNode(doc.documentElement, true);
    host.replaceChild(fresh, current);
    current = fresh;
    current.getBoundingClientRect();
  }
  const rebuild = (performance.now() - t0) / n;
  host.replaceChild(svg, current);
  return { attrs_ms: attrs, rebuild_ms: rebuild, elements: ids.length, svg_bytes: text.length };
}"""


def bench_profile(name: str, seconds: float) -> None:
    config, series = PROFILES[name]
    base = tomllib.loads((REPO / config).read_text())
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), {"safety": {"command_timeout_s": 60.0}})
    path = Path(f"/tmp/teleop-bench-arms-{name}.toml")
    path.write_text(tomli_w.dumps(cfg))
    srv = ServerProc(path).start()
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(srv.url + "/")
            page.wait_for_function("window.teleop && window.teleop.session.connected && window.teleopScheme "
                                   "&& window.teleopScheme.svg", timeout=30000)
            srv.post("/api/start")
            page.wait_for_function("window.teleop.session.latest && window.teleop.session.latest.state === 'running'")
            srv.post("/api/trajectory", {"series": series})
            time.sleep(2.0)  # past the approach
            page.evaluate("() => { window.teleopScheme.stats.reset(); window.teleop.stats.reset(); }")
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                time.sleep(0.5)
                run = srv.get("/api/trajectory")[1]["run"]
                if run and run["phase"] in ("done", "cancelled", "failed"):
                    srv.post("/api/trajectory", {"series": series})
            elapsed = time.monotonic() - t0
            scheme = page.evaluate("window.teleopScheme.stats.snapshot()")
            main = page.evaluate("window.teleop.stats.snapshot()")
            targets = page.evaluate("window.teleopScheme.targets")
            peer = page.evaluate(PEER, [300])
            browser.close()
    finally:
        srv.stop()
    ms = scheme["ms"]
    print(f"\n{name}: {targets} animated elements, {elapsed:.0f} s moving ({series}), "
          f"{main['messages'] / elapsed:.1f} telemetry messages/s, {main['renders'] / elapsed:.1f} renders/s")
    mean_us = scheme["totalMs"] / max(1, scheme["updates"]) * 1e3
    print(f"  scheme update per frame: mean {mean_us:.0f} µs, p99 {pct(ms, 99) * 1e3:.0f} µs, "
          f"max {max(ms) * 1e3 if ms else float('nan'):.0f} µs over {scheme['updates']} frames; "
          f"{scheme['changed'] / max(1, scheme['updates']):.1f} attributes changed per frame")
    print(f"  whole dashboard render:  p50 {pct(main['renderMs'], 50):.2f} ms, p99 {pct(main['renderMs'], 99):.2f} ms; "
          f"message handling p50 {pct(main['handleMs'], 50) * 1e3:.0f} µs")
    print(f"  peer, per update incl. a forced layout: transforms {peer['attrs_ms'] * 1e3:.0f} µs vs rebuilding the "
          f"{peer['svg_bytes'] / 1024:.1f} kB scheme {peer['rebuild_ms'] * 1e3:.0f} µs "
          f"({peer['rebuild_ms'] / max(peer['attrs_ms'], 1e-9):.0f}×)")
    if errors:
        print(f"  page errors: {errors}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="moving time per profile (default 30)")
    ap.add_argument("--profile", choices=[*PROFILES, "both"], default="both")
    args = ap.parse_args()
    for name in PROFILES if args.profile == "both" else [args.profile]:
        bench_profile(name, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
