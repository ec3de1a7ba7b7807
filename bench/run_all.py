"""Run every benchmark in bench/ and print their figures. ``--quick`` shortens each run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["bench_core.py", "bench_server.py", "bench_sim.py", "bench_estimation.py", "bench_video.py", "bench_dashboard.py"]


def main() -> int:
    args = sys.argv[1:]
    failed = []
    scripts = [HERE / n for n in ORDER if (HERE / n).exists()]
    scripts += sorted(p for p in HERE.glob("bench_*.py") if p.name not in ORDER)
    for script in scripts:
        print(f"\n######## {script.name}", flush=True)
        t0 = time.time()
        extra = args if script.name in ("bench_server.py", "bench_core.py") else []
        rc = subprocess.call([sys.executable, str(script), *extra], cwd=HERE)
        print(f"######## {script.name}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
