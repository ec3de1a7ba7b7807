"""The Gilbert–Elliott loss chain the delay line steps once per packet.

Random (Bernoulli) loss spreads drops evenly; radio links lose packets in runs (fading, a
microwave oven, a handover), which hurts TCP and video far more than the same mean loss
spread thin: a run of 4 losses costs TCP a retransmission timeout where 4 single losses
cost four fast retransmits. The chain (parameters in :class:`~linkemu.profiles.GilbertElliott`)
is stepped *before* the packet's fate is drawn, as netem's ``loss gemodel`` does, so a run of
bad-state packets has a geometric length of mean ``1 / p_good``.

>>> import random
>>> chain = LossChain(GilbertElliott(p_bad=0.05, p_good=0.5), random.Random(1))
>>> lost = [chain.lose() for _ in range(20000)]
>>> round(sum(lost) / len(lost), 2)  # mean_loss = 0.05 / 0.55
0.09
"""

from __future__ import annotations

import random

from linkemu.profiles import GilbertElliott


class LossChain:
    """One direction's chain state; not thread-safe (the delay line is single-threaded)."""

    def __init__(self, params: GilbertElliott, rng: random.Random) -> None:
        self.params = params
        self.rng = rng
        self.bad = False

    def lose(self) -> bool:
        """Step the chain for one packet; True if that packet is lost."""
        p = self.params
        r = self.rng.random
        if self.bad:
            if r() < p.p_good:
                self.bad = False
        elif r() < p.p_bad:
            self.bad = True
        return r() < (p.loss_bad if self.bad else p.loss_good)
