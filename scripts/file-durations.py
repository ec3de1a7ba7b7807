"""Per-file wall seconds of a suite run, for tests/file-durations.txt (the order the workers take the files in).

    TELEOP_TEST_CPU=/tmp/tests.tsv make test
    python scripts/file-durations.py /tmp/tests.tsv > tests/file-durations.txt

The log is the one ``TELEOP_TEST_CPU`` makes tests/conftest.py write: a line a test, its node id and wall
seconds first. Files of under a second are left out (they keep their collection order, after these).
"""

from __future__ import annotations

import collections
import sys


def main(path: str) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    with open(path, encoding="utf-8") as log:
        for line in log:
            node_id, wall = line.split("\t")[:2]
            seconds[node_id.split("::")[0]] += float(wall)
    print("# wall seconds of each test file in one `make test` run, slowest first: the workers take the files in")
    print("# this order (tests/conftest.py), the long ones first, so no worker is left with one at the end.")
    print("# Refresh: scripts/file-durations.py (its docstring). A file not listed runs after these.")
    for name, secs in seconds.most_common():
        if secs >= 1.0:
            print(f"{secs:7.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
