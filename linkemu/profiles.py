"""Link profiles: what a link does to packets, per direction, as data.

A :class:`Profile` is a frozen msgspec struct: two :class:`Direction`\\ s (``uplink`` = robot →
operator, ``downlink`` = operator → robot; a robot's uplink is usually the thin one) and an
optional :class:`Blackouts` schedule. A running :class:`~linkemu.link.Link` takes a new one at
any time (``link.set_profile``); derive variants with :func:`msgspec.structs.replace`.

Where each field is applied (docs/networks.md has the path of a packet):

* ``rate_bit_s`` and ``queue_s``: a ``tbf`` qdisc in the middle namespace, the bottleneck
  queue; ``queue_s`` is how long the full queue takes to drain (tbf's ``latency``), so
  250 ms at 2 Mbit/s is 62.5 kB of bufferbloat. Rates count IP bytes.
* ``delay_s`` and ``jitter_s``: the delay line (``linkemu.delayline``) holds each packet
  ``delay_s`` plus a uniform draw in ``±jitter_s``, never releasing one before its
  predecessor (order kept, as on a real path; so packets closer together than
  ``2 · jitter_s`` see a little more than ``delay_s`` on average).
* ``loss``: random (Bernoulli) loss by nftables ``numgen random`` on the receiving
  namespace's input hook, after the queue: the packet used the link, then vanished, and the
  sender learns of it only from missing acknowledgements.
* ``bursts``: Gilbert–Elliott loss in the delay line (:mod:`linkemu.gilbert_elliott`).

The named profiles (:data:`PROFILES`) follow quic-interop-runner's scenarios and published
4G measurements (/work/shared/notes/networks.md); ``lan`` is capped at 100 Mbit/s so the
Python delay line (tens of thousands of packets a second) is never the bottleneck.

>>> p = PROFILES["4g"]
>>> p.uplink.rate_bit_s, p.downlink.rate_bit_s, p.uplink.delay_s, p.uplink.jitter_s, p.uplink.loss
(2000000.0, 10000000.0, 0.06, 0.02, 0.02)
>>> import msgspec
>>> slower = msgspec.structs.replace(p, uplink=msgspec.structs.replace(p.uplink, rate_bit_s=1e6))
>>> slower.uplink.rate_bit_s, slower.downlink.rate_bit_s
(1000000.0, 10000000.0)
>>> Direction(loss=1.5)
Traceback (most recent call last):
...
ValueError: loss must be within [0, 1], got 1.5
"""

from __future__ import annotations

import math

import msgspec


def _check_range(name: str, value: float | None, low: float, high: float = math.inf,
                 low_open: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < low or value > high or (low_open and value == low):
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]".replace("inf", "∞")
        raise ValueError(f"{name} must be within {bounds}, got {value!r}")


class GilbertElliott(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Bursty loss: a two-state Markov chain stepped once per packet (Gilbert 1960, Elliott 1963).

    ``p_bad`` = P(good → bad), ``p_good`` = P(bad → good); a packet is lost with probability
    ``loss_good`` in the good state and ``loss_bad`` in the bad one. With the defaults
    (0 and 1) losses come in runs of mean length ``1 / p_good`` packets.

    >>> ge = GilbertElliott(p_bad=0.01, p_good=0.25)
    >>> round(ge.mean_loss, 4), ge.mean_burst_packets
    (0.0385, 4.0)
    """

    p_bad: float
    p_good: float
    loss_good: float = 0.0
    loss_bad: float = 1.0

    def __post_init__(self) -> None:
        _check_range("bursts.p_bad", self.p_bad, 0.0, 1.0)
        _check_range("bursts.p_good", self.p_good, 0.0, 1.0, low_open=True)
        _check_range("bursts.loss_good", self.loss_good, 0.0, 1.0)
        _check_range("bursts.loss_bad", self.loss_bad, 0.0, 1.0)

    @property
    def p_in_bad(self) -> float:
        """Stationary probability of the bad state."""
        return self.p_bad / (self.p_bad + self.p_good)

    @property
    def mean_loss(self) -> float:
        """Long-run fraction of packets lost."""
        return self.p_in_bad * self.loss_bad + (1.0 - self.p_in_bad) * self.loss_good

    @property
    def mean_burst_packets(self) -> float:
        """Mean number of consecutive packets spent in the bad state."""
        return 1.0 / self.p_good


class Direction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What one direction of the link does. All times in seconds; loss as a fraction."""

    rate_bit_s: float | None = None  # None: no rate cap (nor queue)
    queue_s: float = 0.1
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0
    bursts: GilbertElliott | None = None

    def describe(self) -> str:
        """One line for people.

        >>> PROFILES["4g"].uplink.describe()
        '2 Mbit/s, 250 ms queue, 60 ± 20 ms, 2 % loss'
        """
        parts = [f"{self.rate_bit_s / 1e6:g} Mbit/s, {self.queue_s * 1e3:g} ms queue" if self.rate_bit_s
                 else "no rate cap"]
        parts.append(f"{self.delay_s * 1e3:g}" + (f" ± {self.jitter_s * 1e3:g}" if self.jitter_s else "") + " ms")
        if self.loss:
            parts.append(f"{self.loss * 100:g} % loss")
        if self.bursts:
            parts.append(f"bursts ({self.bursts.mean_loss * 100:.2g} % in runs of {self.bursts.mean_burst_packets:g})")
        return ", ".join(parts)

    def __post_init__(self) -> None:
        _check_range("rate_bit_s", self.rate_bit_s, 0.0, low_open=True)
        _check_range("queue_s", self.queue_s, 0.0, 60.0, low_open=True)
        _check_range("delay_s", self.delay_s, 0.0, 60.0)
        _check_range("jitter_s", self.jitter_s, 0.0, 60.0)
        _check_range("loss", self.loss, 0.0, 1.0)


class Blackouts(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A schedule of outages (a phone changing cells): both directions dark for ``off_s``,
    first ``first_s`` after the profile is applied, then every ``every_s`` (None: once)."""

    off_s: float
    first_s: float = 0.0
    every_s: float | None = None

    def __post_init__(self) -> None:
        _check_range("blackouts.off_s", self.off_s, 0.0, low_open=True)
        _check_range("blackouts.first_s", self.first_s, 0.0)
        _check_range("blackouts.every_s", self.every_s, self.off_s, low_open=True)


class Profile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A whole link: ``uplink`` is robot → operator, ``downlink`` operator → robot."""

    name: str
    uplink: Direction
    downlink: Direction
    blackouts: Blackouts | None = None

    def describe(self) -> str:
        """One line for people.

        >>> print(PROFILES["blackout"].describe().replace("; ", "\\n"))
        blackout: uplink 2 Mbit/s, 250 ms queue, 60 ± 20 ms, 2 % loss
        downlink 10 Mbit/s, 250 ms queue, 60 ± 20 ms, 2 % loss
        dark 3 s after 2 s, every 20 s
        """
        text = f"{self.name}: uplink {self.uplink.describe()}; downlink {self.downlink.describe()}"
        if self.blackouts:
            b = self.blackouts
            text += f"; dark {b.off_s:g} s after {b.first_s:g} s" + (f", every {b.every_s:g} s" if b.every_s else "")
        return text

    def direction(self, which: str) -> Direction:
        """``"uplink"`` or ``"downlink"``."""
        if which not in ("uplink", "downlink"):
            raise ValueError(f"a direction is 'uplink' or 'downlink', not {which!r}")
        return self.uplink if which == "uplink" else self.downlink


def symmetric(name: str, direction: Direction, blackouts: Blackouts | None = None) -> Profile:
    """A profile whose two directions are the same."""
    return Profile(name=name, uplink=direction, downlink=direction, blackouts=blackouts)


_FOUR_G_UP = Direction(rate_bit_s=2e6, queue_s=0.25, delay_s=0.060, jitter_s=0.020, loss=0.02)
_FOUR_G_DOWN = Direction(rate_bit_s=10e6, queue_s=0.25, delay_s=0.060, jitter_s=0.020, loss=0.02)

#: the named profiles; ``linkemu.profile(name)`` looks one up with a clear error
PROFILES: dict[str, Profile] = {p.name: p for p in (
    symmetric("lan", Direction(rate_bit_s=100e6, queue_s=0.02, delay_s=0.0005)),
    # home Wi-Fi: a few ms each way with some jitter, interference losses in short bursts
    Profile(name="wifi",
            uplink=Direction(rate_bit_s=20e6, queue_s=0.1, delay_s=0.003, jitter_s=0.002,
                             bursts=GilbertElliott(p_bad=0.002, p_good=0.5, loss_bad=0.5)),
            downlink=Direction(rate_bit_s=40e6, queue_s=0.1, delay_s=0.003, jitter_s=0.002,
                               bursts=GilbertElliott(p_bad=0.002, p_good=0.5, loss_bad=0.5))),
    Profile(name="4g", uplink=_FOUR_G_UP, downlink=_FOUR_G_DOWN),
    # the "thin link" measurement: 1 Mbit/s with a 400 ms queue, 5 % loss
    symmetric("bad", Direction(rate_bit_s=1e6, queue_s=0.4, delay_s=0.150, loss=0.05)),
    # geostationary: ~270 ms up and down plus processing
    symmetric("satellite", Direction(rate_bit_s=10e6, queue_s=0.25, delay_s=0.300)),
    # the 4g link, dark for 3 s two seconds after it is applied and every 20 s after that
    Profile(name="blackout", uplink=_FOUR_G_UP, downlink=_FOUR_G_DOWN,
            blackouts=Blackouts(off_s=3.0, first_s=2.0, every_s=20.0)),
)}


def profile(name_or_profile: str | Profile) -> Profile:
    """A profile by name (or the profile itself)."""
    if isinstance(name_or_profile, Profile):
        return name_or_profile
    try:
        return PROFILES[name_or_profile]
    except KeyError:
        raise ValueError(f"no link profile {name_or_profile!r}; the named ones are "
                         f"{', '.join(PROFILES)}") from None
