"""The one JSON body parser's cost, side by side with its peer (figures, never assertions).

Run: ``.venv/bin/python bench/bench_parse.py``.

``server.validation.parse_object`` refuses an object with a key twice (issue 18, item 8); its peer here is
the same decode without that check (``msgspec.json.Decoder().decode``, which keeps the last key, as the
gateway did before). Bodies: a websocket command, a 16 KiB-class body of 400 keys, a UWB calibration's pairs,
a list of 200 objects (key strings repeat: the slower exact path), a 100 000-point trajectory (parsed in a
worker thread by the gateway). Each figure is the best of 5 runs.
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from server.validation import parse_object  # noqa: E402


def bodies() -> list[tuple[str, bytes, int]]:
    n = 100_000
    return [
        ("command (60 B)", b'{"type":"speed","linear":0.1,"angular":0.0,"id":7}', 20_000),
        ("400 keys (6.5 kB)", json.dumps({f"key{i}": i * 0.5 for i in range(400)}).encode(), 2000),
        ("1000 pairs (12 kB)", json.dumps({"pairs": [[1.0, 2.0]] * 1000, "degree": 2}).encode(), 2000),
        ("200 objects (7 kB)", json.dumps({"markers": [{"id": i, "x_m": 1.0, "y_m": 2.0}
                                                       for i in range(200)]}).encode(), 500),
        ("trajectory (2.7 MB)", json.dumps({"trajectory": {"t_s": [i * 0.01 for i in range(n)],
                                                           "q1_rad": [0.1234567 * (i % 7) for i in range(n)],
                                                           "q2_rad": [1.5] * n}}).encode(), 5),
    ]


def best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    decoder = msgspec.json.Decoder()
    print(f"{'body':<22} {'decode only':>12} {'parse_object':>13} {'ratio':>6}")
    for name, raw, number in bodies():
        peer = best_us(lambda: decoder.decode(raw), number)
        ours = best_us(lambda: parse_object(raw, max_bytes=len(raw)), number)
        print(f"{name:<22} {peer:>10.1f} µs {ours:>10.1f} µs {ours / peer:>6.2f}")


if __name__ == "__main__":
    main()
