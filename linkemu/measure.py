"""How close a link comes to its profile: each direction's one-way delay, jitter, loss and rate, measured
with :mod:`linkemu.traffic` (``python -m linkemu measure [PROFILE …]`` prints the table that
docs/networks.md quotes).

* delay and jitter: 150 probes 20 ms apart, kernel receive stamps; median, 5th and 95th
  percentiles and the standard deviation (a uniform ±j has ``j / √3``);
* loss: 2,000 probes 2 ms apart (random and bursty loss together), and the mean length of
  the runs of lost probes;
* rate: a UDP flood offered at 1.5 × the cap for 3 s, the rate delivered after 0.5 s (expected:
  the cap × (1 − loss), since every loss comes after the queue).

Figures, not verdicts: the tests (tests/linkemu/test_link.py) hold the tolerances.
"""

from __future__ import annotations

import statistics

import msgspec

from linkemu.link import Link
from linkemu.profiles import Profile, profile as lookup_profile
from linkemu.traffic import probe, udp_rate_bit_s


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure_direction(link: Link, which: str) -> dict[str, float]:
    d = link.profile.direction(which)
    timing = probe(link, which, 150, 0.02)
    delays = timing.delays_s or [float("nan")]
    losses = probe(link, which, 2000, 0.002, port=40004)
    runs = losses.loss_runs()
    out = {"delay_ms": statistics.median(delays) * 1e3, "p5_ms": _percentile(delays, 5) * 1e3,
           "p95_ms": _percentile(delays, 95) * 1e3, "sd_ms": statistics.pstdev(delays) * 1e3,
           "loss": losses.loss, "mean_run": statistics.mean(runs) if runs else 0.0}
    if d.rate_bit_s is not None:
        out["rate_bit_s"] = udp_rate_bit_s(link, which, 1.5 * d.rate_bit_s, seconds=3.0)
    return out


def measure(name_or_profile: str | Profile) -> dict[str, dict[str, float]]:
    """Bring a link up on the profile (its blackout schedule left out) and measure both directions."""
    p = lookup_profile(name_or_profile)
    with Link(msgspec.structs.replace(p, blackouts=None), seed=1) as link:
        return {which: measure_direction(link, which) for which in ("uplink", "downlink")}


def expected(d) -> dict[str, float]:
    """What the profile promises, in :func:`measure_direction`'s terms."""
    loss = 1 - (1 - d.loss) * (1 - (d.bursts.mean_loss if d.bursts else 0.0))
    # the flood is measured where it arrives, after the losses (all of them come after the queue)
    return {"delay_ms": d.delay_s * 1e3, "sd_ms": d.jitter_s / 3 ** 0.5 * 1e3, "loss": loss,
            "rate_bit_s": (d.rate_bit_s or float("nan")) * (1 - loss)}


def table(names: list[str]) -> str:
    rows = ["| profile | direction | delay median (p5–p95) ms, set | jitter sd ms, expected | loss, set (mean run) "
            "| rate Mbit/s, set × (1 − loss) |", "|---|---|---|---|---|---|"]
    for name in names:
        p = lookup_profile(name)
        for which, m in measure(p).items():
            e = expected(p.direction(which))
            rate = (f"{m['rate_bit_s'] / 1e6:.3g}, {e['rate_bit_s'] / 1e6:g}" if "rate_bit_s" in m else "—")
            rows.append(f"| {p.name} | {which} | {m['delay_ms']:.1f} ({m['p5_ms']:.1f}–{m['p95_ms']:.1f}), "
                        f"{e['delay_ms']:g} | {m['sd_ms']:.1f}, {e['sd_ms']:.1f} | {m['loss']:.2%}, {e['loss']:.2%} "
                        f"({m['mean_run']:.1f}) | {rate} |")
    return "\n".join(rows)
