"""The Gilbert–Elliott chain alone (no namespaces): long-run loss, burst lengths and the state's
burst lengths match the closed forms over 400 000 seeded steps (tolerances ±10 %, about three
standard deviations for the rarest bursts here, ~400 of them: this is arithmetic, not timing),
and the same seed gives the same losses."""

from __future__ import annotations

import random
import statistics

import pytest

from linkemu import GilbertElliott
from linkemu.gilbert_elliott import LossChain

STEPS = 400_000
TOLERANCE = 0.10


def runs_of(flags: list[bool]) -> list[int]:
    runs, current = [], 0
    for lost in flags:
        if lost:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


@pytest.mark.parametrize("params", [GilbertElliott(p_bad=0.02, p_good=0.25), GilbertElliott(p_bad=0.001, p_good=0.1),
                                    GilbertElliott(p_bad=0.05, p_good=0.5)])
def test_loss_and_bursts_match_the_closed_forms(params):
    chain = LossChain(params, random.Random(11))
    lost = [chain.lose() for _ in range(STEPS)]
    assert abs(sum(lost) / STEPS - params.mean_loss) <= TOLERANCE * params.mean_loss
    mean_run = statistics.mean(runs_of(lost))
    assert abs(mean_run - params.mean_burst_packets) <= TOLERANCE * params.mean_burst_packets


def test_partial_loss_in_each_state():
    params = GilbertElliott(p_bad=0.1, p_good=0.1, loss_good=0.01, loss_bad=0.5)  # half the time bad
    chain = LossChain(params, random.Random(5))
    lost = sum(chain.lose() for _ in range(STEPS)) / STEPS
    assert abs(lost - (0.5 * 0.01 + 0.5 * 0.5)) <= TOLERANCE * params.mean_loss


def test_same_seed_same_losses():
    params = GilbertElliott(p_bad=0.02, p_good=0.25)
    a, b = LossChain(params, random.Random(3)), LossChain(params, random.Random(3))
    assert [a.lose() for _ in range(5000)] == [b.lose() for _ in range(5000)]
