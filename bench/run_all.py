"""Run every benchmark in bench/ and print their figures. ``--quick`` shortens each run.

``bench_link.py`` needs root, iproute2, nftables and ``/dev/net/tun`` (the link emulator); where they are
missing it prints ``bench_link: skipped: …`` with the reasons and exits 0, as the tests skip.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: benches that take every argument run_all gets (--quick, --only …), and those that take --quick alone
TAKE_ARGS = {"bench_server.py", "bench_core.py", "bench_attack.py", "bench_webrtc.py", "bench_mavlink.py"}
TAKE_QUICK = {"bench_reports.py", "bench_fleet.py", "bench_link.py"}
ORDER = ["bench_core.py", "bench_server.py", "bench_attack.py", "bench_sim.py", "bench_estimation.py", "bench_video.py", "bench_webrtc.py", "bench_link.py",
         "bench_dashboard.py"]


def main() -> int:
    args = sys.argv[1:]
    failed = []
    scripts = [HERE / n for n in ORDER if (HERE / n).exists()]
    scripts += sorted(p for p in HERE.glob("bench_*.py") if p.name not in ORDER)
    for script in scripts:
        print(f"\n######## {script.name}", flush=True)
        t0 = time.time()
        extra = args if script.name in TAKE_ARGS else [a for a in args if a == "--quick"] \
            if script.name in TAKE_QUICK else []
        rc = subprocess.call([sys.executable, str(script), *extra], cwd=HERE)
        print(f"######## {script.name}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
